// Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW (non-fused, non-capturable path). Step t:
//   g = grad (negated when maximize);  Adam: g = g + weight_decay * p;  AdamW: p = p * (1 - lr * weight_decay)
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   amsgrad: v_max = max(v_max, v), and v_max stands for v below
//   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// NOTE: eps is added after the bias correction of sqrt(v), as PyTorch does; it is not sqrt(v_hat + eps).
#pragma once

#include <utility>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

// AdamW's options: Adam's, with PyTorch's default decoupled weight decay of 1e-2.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const AdamOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return decoupled_ ? "AdamW" : "Adam"; }

  // Keys: lr, beta1, beta2, eps, weight_decay, amsgrad, maximize.
  static std::map<std::string, double> to_map(const AdamOptions& o);
  static AdamOptions from_map(const std::map<std::string, double>& m, const char* op = "Adam");

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled_weight_decay);
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::unique_ptr<Optimizer>(new Adam(first.params, from_map(first.options, name()), decoupled_));
  }
  void validate_options(const std::map<std::string, double>& options) const override;

 private:
  bool decoupled_ = false;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const AdamWOptions& options) {
    add_param_group(std::move(params), to_map(convert(options)));
  }
  static AdamOptions convert(const AdamWOptions& o) {
    return {o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize};
  }
};

}  // namespace kiln::optim
