// Layer normalization over the last dim as one op, forward and backward, with no autograd: the differentiable
// version is kiln::layer_norm_rows (kiln/autograd/functions.h), which nn::functional::layer_norm uses after
// flattening the normalized dims into one.
//
// For row m of x (M, D): mean = sum_d x_d / D, var = sum_d (x_d - mean)^2 / D (biased, as layer norm defines
// it), rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd and y = xhat w + b (w = 1, b = 0 when undefined).
// With g = dL/dy and gw = g w:
//   dL/dx = rstd (gw - mean_d(gw) - xhat mean_d(gw xhat)),   dL/dw = sum_m g xhat,   dL/db = sum_m g.
#pragma once

#include "kiln/tensor/ops/op_list.h"
#include "kiln/tensor/tensor.h"

namespace kiln::ops {

struct LayerNormForward {
  Tensor y;     // (M, D), x's dtype
  Tensor mean;  // (M), float32 (float64 for float64 x)
  Tensor rstd;  // (M), as mean
};

// x: (M, D) floating; weight, bias: (D) or undefined.
LayerNormForward layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

struct LayerNormBackward {
  Tensor grad_x, grad_weight, grad_bias;  // each undefined where not wanted
};
// grad_y, x: (M, D); mean, rstd: the forward's; weight: the forward's (or undefined). want_* say which
// gradients to compute.
LayerNormBackward layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& weight, bool want_x, bool want_weight, bool want_bias);

}  // namespace kiln::ops
