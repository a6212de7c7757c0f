// Convolution and pooling. conv2d (and conv1d through it) and max_pool2d run as ops with kernels of their own
// (kiln/tensor/ops/conv.h: im2col + GEMM on the CPU) wherever the device has those kernels. Everywhere else,
// and as the reference the tests hold the kernels to, they are composites of views and GEMM: the patches of x
// are a strided view (unfold along height, then width), so each op is a copy of that view into a matrix and a
// product or a reduction; their gradients come from the ops they are made of (the unfold's gradient adds
// overlapping patches back up). Both paths support double backward (the kernels through conv.cpp's rules).
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/nn/functional.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/conv.h"

namespace kiln::nn::functional {

namespace {
struct Geometry {
  int64_t oh, ow;
  int64_t extra_h = 0, extra_w = 0;  // ceil_mode: how far the last windows run past the padded input
};

// Checks x (N, C, H, W) against a window geometry; the output size.
Geometry check_geometry(const char* op, const Tensor& x, Pair kernel, Pair stride, Pair padding, Pair dilation,
                        bool ceil_mode = false) {
  KILN_CHECK(x.dim() == 4, op, ": expected input (N, C, H, W), got ", shape_str(x.sizes()));
  KILN_CHECK(kernel.h > 0 && kernel.w > 0 && stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0 &&
                 padding.h >= 0 && padding.w >= 0,
             op, ": kernel, stride and dilation must be positive and padding non-negative");
  int64_t ekh = dilation.h * (kernel.h - 1) + 1, ekw = dilation.w * (kernel.w - 1) + 1;  // the window's extent
  int64_t H = x.size(2) + 2 * padding.h, W = x.size(3) + 2 * padding.w;
  KILN_CHECK(H >= ekh && W >= ekw, op, ": input of shape ", shape_str(x.sizes()), " with padding (", padding.h, ", ",
             padding.w, ") is smaller than the kernel's extent (", ekh, ", ", ekw, ")");
  Geometry g{ops::pool_out_size(x.size(2), kernel.h, stride.h, padding.h, dilation.h, ceil_mode),
             ops::pool_out_size(x.size(3), kernel.w, stride.w, padding.w, dilation.w, ceil_mode)};
  g.extra_h = std::max<int64_t>(0, (g.oh - 1) * stride.h + ekh - H);
  g.extra_w = std::max<int64_t>(0, (g.ow - 1) * stride.w + ekw - W);
  return g;
}

// x padded (and, for ceil_mode's last windows, extended past its end with pad_value) and cut into windows:
// (N, C, OH, OW, kh, kw).
Tensor windows(const char* op, const Tensor& x, Pair kernel, Pair stride, Pair padding, Pair dilation,
               double pad_value, Geometry* g, bool ceil_mode = false) {
  *g = check_geometry(op, x, kernel, stride, padding, dilation, ceil_mode);
  int64_t ekh = dilation.h * (kernel.h - 1) + 1, ekw = dilation.w * (kernel.w - 1) + 1;
  const bool padded = padding.h || padding.w || g->extra_h || g->extra_w;
  Tensor xp = padded ? kiln::pad(x, {padding.w, padding.w + g->extra_w, padding.h, padding.h + g->extra_h}, pad_value)
                     : x;
  Tensor p = xp.unfold(2, ekh, stride.h).unfold(3, ekw, stride.w);  // (N, C, OH, OW, ekh, ekw)
  if (dilation.h > 1) p = p.slice(4, 0, std::nullopt, dilation.h);
  if (dilation.w > 1) p = p.slice(5, 0, std::nullopt, dilation.w);
  return p;
}

// The kernels take floating tensors on a device that has all three conv kernels (forward and both backwards).
bool use_conv_kernels(const Tensor& x, const Tensor& weight) {
  DeviceType d = x.device().type;
  return is_floating(x.dtype()) && is_floating(weight.dtype()) && has_kernel<Op::conv2d>(d) &&
         has_kernel<Op::conv2d_backward_input>(d) && has_kernel<Op::conv2d_backward_weight>(d);
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding, Pair dilation,
              int64_t groups) {
  KILN_CHECK(weight.dim() == 4, "conv2d: weight must be (out_channels, in_channels / groups, kh, kw), got ",
             shape_str(weight.sizes()));
  KILN_CHECK(groups >= 1 && weight.size(0) % groups == 0, "conv2d: out_channels ", weight.size(0),
             " is not divisible by groups ", groups);
  KILN_CHECK(x.dim() == 4 && x.size(1) == weight.size(1) * groups, "conv2d: input of shape ", shape_str(x.sizes()),
             " needs ", weight.size(1) * groups, " channels for weight ", shape_str(weight.sizes()), " and groups ",
             groups);
  KILN_CHECK(!bias.defined() || bias.sizes() == Shape{weight.size(0)}, "conv2d: bias must be (", weight.size(0),
             "), got ", shape_str(bias.sizes()));
  const int64_t N = x.size(0), O = weight.size(0), kh = weight.size(2), kw = weight.size(3), G = groups;
  const int64_t cg = x.size(1) / G;  // input channels per group
  if (use_conv_kernels(x, weight)) {
    check_geometry("conv2d", x, {kh, kw}, stride, padding, dilation);
    Conv2dParams p;
    p.stride[0] = stride.h, p.stride[1] = stride.w;
    p.padding[0] = padding.h, p.padding[1] = padding.w;
    p.dilation[0] = dilation.h, p.dilation[1] = dilation.w;
    p.groups = groups;
    return kiln::conv2d(x, weight, bias, p);
  }
  Geometry geo{};
  Tensor p = windows("conv2d", x, {kh, kw}, stride, padding, dilation, 0.0, &geo);  // (N, C, OH, OW, kh, kw)
  const int64_t rows = N * geo.oh * geo.ow, k = cg * kh * kw;
  if (G == 1) {
    // im2col: the patches as rows (N OH OW, C kh kw), times the weight as columns (C kh kw, O).
    Tensor cols = p.permute({0, 2, 3, 1, 4, 5}).reshape({rows, k});
    Tensor w = weight.reshape({O, k}).t();
    Tensor y = bias.defined() ? addmm(bias, cols, w) : mm(cols, w);  // (N OH OW, O)
    return y.view({N, geo.oh, geo.ow, O}).permute({0, 3, 1, 2}).contiguous();
  }
  // Groups: one product per group, batched.
  Tensor cols = p.view({N, G, cg, geo.oh, geo.ow, kh, kw}).permute({1, 0, 3, 4, 2, 5, 6}).reshape({G, rows, k});
  Tensor w = weight.reshape({G, O / G, k}).transpose(1, 2);  // (G, k, O/G)
  Tensor y = bmm(cols, w);                                   // (G, N OH OW, O/G)
  y = y.view({G, N, geo.oh, geo.ow, O / G}).permute({1, 0, 4, 2, 3}).reshape({N, O, geo.oh, geo.ow});
  return bias.defined() ? y + bias.view({1, O, 1, 1}) : y;
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  KILN_CHECK(x.dim() == 3 && weight.dim() == 3, "conv1d: expected input (N, C, L) and weight (O, C / groups, k), got ",
             shape_str(x.sizes()), " and ", shape_str(weight.sizes()));
  Tensor y = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation}, groups);
  return y.squeeze(2);
}

// Through the conv kernels only: the transposed convolution is conv2d's gradient with respect to its input
// (kiln/autograd/functions/conv.cpp).
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding,
                        Pair output_padding, int64_t groups, Pair dilation) {
  KILN_CHECK(weight.dim() == 4, "conv_transpose2d: weight must be (in_channels, out_channels / groups, kh, kw), got ",
             shape_str(weight.sizes()));
  KILN_CHECK(groups >= 1 && weight.size(0) % groups == 0, "conv_transpose2d: in_channels ", weight.size(0),
             " is not divisible by groups ", groups);
  KILN_CHECK(x.dim() == 4 && x.size(1) == weight.size(0), "conv_transpose2d: input of shape ", shape_str(x.sizes()),
             " needs ", weight.size(0), " channels for weight ", shape_str(weight.sizes()));
  const int64_t out_channels = weight.size(1) * groups;
  KILN_CHECK(!bias.defined() || bias.sizes() == Shape{out_channels}, "conv_transpose2d: bias must be (",
             out_channels, "), got ", shape_str(bias.sizes()));
  KILN_CHECK(stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0 && padding.h >= 0 && padding.w >= 0,
             "conv_transpose2d: stride and dilation must be positive and padding non-negative");
  KILN_CHECK(output_padding.h >= 0 && output_padding.w >= 0 &&
                 output_padding.h < std::max(stride.h, dilation.h) && output_padding.w < std::max(stride.w, dilation.w),
             "conv_transpose2d: output_padding (", output_padding.h, ", ", output_padding.w,
             ") must be smaller than the stride or the dilation, (", stride.h, ", ", stride.w, ") and (", dilation.h,
             ", ", dilation.w, ")");
  KILN_CHECK(is_floating(x.dtype()) && is_floating(weight.dtype()) && use_conv_kernels(x, weight),
             "conv_transpose2d: needs floating tensors on a device with convolution kernels, got ", x.dtype(), " on ",
             x.device());
  // The size of the input of the conv2d whose gradient this is: its output is x's size.
  const int64_t oh = (x.size(2) - 1) * stride.h - 2 * padding.h + dilation.h * (weight.size(2) - 1) +
                     output_padding.h + 1;
  const int64_t ow = (x.size(3) - 1) * stride.w - 2 * padding.w + dilation.w * (weight.size(3) - 1) +
                     output_padding.w + 1;
  KILN_CHECK(oh > 0 && ow > 0, "conv_transpose2d: input of shape ", shape_str(x.sizes()), " gives an output of ",
             oh, " x ", ow, "; the padding is too large");
  Conv2dParams p;
  p.stride[0] = stride.h, p.stride[1] = stride.w;
  p.padding[0] = padding.h, p.padding[1] = padding.w;
  p.dilation[0] = dilation.h, p.dilation[1] = dilation.w;
  p.groups = groups;
  return kiln::conv_transpose2d(x, weight, bias, p, {x.size(0), out_channels, oh, ow});
}

namespace {
// Pooling accepts (C, H, W) too, as PyTorch does.
Tensor batched(const Tensor& x, bool* added) {
  *added = x.dim() == 3;
  return *added ? x.unsqueeze(0) : x;
}

// The max-pool kernels take floating tensors on a device that has both (forward and backward).
bool use_max_pool_kernels(const Tensor& x) {
  const DeviceType d = x.device().type;
  return is_floating(x.dtype()) && has_kernel<Op::max_pool2d>(d) && has_kernel<Op::max_pool2d_backward>(d);
}

// Values and indices of (N, C, H, W) x from the kernels, the geometry checked first (naming op).
std::pair<Tensor, Tensor> max_pool_by_kernels(const char* op, const Tensor& x, Pair kernel, Pair stride, Pair padding,
                                              Pair dilation, bool ceil_mode) {
  check_geometry(op, x, kernel, stride, padding, dilation, ceil_mode);
  Pool2dParams p;
  p.kernel[0] = kernel.h, p.kernel[1] = kernel.w;
  p.stride[0] = stride.h, p.stride[1] = stride.w;
  p.padding[0] = padding.h, p.padding[1] = padding.w;
  p.dilation[0] = dilation.h, p.dilation[1] = dilation.w;
  p.ceil_mode = ceil_mode;
  return kiln::max_pool2d_with_indices(x, p);
}
}  // namespace

Tensor max_pool2d(const Tensor& x_in, Pair kernel, std::optional<Pair> stride, Pair padding, Pair dilation,
                  bool ceil_mode) {
  KILN_CHECK(padding.h * 2 <= kernel.h && padding.w * 2 <= kernel.w, "max_pool2d: padding (", padding.h, ", ",
             padding.w, ") must be at most half the kernel (", kernel.h, ", ", kernel.w, ")");
  bool added;
  Tensor x = batched(x_in, &added);
  if (use_max_pool_kernels(x)) {
    Tensor y = max_pool_by_kernels("max_pool2d", x, kernel, stride.value_or(kernel), padding, dilation, ceil_mode)
                   .first;
    return added ? y.squeeze(0) : y;
  }
  Geometry geo{};
  Tensor p = windows("max_pool2d", x, kernel, stride.value_or(kernel), padding, dilation,
                     -std::numeric_limits<double>::infinity(), &geo, ceil_mode);
  Tensor flat = p.reshape({x.size(0), x.size(1), geo.oh, geo.ow, kernel.h * kernel.w});
  Tensor y = max(flat, -1).first;
  return added ? y.squeeze(0) : y;
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x_in, Pair kernel, std::optional<Pair> stride,
                                                  Pair padding, Pair dilation, bool ceil_mode) {
  bool added;
  Tensor x = batched(x_in, &added);
  KILN_CHECK(use_max_pool_kernels(x), "max_pool2d_with_indices: expected a floating-point input on a device with "
             "the max-pool kernels, got ", x.dtype(), " on ", x.device());
  KILN_CHECK(padding.h * 2 <= kernel.h && padding.w * 2 <= kernel.w, "max_pool2d_with_indices: padding (", padding.h,
             ", ", padding.w, ") must be at most half the kernel (", kernel.h, ", ", kernel.w, ")");
  auto [y, indices] = max_pool_by_kernels("max_pool2d_with_indices", x, kernel, stride.value_or(kernel), padding,
                                          dilation, ceil_mode);
  if (added) return {y.squeeze(0), indices.squeeze(0)};
  return {y, indices};
}

std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel, std::optional<int64_t> stride,
                                                  int64_t padding, int64_t dilation, bool ceil_mode) {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "max_pool1d_with_indices: expected input (N, C, L) or (C, L), got ",
             shape_str(x.sizes()));
  // Over a height of one, h * L + l is l.
  auto [y, indices] = max_pool2d_with_indices(x.unsqueeze(-2), {1, kernel}, Pair(1, stride.value_or(kernel)),
                                              {0, padding}, {1, dilation}, ceil_mode);
  return {y.squeeze(-2), indices.squeeze(-2)};
}

Tensor max_unpool2d(const Tensor& x_in, const Tensor& indices_in, Pair kernel, std::optional<Pair> stride,
                    Pair padding, std::optional<Pair> output_size) {
  KILN_CHECK(x_in.defined() && indices_in.defined(), "max_unpool2d: an input tensor is undefined");
  KILN_CHECK(x_in.dim() == 3 || x_in.dim() == 4, "max_unpool2d: expected input (N, C, H, W) or (C, H, W), got ",
             shape_str(x_in.sizes()));
  KILN_CHECK(indices_in.sizes() == x_in.sizes() && indices_in.dtype() == kInt64, "max_unpool2d: indices must be int64 "
             "of the input's shape ", shape_str(x_in.sizes()), ", got ", indices_in.dtype(), " ",
             shape_str(indices_in.sizes()));
  bool added;
  Tensor x = batched(x_in, &added);
  Tensor indices = added ? indices_in.unsqueeze(0) : indices_in;
  const Pair s = stride.value_or(kernel);
  const Pair out = output_size.value_or(Pair((x.size(2) - 1) * s.h - 2 * padding.h + kernel.h,
                                             (x.size(3) - 1) * s.w - 2 * padding.w + kernel.w));
  KILN_CHECK(out.h > 0 && out.w > 0, "max_unpool2d: the output size (", out.h, ", ", out.w, ") must be positive");
  const int64_t N = x.size(0), C = x.size(1), plane = out.h * out.w;
  if (indices.numel() > 0) {
    const int64_t lo = indices.min().item<int64_t>(), hi = indices.max().item<int64_t>();
    KILN_CHECK(lo >= 0 && hi < plane, "max_unpool2d: index ", lo < 0 ? lo : hi, " is outside the output plane of ",
               out.h, " x ", out.w, " = ", plane, " positions");
  }
  Tensor zero = zeros({N, C, plane}, TensorOptions(x.dtype()).device(x.device()));
  Tensor y = scatter(zero, 2, indices.reshape({N, C, -1}), x.reshape({N, C, -1})).view({N, C, out.h, out.w});
  return added ? y.squeeze(0) : y;
}

Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t kernel, std::optional<int64_t> stride,
                    int64_t padding, std::optional<int64_t> output_size) {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "max_unpool1d: expected input (N, C, L) or (C, L), got ",
             shape_str(x.sizes()));
  std::optional<Pair> out;
  if (output_size) out = Pair(1, *output_size);
  return max_unpool2d(x.unsqueeze(-2), indices.unsqueeze(-2), {1, kernel}, Pair(1, stride.value_or(kernel)),
                      {0, padding}, out)
      .squeeze(-2);
}

Tensor avg_pool2d(const Tensor& x_in, Pair kernel, std::optional<Pair> stride, Pair padding, bool count_include_pad,
                  bool ceil_mode, std::optional<int64_t> divisor_override) {
  KILN_CHECK(!divisor_override || *divisor_override != 0, "avg_pool2d: divisor_override must not be 0");
  bool added;
  Tensor x = batched(x_in, &added);
  Geometry geo{};
  Pair s = stride.value_or(kernel);
  Tensor p = windows("avg_pool2d", x, kernel, s, padding, 1, 0.0, &geo, ceil_mode);
  Tensor y;
  if (divisor_override) {
    y = p.sum({4, 5}) / static_cast<double>(*divisor_override);
  } else if ((count_include_pad || (padding.h == 0 && padding.w == 0)) && geo.extra_h == 0 && geo.extra_w == 0) {
    y = p.mean({4, 5});
  } else {
    // Divide by how many of each window's positions count: those inside the padded input with
    // count_include_pad, else those inside the input; never the part of a last window past the padded end.
    const TensorOptions o = TensorOptions(x.dtype()).device(x.device());
    Tensor counted = count_include_pad ? ones({1, 1, x.size(2) + 2 * padding.h, x.size(3) + 2 * padding.w}, o)
                                       : kiln::pad(ones({1, 1, x.size(2), x.size(3)}, o),
                                                   {padding.w, padding.w, padding.h, padding.h}, 0.0);
    Geometry g2{};
    // (ceil_mode over the already padded input may allow one more window than over x: narrowed away)
    Tensor count = windows("avg_pool2d", counted, kernel, s, 0, 1, 0.0, &g2, ceil_mode).sum({4, 5});
    y = p.sum({4, 5}) / count.narrow(2, 0, geo.oh).narrow(3, 0, geo.ow);
  }
  return added ? y.squeeze(0) : y;
}

// The 1-d pools run the 2-d ones over (N, C, 1, L), as conv1d does.
Tensor max_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride, int64_t padding, int64_t dilation,
                  bool ceil_mode) {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "max_pool1d: expected input (N, C, L) or (C, L), got ",
             shape_str(x.sizes()));
  KILN_CHECK(padding * 2 <= kernel, "max_pool1d: padding ", padding, " must be at most half the kernel ", kernel);
  return max_pool2d(x.unsqueeze(-2), {1, kernel}, Pair(1, stride.value_or(kernel)), {0, padding}, {1, dilation},
                    ceil_mode)
      .squeeze(-2);
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride, int64_t padding,
                  bool count_include_pad, bool ceil_mode) {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "avg_pool1d: expected input (N, C, L) or (C, L), got ",
             shape_str(x.sizes()));
  return avg_pool2d(x.unsqueeze(-2), {1, kernel}, Pair(1, stride.value_or(kernel)), {0, padding}, count_include_pad,
                    ceil_mode)
      .squeeze(-2);
}

Tensor adaptive_avg_pool2d(const Tensor& x_in, Pair output_size) {
  bool added;
  Tensor x = batched(x_in, &added);
  KILN_CHECK(x.dim() == 4 && output_size.h > 0 && output_size.w > 0, "adaptive_avg_pool2d: expected input (N, C, H, W) "
             "and a positive output size, got ", shape_str(x_in.sizes()));
  Tensor y = kiln::adaptive_avg_pool(x, {output_size.h, output_size.w});
  return added ? y.squeeze(0) : y;
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "adaptive_avg_pool1d: expected input (N, C, L) or (C, L), got ",
             shape_str(x.sizes()));
  return kiln::adaptive_avg_pool(x, {output_size});
}

Tensor adaptive_avg_pool3d(const Tensor& x, IntArrayRef output_size) {
  KILN_CHECK(x.dim() == 4 || x.dim() == 5, "adaptive_avg_pool3d: expected input (N, C, D, H, W) or (C, D, H, W), got ",
             shape_str(x.sizes()));
  KILN_CHECK(output_size.size() == 1 || output_size.size() == 3, "adaptive_avg_pool3d: output_size has ",
             output_size.size(), " values; give one, or (D, H, W)");
  const int64_t n = output_size[0];
  return kiln::adaptive_avg_pool(x, output_size.size() == 1 ? Shape{n, n, n} : output_size.vec());
}

// The argmax is a kernel (ops::adaptive_max_pool_indices, outside autograd); the values are x gathered there,
// so the gradient (a scatter_add of grad at the indices) and every higher order come from gather's rules.
std::pair<Tensor, Tensor> adaptive_max_pool_with_indices(const Tensor& x, IntArrayRef output_size) {
  const Tensor indices = ops::adaptive_max_pool_indices(x.detach(), output_size);
  const int64_t lead = x.dim() - static_cast<int64_t>(output_size.size());
  if (indices.numel() == 0) return {zeros(indices.sizes(), TensorOptions(x.dtype()).device(x.device())), indices};
  const Tensor values = gather(x.flatten(lead, -1), lead, indices.flatten(lead, -1)).view(indices.sizes());
  return {values, indices};
}

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size) {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "adaptive_max_pool1d: expected input (N, C, L) or (C, L), got ",
             shape_str(x.sizes()));
  return adaptive_max_pool_with_indices(x, {output_size}).first;
}

Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size) {
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, "adaptive_max_pool2d: expected input (N, C, H, W) or (C, H, W), got ",
             shape_str(x.sizes()));
  return adaptive_max_pool_with_indices(x, {output_size.h, output_size.w}).first;
}

Tensor adaptive_max_pool3d(const Tensor& x, IntArrayRef output_size) {
  KILN_CHECK(x.dim() == 4 || x.dim() == 5, "adaptive_max_pool3d: expected input (N, C, D, H, W) or (C, D, H, W), got ",
             shape_str(x.sizes()));
  KILN_CHECK(output_size.size() == 1 || output_size.size() == 3, "adaptive_max_pool3d: output_size has ",
             output_size.size(), " values; give one, or (D, H, W)");
  const int64_t n = output_size[0];
  return adaptive_max_pool_with_indices(x, output_size.size() == 1 ? Shape{n, n, n} : output_size.vec()).first;
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  // Under autocast: the statistics (and the running ones they update) in float32, as PyTorch computes them.
  // NOTE: the output is float32 here, where PyTorch's is the input's dtype; the next product casts it back.
  if (autocast::wants_float32({&x, &weight, &bias}))
    return batch_norm(autocast::float32(x), running_mean, running_var, autocast::float32(weight),
                      autocast::float32(bias), training, momentum, eps);
  KILN_CHECK(x.dim() >= 2, "batch_norm: expected input (N, C, ...), got ", shape_str(x.sizes()));
  const int64_t C = x.size(1);
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var come together (one of them is undefined)");
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    KILN_CHECK(!t->defined() || t->sizes() == Shape{C}, "batch_norm: running statistics, weight and bias must be (",
               C, ") for input of shape ", shape_str(x.sizes()), ", got ", shape_str(t->sizes()));
  // The fused op over (N, C, S), S the spatial dims flattened (1 for (N, C) input).
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  ops::BatchNormForward f =
      batch_norm_channels(x.reshape({x.size(0), C, S}), weight, bias, running_mean, running_var, eps, training);
  if (training && running_mean.defined()) {
    NoGradGuard no_grad;
    const int64_t count = x.size(0) * S;
    Tensor rm = running_mean, rv = running_var;
    ops::mul_(rm, 1 - momentum);
    ops::add_(rm, ops::to(f.mean, rm.dtype()), momentum);
    ops::mul_(rv, 1 - momentum);
    // the running variance is the unbiased one, as PyTorch keeps it
    ops::add_(rv, ops::to(f.var, rv.dtype()), momentum * static_cast<double>(count) / static_cast<double>(count - 1));
  }
  return f.y.view(x.sizes());
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (autocast::wants_float32({&x, &weight, &bias}))  // float32 under autocast
    return group_norm(autocast::float32(x), num_groups, autocast::float32(weight), autocast::float32(bias), eps);
  KILN_CHECK(x.dim() >= 2 && num_groups > 0 && x.size(1) % num_groups == 0, "group_norm: ", x.dim() >= 2 ? x.size(1) : 0,
             " channels cannot be split into ", num_groups, " groups (input ", shape_str(x.sizes()), ")");
  const int64_t N = x.size(0), C = x.size(1);
  Tensor g = x.reshape({N, num_groups, -1});
  Tensor centered = g - g.mean({2}, true);
  Tensor var = (centered * centered).mean({2}, true);
  Tensor y = (centered * rsqrt(var + eps)).view(x.sizes());
  Shape stat_shape(static_cast<size_t>(x.dim()), 1);
  stat_shape[1] = C;
  if (weight.defined()) y = y * weight.view(stat_shape);
  if (bias.defined()) y = y + bias.view(stat_shape);
  return y;
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  KILN_CHECK(x.dim() >= 3, "instance_norm: expected input (N, C, ...) with at least one position dim, got ",
             shape_str(x.sizes()));
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "instance_norm: give both running_mean and running_var, or neither");
  if (!use_input_stats) {
    KILN_CHECK(running_mean.defined(), "instance_norm: use_input_stats = false needs running_mean and running_var");
    return batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps);
  }
  const int64_t N = x.size(0), C = x.size(1);
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    const Tensor flat = x.detach().reshape({N, C, -1});
    KILN_CHECK(flat.size(2) > 1, "instance_norm: tracking running statistics needs more than one position per "
               "channel, got input ", shape_str(x.sizes()));
    const Tensor mean = flat.mean({2});                                         // (N, C)
    const Tensor var = ((flat - mean.unsqueeze(2)).pow(2.0)).sum({2}) / static_cast<double>(flat.size(2) - 1);
    Tensor rm = running_mean, rv = running_var;
    rm.copy_(rm * (1.0 - momentum) + mean.mean({0}).to(rm.dtype()) * momentum);
    rv.copy_(rv * (1.0 - momentum) + var.mean({0}).to(rv.dtype()) * momentum);
  }
  return group_norm(x, C, weight, bias, eps);
}

}  // namespace kiln::nn::functional
