// Layer and batch normalization as ops of their own, forward and backward, with no autograd: the
// differentiable versions are kiln::layer_norm_rows and kiln::batch_norm_channels (kiln/autograd/functions.h),
// which nn::functional::layer_norm and batch_norm use after flattening the normalized dims into one.
//
// Layer norm:
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

// Batch norm: for channel c of x (N, C, S) (S the spatial dims flattened, 1 for (N, C) input) and its M = N S
// values: mean_c and the biased var_c from the batch when training, the running statistics otherwise;
// rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd and y = xhat w_c + b_c. With g = dL/dy, sums over (N, S):
//   training: dL/dx = w rstd (g - sum(g) / M - xhat sum(g xhat) / M)   (mean and var depend on x)
//   eval:     dL/dx = w rstd g                                         (they are constants)
//   dL/dw = sum g xhat,   dL/db = sum g.
struct BatchNormForward {
  Tensor y;     // (N, C, S), x's dtype
  Tensor mean;  // (C), float32 (float64 for float64 x): the batch's when training, else the running ones
  Tensor var;   // (C), as mean; the batch's is biased (what normalizes the batch)
};

// x: (N, C, S) floating; weight, bias: (C) or undefined; running_mean, running_var: (C), needed when not training
// (and not read when training: updating them is the caller's business, from the returned batch statistics).
BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, double eps, bool training);

struct BatchNormBackward {
  Tensor grad_x, grad_weight, grad_bias;  // each undefined where not wanted
};
// grad_y, x: (N, C, S); mean, var: the forward's; weight: the forward's (or undefined).
BatchNormBackward batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                      const Tensor& weight, double eps, bool training, bool want_x, bool want_weight,
                                      bool want_bias);

// The pieces a batch norm whose statistics span several processes is made of (nn::functional::sync_batch_norm):
// the local statistics, an exchange of sums, then the eval-mode forward above with the totals' mean and var.
//
// The per-channel mean and biased var of x (N, C, S) alone, without normalizing: (C) each, in the statistics
// dtype (float32, float64 for float64 x). One value per channel is enough; with none they are 0.
struct BatchNormStats {
  Tensor mean, var;
};
BatchNormStats batch_norm_stats(const Tensor& x);

// The training-mode input gradient with the two sums given instead of taken from this x:
//   dL/dx = w rstd (g - sums[0] / count - xhat sums[1] / count),
// sums (2, C) in the statistics dtype holding sum g and sum g xhat over `count` values (the rows of every process;
// this x's are some of them). mean and var: the ones that normalized x. Returns (N, C, S) in x's dtype.
Tensor batch_norm_backward_input(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                 const Tensor& weight, const Tensor& sums, int64_t count, double eps);

}  // namespace kiln::ops
