// 2-d convolution and max pooling as ops with kernels of their own (NCHW), no autograd: the differentiable
// versions are in kiln/autograd/functions.h and nn::F::conv2d / max_pool2d use them when the device has a kernel.
//
// Each frontend checks the shapes once, makes the inputs contiguous in one floating dtype, allocates the
// outputs on the inputs' device and calls that device's kernel (op_list.h has the kernel contracts).
#pragma once

#include <utility>

#include "kiln/tensor/ops/op_list.h"
#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// The output size of one spatial dim: (in + 2 pad - dil (k - 1) - 1) / stride + 1.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation);
// Pooling's, as PyTorch's: the same with floor division, or with ceil_mode rounded up, keeping a last window
// only if it starts inside the input or its left padding. 0 or less: the window does not fit.
int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode);

// x: (N, Cin, H, W), weight: (Cout, Cin / groups, KH, KW), bias: (Cout) or undefined -> (N, Cout, OH, OW)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
// grad_out: (N, Cout, OH, OW), weight as above -> grad_x of shape input_shape (N, Cin, H, W)
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, IntArrayRef input_shape,
                             const Conv2dParams& p);
// grad_out: (N, Cout, OH, OW), x: (N, Cin, H, W) -> grad_weight of shape weight_shape (Cout, Cin / groups, KH, KW)
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, IntArrayRef weight_shape,
                              const Conv2dParams& p);

// x: (N, C, H, W) -> {out (N, C, OH, OW), indices (int64, same shape): h * W + w of each max in its plane}.
// A NaN wins its window; on ties the first index; padding is -inf and at most half the kernel.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p);
// grad_out, indices: (N, C, OH, OW) -> grad_x of shape input_shape (N, C, H, W)
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, IntArrayRef input_shape,
                           const Pool2dParams& p);

// Adaptive average pooling of x's last output_size.size() dims (one to three; the dims before them are batch
// and channels, at least one of them) to output_size: each output the mean of its bin (adaptive_pool.h).
Tensor adaptive_avg_pool(const Tensor& x, IntArrayRef output_size);
// grad_out: input_shape with its last dims pooled -> grad_x of shape input_shape
Tensor adaptive_avg_pool_backward(const Tensor& grad_out, IntArrayRef input_shape);
// Adaptive max pooling's argmax over the same bins: x's shape with its last output_size.size() dims pooled to
// output_size, int64, each the position of its bin's max within the pooled dims flattened (h * W + w for two);
// the first on ties, a NaN wins. The values are x gathered there (nn::F::adaptive_max_pool2d).
Tensor adaptive_max_pool_indices(const Tensor& x, IntArrayRef output_size);

}  // namespace kiln::ops
