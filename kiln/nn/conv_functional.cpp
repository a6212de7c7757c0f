// Convolution, pooling, unfold and fold. conv2d (and conv1d through it) and max_pool2d run as ops with kernels
// of their own (kiln/tensor/ops/conv.h: im2col + GEMM on the CPU) wherever the device has those kernels.
// Everywhere else, and as the reference the tests hold the kernels to, they are composites of views and GEMM:
// the patches of x are a strided view (unfold along height, then width), so each op is a copy of that view into
// a matrix and a product or a reduction; their gradients come from the ops they are made of (the unfold's
// gradient adds overlapping patches back up). Both paths support double backward (the kernels through
// conv.cpp's rules). The 3-d layers are composites over the 2-d ones.
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

std::pair<int64_t, int64_t> same_padding(int64_t kernel, int64_t dilation) {
  const int64_t total = dilation * (kernel - 1);
  return {total / 2, total - total / 2};
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, PadRule padding, Pair dilation,
              int64_t groups) {
  if (padding == PadRule::Valid) return conv2d(x, weight, bias, stride, 0, dilation, groups);
  KILN_CHECK(x.dim() == 4 && weight.dim() == 4, "conv2d: expected input (N, C, H, W) and weight (O, C / groups, kh, "
             "kw), got ", shape_str(x.sizes()), " and ", shape_str(weight.sizes()));
  KILN_CHECK(stride.h == 1 && stride.w == 1, "conv2d: padding=\"same\" needs stride 1, got (", stride.h, ", ",
             stride.w, ")");
  const auto [h0, h1] = same_padding(weight.size(2), dilation.h);
  const auto [w0, w1] = same_padding(weight.size(3), dilation.w);
  // Symmetric padding where the totals are even; an odd one's extra row or column goes after, padded here.
  const Tensor xp = (h1 != h0 || w1 != w0) ? kiln::pad(x, {0, w1 - w0, 0, h1 - h0}) : x;
  return conv2d(xp, weight, bias, 1, {h0, w0}, dilation, groups);
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, PadRule padding,
              int64_t dilation, int64_t groups) {
  KILN_CHECK(x.dim() == 3 && weight.dim() == 3, "conv1d: expected input (N, C, L) and weight (O, C / groups, k), got ",
             shape_str(x.sizes()), " and ", shape_str(weight.sizes()));
  KILN_CHECK(padding == PadRule::Valid || stride == 1, "conv1d: padding=\"same\" needs stride 1, got ", stride);
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, padding, {1, dilation}, groups).squeeze(2);
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Triple stride, Triple padding,
              Triple dilation, int64_t groups) {
  KILN_CHECK(weight.dim() == 5, "conv3d: weight must be (out_channels, in_channels / groups, kd, kh, kw), got ",
             shape_str(weight.sizes()));
  KILN_CHECK(groups >= 1 && weight.size(0) % groups == 0, "conv3d: out_channels ", weight.size(0),
             " is not divisible by groups ", groups);
  KILN_CHECK(x.dim() == 5 && x.size(1) == weight.size(1) * groups, "conv3d: input of shape ", shape_str(x.sizes()),
             " needs (N, C, D, H, W) with ", weight.size(1) * groups, " channels for weight ",
             shape_str(weight.sizes()), " and groups ", groups);
  KILN_CHECK(!bias.defined() || bias.sizes() == Shape{weight.size(0)}, "conv3d: bias must be (", weight.size(0),
             "), got ", shape_str(bias.sizes()));
  const int64_t s[3] = {stride.d, stride.h, stride.w}, p[3] = {padding.d, padding.h, padding.w},
                dil[3] = {dilation.d, dilation.h, dilation.w};
  for (int i = 0; i < 3; ++i) {
    KILN_CHECK(s[i] > 0 && dil[i] > 0 && p[i] >= 0, "conv3d: stride and dilation must be positive and padding "
               "non-negative, got (", stride.d, ", ", stride.h, ", ", stride.w, "), (", dilation.d, ", ", dilation.h,
               ", ", dilation.w, ") and (", padding.d, ", ", padding.h, ", ", padding.w, ")");
    const int64_t extent = dil[i] * (weight.size(2 + i) - 1) + 1;
    KILN_CHECK(x.size(2 + i) + 2 * p[i] >= extent, "conv3d: input of shape ", shape_str(x.sizes()), " with padding (",
               padding.d, ", ", padding.h, ", ", padding.w, ") is smaller than the kernel's extent in dim ", 2 + i,
               " (", extent, ")");
  }
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t O = weight.size(0), kd = weight.size(2), G = groups, cg = C / G;
  const int64_t extent = dilation.d * (kd - 1) + 1;
  const int64_t OD = (D + 2 * padding.d - extent) / stride.d + 1;
  // The kd input slices of each output depth: (N, C, OD, H, W, kd), a strided view of the depth-padded x.
  Tensor slices = (padding.d ? kiln::pad(x, {0, 0, 0, 0, padding.d, padding.d}) : x).unfold(2, extent, stride.d);
  if (dilation.d > 1) slices = slices.slice(5, 0, std::nullopt, dilation.d);
  // Stacked as channels group by group, (N OD, G kd cg, H, W), to meet the weight's taps as (O, kd cg, kh, kw).
  const Tensor stacked =
      slices.reshape({N, G, cg, OD, H, W, kd}).permute({0, 3, 1, 6, 2, 4, 5}).reshape({N * OD, G * kd * cg, H, W});
  const Tensor taps = weight.permute({0, 2, 1, 3, 4}).reshape({O, kd * cg, weight.size(3), weight.size(4)});
  const Tensor y = conv2d(stacked, taps, bias, {stride.h, stride.w}, {padding.h, padding.w},
                          {dilation.h, dilation.w}, G);  // (N OD, O, OH, OW)
  return y.view({N, OD, O, y.size(2), y.size(3)}).permute({0, 2, 1, 3, 4}).contiguous();
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Triple stride, PadRule padding,
              Triple dilation, int64_t groups) {
  if (padding == PadRule::Valid) return conv3d(x, weight, bias, stride, 0, dilation, groups);
  KILN_CHECK(x.dim() == 5 && weight.dim() == 5, "conv3d: expected input (N, C, D, H, W) and weight (O, C / groups, "
             "kd, kh, kw), got ", shape_str(x.sizes()), " and ", shape_str(weight.sizes()));
  KILN_CHECK(stride.d == 1 && stride.h == 1 && stride.w == 1, "conv3d: padding=\"same\" needs stride 1, got (",
             stride.d, ", ", stride.h, ", ", stride.w, ")");
  const auto [d0, d1] = same_padding(weight.size(2), dilation.d);
  const auto [h0, h1] = same_padding(weight.size(3), dilation.h);
  const auto [w0, w1] = same_padding(weight.size(4), dilation.w);
  const bool odd = d1 != d0 || h1 != h0 || w1 != w0;
  const Tensor xp = odd ? kiln::pad(x, {0, w1 - w0, 0, h1 - h0, 0, d1 - d0}) : x;
  return conv3d(xp, weight, bias, 1, {d0, h0, w0}, dilation, groups);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  KILN_CHECK(x.dim() == 3 && weight.dim() == 3, "conv_transpose1d: expected input (N, C, L) and weight (C, O / "
             "groups, k), got ", shape_str(x.sizes()), " and ", shape_str(weight.sizes()));
  return conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {0, output_padding},
                          groups, {1, dilation})
      .squeeze(2);
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Triple stride, Triple padding,
                        Triple output_padding, int64_t groups, Triple dilation) {
  KILN_CHECK(weight.dim() == 5, "conv_transpose3d: weight must be (in_channels, out_channels / groups, kd, kh, kw), "
             "got ", shape_str(weight.sizes()));
  KILN_CHECK(x.dim() == 5 && x.size(1) == weight.size(0), "conv_transpose3d: input of shape ", shape_str(x.sizes()),
             " needs (N, C, D, H, W) with ", weight.size(0), " channels for weight ", shape_str(weight.sizes()));
  KILN_CHECK(groups >= 1 && weight.size(0) % groups == 0, "conv_transpose3d: in_channels ", weight.size(0),
             " is not divisible by groups ", groups);
  KILN_CHECK(stride.d > 0 && dilation.d > 0 && padding.d >= 0 && output_padding.d >= 0 &&
                 output_padding.d < std::max(stride.d, dilation.d),
             "conv_transpose3d: in depth, stride ", stride.d, " and dilation ", dilation.d,
             " must be positive, padding ", padding.d, " non-negative and output_padding ", output_padding.d,
             " below the stride or the dilation");
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), G = groups;
  const int64_t kd = weight.size(2), og = weight.size(1), O = og * G;  // og: output channels per group
  KILN_CHECK(!bias.defined() || bias.sizes() == Shape{O}, "conv_transpose3d: bias must be (", O, "), got ",
             shape_str(bias.sizes()));
  const int64_t full = (D - 1) * stride.d + dilation.d * (kd - 1) + 1 + output_padding.d;  // before cropping
  const int64_t OD = full - 2 * padding.d;
  KILN_CHECK(OD > 0, "conv_transpose3d: input of shape ", shape_str(x.sizes()), " gives an output depth of ", OD,
             "; the padding is too large");
  // Every input depth through the 2-d transposed convolution, the kd taps as extra output channels laid out
  // (G, kd, og): (N D, G kd og, OH, OW).
  const Tensor taps = weight.permute({0, 2, 1, 3, 4}).reshape({C, kd * og, weight.size(3), weight.size(4)});
  const Tensor planes = x.permute({0, 2, 1, 3, 4}).reshape({N * D, C, x.size(3), x.size(4)});
  const Tensor z = conv_transpose2d(planes, taps, {}, {stride.h, stride.w}, {padding.h, padding.w},
                                    {output_padding.h, output_padding.w}, G, {dilation.h, dilation.w});
  const int64_t OH = z.size(2), OW = z.size(3);
  // Tap u of input depth i lands at depth i sd + u dd of the uncropped output: (N, kd D, O, OH, OW) added there.
  const Tensor src = z.view({N, D, G, kd, og, OH, OW}).permute({0, 3, 1, 2, 4, 5, 6}).reshape({N, kd * D, O, OH, OW});
  std::vector<int64_t> at(static_cast<size_t>(kd * D));
  for (int64_t u = 0; u < kd; ++u)
    for (int64_t i = 0; i < D; ++i) at[static_cast<size_t>(u * D + i)] = i * stride.d + u * dilation.d;
  const Tensor index = tensor(at, {kd * D}, TensorOptions(kInt64).device(x.device()));
  const Tensor sum = index_add(zeros({N, full, O, OH, OW}, TensorOptions(z.dtype()).device(z.device())), 1, index,
                               src);
  Tensor y = sum.narrow(1, padding.d, OD).permute({0, 2, 1, 3, 4});
  return bias.defined() ? y + bias.view({1, O, 1, 1, 1}) : y.contiguous();
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

Tensor max_pool2d(const Tensor& x_in, Pair kernel, OptionalSize<Pair> stride, Pair padding, Pair dilation,
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

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x_in, Pair kernel, OptionalSize<Pair> stride,
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

namespace {
// Average pooling over x's last kernel.size() dims, one dim at a time: each dim zero-padded (and, for ceil_mode's
// last window, extended), cut into windows and summed, so an output costs the sum of the kernel's sizes rather
// than their product. Then one division by each output's divisor: divisor_override, or the product over the dims
// of how many of its positions count (those in the padded input with count_include_pad, else those in the
// input; never the part of a ceil_mode window past the padded end), as PyTorch divides.
Tensor average_pool(const char* op, const Tensor& x, IntArrayRef kernel, IntArrayRef stride, IntArrayRef padding,
                    bool count_include_pad, bool ceil_mode, std::optional<int64_t> divisor_override) {
  KILN_CHECK(!divisor_override || *divisor_override != 0, op, ": divisor_override must not be 0");
  const int64_t dims = static_cast<int64_t>(kernel.size()), lead = x.dim() - dims;
  Tensor y = x;
  Shape out_shape(static_cast<size_t>(x.dim()), 1);
  std::vector<double> divisor{1.0};  // the outer product of the dims' counts, built up dim by dim
  for (int64_t i = 0; i < dims; ++i) {
    const int64_t dim = lead + i, in = x.size(dim), k = kernel[i], s = stride[i], p = padding[i];
    KILN_CHECK(k > 0 && s > 0 && p >= 0 && 2 * p <= k, op, ": kernel ", shape_str(kernel), " and stride ",
               shape_str(stride), " must be positive and padding ", shape_str(padding), " at most half the kernel");
    KILN_CHECK(in + 2 * p >= k, op, ": input of shape ", shape_str(x.sizes()), " with padding ", shape_str(padding),
               " is smaller than the kernel ", shape_str(kernel));
    const int64_t out = ops::pool_out_size(in, k, s, p, 1, ceil_mode);
    const int64_t extra = std::max<int64_t>(0, (out - 1) * s + k - (in + 2 * p));
    if (p || extra) {
      std::vector<int64_t> pads(static_cast<size_t>(2 * (x.dim() - dim)), 0);  // the last dim's pair first
      pads[pads.size() - 2] = p, pads[pads.size() - 1] = p + extra;
      y = kiln::pad(y, pads, 0.0);
    }
    y = y.unfold(dim, k, s).sum({y.dim()});
    out_shape[static_cast<size_t>(dim)] = out;
    std::vector<double> next;
    next.reserve(divisor.size() * static_cast<size_t>(out));
    for (double before : divisor)
      for (int64_t o = 0; o < out; ++o) {
        const int64_t start = o * s - p, end = std::min(start + k, in + p);
        const int64_t counted = count_include_pad ? end - start : std::min(end, in) - std::max<int64_t>(start, 0);
        next.push_back(before * static_cast<double>(counted));
      }
    divisor = std::move(next);
  }
  if (divisor_override) return y / static_cast<double>(*divisor_override);
  return y / tensor(divisor, out_shape, TensorOptions(y.dtype()).device(y.device()));
}
}  // namespace

Tensor avg_pool2d(const Tensor& x_in, Pair kernel, OptionalSize<Pair> stride, Pair padding, bool count_include_pad,
                  bool ceil_mode, std::optional<int64_t> divisor_override) {
  KILN_CHECK(x_in.dim() == 3 || x_in.dim() == 4, "avg_pool2d: expected input (N, C, H, W) or (C, H, W), got ",
             shape_str(x_in.sizes()));
  const Pair s = stride.value_or(kernel);
  return average_pool("avg_pool2d", x_in, {kernel.h, kernel.w}, {s.h, s.w}, {padding.h, padding.w}, count_include_pad,
                      ceil_mode, divisor_override);
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

Tensor unfold(const Tensor& x_in, Pair kernel, Pair dilation, Pair padding, Pair stride) {
  KILN_CHECK(x_in.dim() == 3 || x_in.dim() == 4, "unfold: expected input (N, C, H, W) or (C, H, W), got ",
             shape_str(x_in.sizes()));
  bool added;
  const Tensor x = batched(x_in, &added);
  Geometry g{};
  const Tensor blocks = windows("unfold", x, kernel, stride, padding, dilation, 0.0, &g);  // (N, C, OH, OW, kh, kw)
  const Tensor columns = blocks.permute({0, 1, 4, 5, 2, 3}).reshape({x.size(0), x.size(1) * kernel.h * kernel.w,
                                                                     g.oh * g.ow});
  return added ? columns.squeeze(0) : columns;
}

Tensor fold(const Tensor& columns_in, Pair output_size, Pair kernel, Pair dilation, Pair padding, Pair stride) {
  KILN_CHECK(columns_in.dim() == 2 || columns_in.dim() == 3, "fold: expected columns (N, C kh kw, L) or (C kh kw, L), "
             "got ", shape_str(columns_in.sizes()));
  KILN_CHECK(kernel.h > 0 && kernel.w > 0 && stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0 &&
                 padding.h >= 0 && padding.w >= 0 && output_size.h > 0 && output_size.w > 0,
             "fold: output size, kernel, stride and dilation must be positive and padding non-negative");
  const bool added = columns_in.dim() == 2;
  const Tensor columns = added ? columns_in.unsqueeze(0) : columns_in;
  const int64_t N = columns.size(0), K = kernel.h * kernel.w;
  KILN_CHECK(columns.size(1) % K == 0, "fold: ", columns.size(1), " rows of columns ", shape_str(columns_in.sizes()),
             " are not a multiple of the kernel's ", kernel.h, " x ", kernel.w, " = ", K, " positions");
  const int64_t C = columns.size(1) / K, Hp = output_size.h + 2 * padding.h, Wp = output_size.w + 2 * padding.w;
  const int64_t oh = ops::pool_out_size(output_size.h, kernel.h, stride.h, padding.h, dilation.h, false);
  const int64_t ow = ops::pool_out_size(output_size.w, kernel.w, stride.w, padding.w, dilation.w, false);
  KILN_CHECK(oh > 0 && ow > 0 && columns.size(2) == oh * ow, "fold: an output of ", output_size.h, " x ",
             output_size.w, " with this kernel, dilation, padding and stride has ", std::max<int64_t>(oh, 0), " x ",
             std::max<int64_t>(ow, 0), " blocks, but the columns ", shape_str(columns_in.sizes()), " hold ",
             columns.size(2));
  // Where each column entry (kernel row u, column v; block i, j) lands in the padded image, flattened.
  std::vector<int64_t> at;
  at.reserve(static_cast<size_t>(K * oh * ow));
  for (int64_t u = 0; u < kernel.h; ++u)
    for (int64_t v = 0; v < kernel.w; ++v)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          at.push_back((i * stride.h + u * dilation.h) * Wp + j * stride.w + v * dilation.w);
  const Tensor index = tensor(at, {K * oh * ow}, TensorOptions(kInt64).device(columns.device()));
  const Tensor image = index_add(zeros({N, C, Hp * Wp}, TensorOptions(columns.dtype()).device(columns.device())), 2,
                                 index, columns.reshape({N, C, K * oh * ow}))
                           .view({N, C, Hp, Wp})
                           .narrow(2, padding.h, output_size.h)
                           .narrow(3, padding.w, output_size.w);
  return added ? image.squeeze(0) : image;
}

Tensor avg_pool3d(const Tensor& x, Triple kernel, OptionalSize<Triple> stride_in, Triple padding,
                  bool count_include_pad, bool ceil_mode, std::optional<int64_t> divisor_override) {
  KILN_CHECK(x.dim() == 4 || x.dim() == 5, "avg_pool3d: expected input (N, C, D, H, W) or (C, D, H, W), got ",
             shape_str(x.sizes()));
  const Triple s = stride_in.value_or(kernel);
  return average_pool("avg_pool3d", x, {kernel.d, kernel.h, kernel.w}, {s.d, s.h, s.w},
                      {padding.d, padding.h, padding.w}, count_include_pad, ceil_mode, divisor_override);
}

namespace {
// What the LP pools share: x^p averaged over windows of `size` elements, scaled back to a sum, to the power 1/p.
// The sum is written as PyTorch writes it, sign(s) relu(|s|): the value of s, but a zero gradient through an
// all-zero window (where s's own would be 1), so gradients agree with PyTorch's there too.
void check_lp_pool(const char* op, const Tensor& x, int64_t spatial, double p) {
  KILN_CHECK(p > 0 && std::isfinite(p), op, ": norm_type must be positive and finite, got ", p);
  KILN_CHECK(x.dim() == spatial + 1 || x.dim() == spatial + 2, op, ": expected input (N, C, ...) or (C, ...) with ",
             spatial, " spatial dims, got shape ", shape_str(x.sizes()));
}
Tensor lp_from_average(const Tensor& average, double p, int64_t size) {
  return (average.sign() * average.abs().relu() * static_cast<double>(size)).pow(1.0 / p);
}
}  // namespace

Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel, std::optional<int64_t> stride, bool ceil_mode) {
  check_lp_pool("lp_pool1d", x, 1, norm_type);
  return lp_from_average(avg_pool1d(x.pow(norm_type), kernel, stride, 0, true, ceil_mode), norm_type, kernel);
}

Tensor lp_pool2d(const Tensor& x, double norm_type, Pair kernel, OptionalSize<Pair> stride, bool ceil_mode) {
  check_lp_pool("lp_pool2d", x, 2, norm_type);
  return lp_from_average(avg_pool2d(x.pow(norm_type), kernel, stride, 0, true, ceil_mode), norm_type,
                         kernel.h * kernel.w);
}

Tensor lp_pool3d(const Tensor& x, double norm_type, Triple kernel, OptionalSize<Triple> stride, bool ceil_mode) {
  check_lp_pool("lp_pool3d", x, 3, norm_type);
  return lp_from_average(avg_pool3d(x.pow(norm_type), kernel, stride, 0, true, ceil_mode), norm_type,
                         kernel.d * kernel.h * kernel.w);
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

}  // namespace kiln::nn::functional
