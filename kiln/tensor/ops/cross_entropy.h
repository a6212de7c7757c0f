// Cross-entropy over class indices as one op: log_softmax, the pick of the target's log-probability, class
// weights, ignore_index and label smoothing in a single pass over the logits, and the gradient in another.
// No autograd here: the differentiable version is kiln::cross_entropy_rows (kiln/autograd/functions.h), which
// nn::functional::cross_entropy uses for class-index targets.
//
// For row n with target t = target[n], logits z, lse = log(sum_c exp(z_c)), logp_c = z_c - lse, weights w (all
// 1 without a weight tensor), W = sum_c w_c and smoothing e:
//   loss[n]       = -(1 - e) w_t logp_t - (e / C) sum_c w_c logp_c        (PyTorch's cross_entropy per element)
//   row_weight[n] = w_t                                                    (the mean's denominator is its sum)
//   dloss/dz_c    = (1 - e) w_t (p_c - [c == t]) + (e / C) (W p_c - w_c),  p_c = exp(logp_c)
// and a row whose target is ignore_index has loss, row weight and gradient 0 (even when its logits are NaN,
// as PyTorch's kernel skips it). A target outside [0, C) that is not ignore_index is an error: at once on the
// CPU; on a GPU that row's loss is NaN and the next cross_entropy (or indexing op) call raises the error.
#pragma once

#include "kiln/tensor/ops/op_list.h"
#include "kiln/tensor/tensor.h"

namespace kiln::ops {

struct CrossEntropyForward {
  Tensor loss;        // (N), logits' dtype
  Tensor row_weight;  // (N), logits' dtype: w_t, 0 where ignored
  // (N, 2), float32 (float64 for float64 logits): each row's max m and log(sum_c exp(z_c - m)), what the
  // backward needs. Kept apart, not summed into the log-sum-exp: p_c = exp((z_c - m) - log_sum) stays exact to
  // the last bits where z_c - m is, while exp(z_c - lse) with a rounded lse of 1e4 loses three digits.
  Tensor stats;
};

// logits: (N, C) floating, target: (N) int64, weight: (C) or undefined.
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                          const CrossEntropyParams& p);
// grad_loss: (N), the rest as the forward's -> grad_logits (N, C) in logits' dtype.
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& stats, const Tensor& target,
                              const Tensor& weight, const CrossEntropyParams& p);

}  // namespace kiln::ops
