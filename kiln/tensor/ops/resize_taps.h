// One dim of a separable resize as a single op: each output position along `dim` is a weighted sum of a few
// input positions (its taps), the same taps and weights for every line along that dim. interpolate's nearest,
// linear and cubic modes are this, one spatial dim at a time (kiln/nn/interpolate.cpp computes the taps).
//
//   // idx, w: (taps, out): output d reads input idx[k][d] with weight w[k][d]
//   Tensor y = ops::resize_taps(x, 3, idx, w);                     // x (N, C, H, W) -> (N, C, H, out)
//   Tensor gx = ops::resize_taps_backward(gy, 3, idx, w, x.size(3)); // the adjoint: gy back onto x's positions
//
// The sum over taps runs in tap order, each product rounded before it is added (the kernels are compiled
// without fused multiply-adds), so the result has the bits of the composite sum(index_select(x, dim, idx[k]) *
// w[k]). The CPU has kernels for float32 and float64; other devices and dtypes take the composite (nn checks
// has_kernel).
#pragma once

#include <cstdint>

#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// x: any float32 or float64 tensor; idx: (taps, out) int64 in [0, x.size(dim)); w: (taps, out) in x's dtype;
// both on x's device. Returns x's shape with `out` along dim.
Tensor resize_taps(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& w);

// grad_out: resize_taps' output shape. Returns the input's shape with `in` along dim: each input position gets
// the sum of w[k][d] * grad_out at d over the (k, d) whose tap reads it.
Tensor resize_taps_backward(const Tensor& grad_out, int64_t dim, const Tensor& idx, const Tensor& w, int64_t in);

}  // namespace kiln::ops
