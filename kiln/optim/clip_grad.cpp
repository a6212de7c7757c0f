// clip_grad_norm_ and clip_grad_value_; see clip_grad.h.
#include "kiln/optim/clip_grad.h"

#include <cmath>
#include <limits>

namespace kiln::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  KILN_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 (or inf), got ", norm_type);
  KILN_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;

  const bool inf_norm = std::isinf(norm_type);
  double total = 0.0;
  for (const auto& g : grads) {
    double n = norm(g, norm_type).item<double>();
    if (inf_norm) total = std::isnan(n) || std::isnan(total) ? std::numeric_limits<double>::quiet_NaN() : std::max(total, n);
    else total += std::pow(n, norm_type);
  }
  if (!inf_norm) total = std::pow(total, 1.0 / norm_type);
  KILN_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
             " of the gradients is ", total, ", so they cannot be clipped; set error_if_nonfinite = false to scale "
             "them anyway");
  // NOTE: std::min(NaN, 1.0) returns its first argument, NaN: a NaN norm poisons the grads, as in PyTorch.
  double coef = std::min(max_norm / (total + 1e-6), 1.0);
  if (coef != 1.0)
    for (auto& g : grads) {
      Tensor grad = g;
      grad.mul_(coef);
    }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    Tensor grad = p.grad();
    clamp_(grad, -clip_value, clip_value);
  }
}

}  // namespace kiln::optim
