// Gradient clipping, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_. Both change grads in place and
// skip parameters without a grad.
#pragma once

#include <vector>

#include "kiln/autograd/autograd.h"

namespace kiln::optim {

// Scales every grad by min(1, max_norm / (total + 1e-6)), where total is the norm_type-norm of all grads
// taken together (the norm of the per-grad norms; norm_type = inf gives the largest |g|). Returns total.
// The per-grad norms are taken in the grads' dtype and combined in float64.
// A non-finite total (a NaN or Inf in some grad) throws a kiln::Error when error_if_nonfinite; otherwise the
// grads are scaled anyway, as PyTorch does: a NaN total makes every grad NaN, an Inf total multiplies them by 0
// (so their Inf elements become NaN). No grads at all: returns 0 and changes nothing.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every grad element to [-clip_value, clip_value]; clip_value must be >= 0.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace kiln::optim
