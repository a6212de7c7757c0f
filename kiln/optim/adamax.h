// Adamax, as torch.optim.Adamax: Adam with the infinity norm in place of the second moment. Step t:
//   g = grad (negated when maximize) + weight_decay * p
//   m = lerp(m, g, 1 - beta1);  u = max(beta2 * u, |g| + eps)
//   p = p - (lr / (1 - beta1^t)) * m / u
// NOTE: eps is added to |g| inside the max, as PyTorch does, so u is never 0.
#pragma once

#include <utility>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamaxOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool maximize = false;
};

class Adamax : public Optimizer {
 public:
  explicit Adamax(std::vector<Tensor> params, AdamaxOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const AdamaxOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "Adamax"; }

  // Keys: lr, beta1, beta2, eps, weight_decay, maximize.
  static std::map<std::string, double> to_map(const AdamaxOptions& o);
  static AdamaxOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<Adamax>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
