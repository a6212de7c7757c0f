// Rprop, as torch.optim.Rprop (resilient backpropagation, Riedmiller & Braun 1993): each element has its own
// step size, which grows by etaplus while its gradient keeps its sign and shrinks by etaminus when the sign
// flips; only the gradient's sign moves the parameter. Step t, element-wise:
//   g = grad (negated when maximize);  s = sign(g * g_prev)
//   step = clamp(step * (etaplus if s > 0, etaminus if s < 0, 1 if s == 0), step_size_min, step_size_max)
//   where s < 0: g = 0 (no move, and the next step sees no previous sign)
//   p = p - sign(g) * step;  g_prev = g
// Each element's step starts at the group's lr. For full-batch training (its noise-free gradients).
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct RpropOptions {
  double lr = 1e-2;  // the initial step size
  double etaminus = 0.5;
  double etaplus = 1.2;
  double step_size_min = 1e-6;
  double step_size_max = 50.0;
  bool maximize = false;
};

class Rprop : public Optimizer {
 public:
  explicit Rprop(std::vector<Tensor> params, RpropOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const RpropOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "Rprop"; }

  static std::map<std::string, double> to_map(const RpropOptions& o);
  static RpropOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<Rprop>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
