// Adagrad, as torch.optim.Adagrad. Step t:
//   g = grad (negated when maximize) + weight_decay * p
//   clr = lr / (1 + (t - 1) * lr_decay)
//   sum = sum + g * g      (sum starts at initial_accumulator_value)
//   p = p - clr * g / (sqrt(sum) + eps)
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

class Adagrad : public Optimizer {
 public:
  explicit Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const AdagradOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "Adagrad"; }

  static std::map<std::string, double> to_map(const AdagradOptions& o);
  static AdagradOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<Adagrad>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
