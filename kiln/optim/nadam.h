// NAdam, as torch.optim.NAdam (Dozat 2016): Adam with Nesterov momentum, whose momentum coefficient warms up
// with momentum_decay. Step t:
//   g = grad (negated when maximize);  g = g + weight_decay * p, or, with decoupled_weight_decay,
//   p = p * (1 - lr * weight_decay) (NAdamW)
//   mu_t = beta1 * (1 - 0.5 * 0.96^(t * momentum_decay));  mu_{t+1} likewise
//   mu_product = mu_1 * ... * mu_t   (kept in the state, as "mu_product")
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   denom = sqrt(v / (1 - beta2^t)) + eps
//   p = p - lr * (1 - mu_t) / (1 - mu_product) * g / denom
//         - lr * mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / denom
#pragma once

#include <utility>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct NAdamOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;
  bool maximize = false;
};

class NAdam : public Optimizer {
 public:
  explicit NAdam(std::vector<Tensor> params, NAdamOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const NAdamOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "NAdam"; }

  // Keys: lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize.
  static std::map<std::string, double> to_map(const NAdamOptions& o);
  static NAdamOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<NAdam>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
