// Frontends of convolution and max pooling: shape checks with messages that name the op and the shapes, one
// floating dtype, contiguous inputs, outputs allocated on the inputs' device, then that device's kernel.
#include "kiln/tensor/ops/conv.h"
#include "kiln/tensor/ops/spatial_canonical.h"

#include <algorithm>
#include <string>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // floor division: a window longer than the padded input gives 0 (an error), not the 1 truncation would give
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && out > 0 && (out - 1) * stride >= in + padding) --out;
  return out;
}

namespace {

std::string params_str(const Conv2dParams& p) {
  return "stride (" + std::to_string(p.stride[0]) + ", " + std::to_string(p.stride[1]) + "), padding (" +
         std::to_string(p.padding[0]) + ", " + std::to_string(p.padding[1]) + "), dilation (" +
         std::to_string(p.dilation[0]) + ", " + std::to_string(p.dilation[1]) + "), groups " +
         std::to_string(p.groups);
}

void check_params(const char* op, const Conv2dParams& p) {
  KILN_CHECK(p.stride[0] > 0 && p.stride[1] > 0 && p.dilation[0] > 0 && p.dilation[1] > 0 && p.padding[0] >= 0 &&
                 p.padding[1] >= 0 && p.groups >= 1,
             op, ": stride, dilation and groups must be positive and padding non-negative, got ", params_str(p));
}

// Checks x (N, Cin, H, W) against weight (Cout, Cin / groups, KH, KW) and returns the output shape.
Shape conv_output_shape(const char* op, IntArrayRef x, IntArrayRef w, const Conv2dParams& p) {
  check_params(op, p);
  KILN_CHECK(w.size() == 4, op, ": weight must be (out_channels, in_channels / groups, kh, kw), got ", shape_str(w));
  KILN_CHECK(x.size() == 4, op, ": expected input (N, C, H, W), got ", shape_str(x));
  KILN_CHECK(w[0] % p.groups == 0, op, ": out_channels ", w[0], " is not divisible by groups ", p.groups);
  KILN_CHECK(x[1] == w[1] * p.groups, op, ": input of shape ", shape_str(x), " needs ", w[1] * p.groups,
             " channels for weight ", shape_str(w), " and groups ", p.groups);
  int64_t oh = conv_out_size(x[2], w[2], p.stride[0], p.padding[0], p.dilation[0]);
  int64_t ow = conv_out_size(x[3], w[3], p.stride[1], p.padding[1], p.dilation[1]);
  KILN_CHECK(w[2] > 0 && w[3] > 0 && oh > 0 && ow > 0, op, ": input of shape ", shape_str(x), " is smaller than the ",
             "kernel ", shape_str(w), " with ", params_str(p), " (output would be ", oh, "x", ow, ")");
  return {x[0], w[0], oh, ow};
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), op, ": an input tensor is undefined");
  KILN_CHECK(a.device() == b.device(), op, ": expected tensors on one device, got ", a.device(), " and ", b.device());
}

DType floating_type(const char* op, const Tensor& a, const Tensor& b) {
  DType d = result_type(a, b);
  KILN_CHECK(is_floating(d), op, ": expected floating-point tensors, got ", a.dtype(), " and ", b.dtype());
  return d;
}

Tensor prepare(const Tensor& t, DType d) { return t.defined() ? contiguous(to(t, d)) : t; }

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  check_same_device("conv2d", x, weight);
  Shape out_shape = conv_output_shape("conv2d", x.sizes(), weight.sizes(), p);
  DType d = floating_type("conv2d", x, weight);
  if (bias.defined()) {
    KILN_CHECK(bias.sizes() == Shape{weight.size(0)}, "conv2d: bias must be (", weight.size(0), "), got ",
               shape_str(bias.sizes()));
    KILN_CHECK(bias.device() == x.device(), "conv2d: bias is on ", bias.device(), ", input on ", x.device());
    d = promote_types(d, bias.dtype());
  }
  Tensor out = empty(out_shape, TensorOptions(d).device(x.device()));
  if (out.numel() == 0) return out;
  if (weight.size(1) == 0) {  // no input channels: an empty sum, the output is the bias
    fill_(out, 0);
    if (bias.defined()) add_(out, view(to(bias, d), {1, weight.size(0), 1, 1}));
    return out;
  }
  call_kernel<Op::conv2d>(x.device(), out, prepare(x, d), prepare(weight, d), prepare(bias, d), p);
  return out;
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, IntArrayRef input_shape,
                             const Conv2dParams& p) {
  check_same_device("conv2d_backward_input", grad_out, weight);
  Shape expected = conv_output_shape("conv2d_backward_input", input_shape, weight.sizes(), p);
  KILN_CHECK(grad_out.sizes() == expected, "conv2d_backward_input: grad_out of shape ", shape_str(grad_out.sizes()),
             " does not match the output shape ", shape_str(expected), " of input ", shape_str(input_shape),
             " and weight ", shape_str(weight.sizes()));
  DType d = floating_type("conv2d_backward_input", grad_out, weight);
  Tensor grad_x = empty(input_shape, TensorOptions(d).device(weight.device()));
  if (grad_x.numel() == 0) return grad_x;
  if (grad_out.numel() == 0) return fill_(grad_x, 0);
  call_kernel<Op::conv2d_backward_input>(weight.device(), grad_x, prepare(grad_out, d), prepare(weight, d), p);
  return grad_x;
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, IntArrayRef weight_shape,
                              const Conv2dParams& p) {
  check_same_device("conv2d_backward_weight", grad_out, x);
  Shape expected = conv_output_shape("conv2d_backward_weight", x.sizes(), weight_shape, p);
  KILN_CHECK(grad_out.sizes() == expected, "conv2d_backward_weight: grad_out of shape ", shape_str(grad_out.sizes()),
             " does not match the output shape ", shape_str(expected), " of input ", shape_str(x.sizes()),
             " and weight ", shape_str(weight_shape));
  DType d = floating_type("conv2d_backward_weight", grad_out, x);
  Tensor grad_w = empty(weight_shape, TensorOptions(d).device(x.device()));
  if (grad_w.numel() == 0) return grad_w;
  if (grad_out.numel() == 0) return fill_(grad_w, 0);
  call_kernel<Op::conv2d_backward_weight>(x.device(), grad_w, prepare(grad_out, d), prepare(x, d), p);
  return grad_w;
}

namespace {

// Checks x (N, C, H, W) against the pooling geometry and returns the output shape.
Shape pool_output_shape(const char* op, IntArrayRef x, const Pool2dParams& p) {
  KILN_CHECK(x.size() == 4, op, ": expected input (N, C, H, W), got ", shape_str(x));
  KILN_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0 && p.stride[0] > 0 && p.stride[1] > 0 && p.dilation[0] > 0 &&
                 p.dilation[1] > 0 && p.padding[0] >= 0 && p.padding[1] >= 0,
             op, ": kernel, stride and dilation must be positive and padding non-negative");
  KILN_CHECK(p.padding[0] * 2 <= p.kernel[0] && p.padding[1] * 2 <= p.kernel[1], op, ": padding (", p.padding[0], ", ",
             p.padding[1], ") must be at most half the kernel (", p.kernel[0], ", ", p.kernel[1], ")");
  int64_t oh = pool_out_size(x[2], p.kernel[0], p.stride[0], p.padding[0], p.dilation[0], p.ceil_mode);
  int64_t ow = pool_out_size(x[3], p.kernel[1], p.stride[1], p.padding[1], p.dilation[1], p.ceil_mode);
  KILN_CHECK(oh > 0 && ow > 0, op, ": input of shape ", shape_str(x), " with padding (", p.padding[0], ", ",
             p.padding[1], ") is smaller than the kernel (", p.kernel[0], ", ", p.kernel[1], ") with dilation (",
             p.dilation[0], ", ", p.dilation[1], ")");
  return {x[0], x[1], oh, ow};
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p) {
  KILN_CHECK(x.defined(), "max_pool2d: the input tensor is undefined");
  Shape out_shape = pool_output_shape("max_pool2d", x.sizes(), p);
  KILN_CHECK(is_floating(x.dtype()), "max_pool2d: expected a floating-point tensor, got ", x.dtype());
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  Tensor indices = empty(out_shape, TensorOptions(kInt64).device(x.device()));
  if (out.numel() == 0) return {out, indices};
  call_kernel<Op::max_pool2d>(x.device(), out, indices, contiguous(x), p);
  return {out, indices};
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, IntArrayRef input_shape,
                           const Pool2dParams& p) {
  check_same_device("max_pool2d_backward", grad_out, indices);
  Shape expected = pool_output_shape("max_pool2d_backward", input_shape, p);
  KILN_CHECK(grad_out.sizes() == expected && indices.sizes() == expected, "max_pool2d_backward: grad_out ",
             shape_str(grad_out.sizes()), " and indices ", shape_str(indices.sizes()), " must both have the output ",
             "shape ", shape_str(expected), " of input ", shape_str(input_shape));
  KILN_CHECK(indices.dtype() == kInt64, "max_pool2d_backward: indices must be int64, got ", indices.dtype());
  KILN_CHECK(is_floating(grad_out.dtype()), "max_pool2d_backward: expected a floating-point grad_out, got ",
             grad_out.dtype());
  Tensor grad_x = empty(input_shape, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  if (grad_x.numel() == 0) return grad_x;
  if (grad_out.numel() == 0) return fill_(grad_x, 0);
  call_kernel<Op::max_pool2d_backward>(grad_out.device(), grad_x, contiguous(grad_out), contiguous(indices), p);
  return grad_x;
}

namespace {

void check_adaptive_shape(const char* op, IntArrayRef input_shape, IntArrayRef output_size) {
  const size_t k = output_size.size();
  KILN_CHECK(k >= 1 && k <= 3, op, ": expected one to three output sizes, got ", k);
  KILN_CHECK(input_shape.size() >= k + 1, op, ": pooling ", k, " dims needs an input of at least ", k + 1,
             " dims (batch or channels first), got shape ", shape_str(input_shape));
  for (size_t i = 0; i < k; ++i) {
    KILN_CHECK(output_size[i] > 0, op, ": output sizes must be positive, got ", shape_str(output_size));
    KILN_CHECK(input_shape[input_shape.size() - k + i] > 0, op, ": input of shape ", shape_str(input_shape),
               " has an empty dim to pool");
  }
}

}  // namespace

Tensor adaptive_avg_pool(const Tensor& x, IntArrayRef output_size) {
  KILN_CHECK(x.defined(), "adaptive_avg_pool: the input tensor is undefined");
  check_adaptive_shape("adaptive_avg_pool", x.sizes(), output_size);
  KILN_CHECK(is_floating(x.dtype()), "adaptive_avg_pool: expected a floating-point tensor, got ", x.dtype());
  const size_t k = output_size.size();
  Shape out_shape(x.sizes().begin(), x.sizes().end() - static_cast<std::ptrdiff_t>(k));
  out_shape.insert(out_shape.end(), output_size.begin(), output_size.end());
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  call_kernel<Op::adaptive_avg_pool>(x.device(), view(out, spatial_canonical(out_shape, k)),
                                     view(contiguous(x), spatial_canonical(x.sizes(), k)));
  return out;
}

Tensor adaptive_max_pool_indices(const Tensor& x, IntArrayRef output_size) {
  KILN_CHECK(x.defined(), "adaptive_max_pool: the input tensor is undefined");
  check_adaptive_shape("adaptive_max_pool", x.sizes(), output_size);
  KILN_CHECK(is_floating(x.dtype()), "adaptive_max_pool: expected a floating-point tensor, got ", x.dtype());
  const size_t k = output_size.size();
  Shape out_shape(x.sizes().begin(), x.sizes().end() - static_cast<std::ptrdiff_t>(k));
  out_shape.insert(out_shape.end(), output_size.begin(), output_size.end());
  Tensor indices = empty(out_shape, TensorOptions(kInt64).device(x.device()));
  if (indices.numel() == 0) return indices;
  call_kernel<Op::adaptive_max_pool>(x.device(), view(indices, spatial_canonical(out_shape, k)),
                                     view(contiguous(x), spatial_canonical(x.sizes(), k)));
  return indices;
}

Tensor adaptive_avg_pool_backward(const Tensor& grad_out, IntArrayRef input_shape) {
  KILN_CHECK(grad_out.defined(), "adaptive_avg_pool_backward: grad_out is undefined");
  KILN_CHECK(grad_out.dim() == static_cast<int64_t>(input_shape.size()), "adaptive_avg_pool_backward: grad_out ",
             shape_str(grad_out.sizes()), " and the input shape ", shape_str(input_shape), " differ in rank");
  // Pooling the last three dims (or all but the first) covers every case: a dim of equal sizes is bins of one.
  const size_t rank = input_shape.size();
  KILN_CHECK(rank >= 2, "adaptive_avg_pool_backward: expected an input of at least 2 dims, got shape ",
             shape_str(input_shape));
  const size_t k = std::min<size_t>(3, rank - 1);
  KILN_CHECK(is_floating(grad_out.dtype()), "adaptive_avg_pool_backward: expected a floating-point grad_out, got ",
             grad_out.dtype());
  Tensor grad_x = empty(input_shape, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  // An empty batch or channel dim (which the forward passes through) has an empty gradient; an empty pooled dim
  // is an error there, so it never reaches here.
  if (grad_x.numel() == 0 && grad_out.numel() == 0) return grad_x;
  check_adaptive_shape("adaptive_avg_pool_backward", input_shape, IntArrayRef(grad_out.sizes().data() + (rank - k), k));
  for (size_t i = 0; i + k < rank; ++i)
    KILN_CHECK(grad_out.size(static_cast<int64_t>(i)) == input_shape[i], "adaptive_avg_pool_backward: grad_out ",
               shape_str(grad_out.sizes()), " does not match the input shape ", shape_str(input_shape),
               " in dim ", i, ", which is not pooled");
  call_kernel<Op::adaptive_avg_pool_backward>(grad_out.device(), view(grad_x, spatial_canonical(input_shape, k)),
                                              view(contiguous(grad_out), spatial_canonical(grad_out.sizes(), k)));
  return grad_x;
}

}  // namespace kiln::ops
