// RMSprop, as torch.optim.RMSprop:
//   g = grad (negated when maximize) + weight_decay * p
//   v = alpha * v + (1 - alpha) * g * g
//   centered: a = lerp(a, g, 1 - alpha), avg = sqrt(v - a * a) + eps;  else avg = sqrt(v) + eps
//   momentum > 0: buf = momentum * buf + g / avg, p = p - lr * buf;  else p = p - lr * g / avg
// NOTE: eps is added outside the square root, as PyTorch does.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  // in [0, 1); torch accepts any alpha >= 0, though 1 and above leave no average
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const RMSpropOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "RMSprop"; }

  static std::map<std::string, double> to_map(const RMSpropOptions& o);
  static RMSpropOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<RMSprop>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
