// RAdam, as torch.optim.RAdam (Liu et al. 2019): Adam whose adaptive step is switched on only once the
// variance of the adaptive lr is tractable, and then scaled by a rectification term. Step t:
//   g = grad (negated when maximize);  g = g + weight_decay * p, or, with decoupled_weight_decay,
//   p = p * (1 - lr * weight_decay)
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   rho_inf = 2 / (1 - beta2) - 1;  rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
//   rho_t > 5:  r = sqrt((rho_t - 4) (rho_t - 2) rho_inf / ((rho_inf - 4) (rho_inf - 2) rho_t))
//               p = p - lr * m / (1 - beta1^t) * r * sqrt(1 - beta2^t) / (sqrt(v) + eps)
//   otherwise:  p = p - lr * m / (1 - beta1^t)          (SGD with momentum, for the first few steps)
#pragma once

#include <utility>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct RAdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
  bool maximize = false;
};

class RAdam : public Optimizer {
 public:
  explicit RAdam(std::vector<Tensor> params, RAdamOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const RAdamOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "RAdam"; }

  // Keys: lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize.
  static std::map<std::string, double> to_map(const RAdamOptions& o);
  static RAdamOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<RAdam>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
