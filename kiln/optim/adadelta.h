// Adadelta, as torch.optim.Adadelta (Zeiler 2012). Step t:
//   g = grad (negated when maximize) + weight_decay * p
//   v = rho v + (1 - rho) g^2                          (square_avg)
//   d = sqrt(u + eps) / sqrt(v + eps) * g              (u: acc_delta, the squared updates' average)
//   u = rho u + (1 - rho) d^2
//   p = p - lr d
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool maximize = false;
};

class Adadelta : public Optimizer {
 public:
  explicit Adadelta(std::vector<Tensor> params, AdadeltaOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const AdadeltaOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "Adadelta"; }

  static std::map<std::string, double> to_map(const AdadeltaOptions& o);
  static AdadeltaOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<Adadelta>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
