// The 3-d max pools, with and without indices, and the max unpools of every rank: what return_indices gives
// and max_unpool takes. The 3-d pools are separable composites over the 2-d max-pool kernel: each (H, W)
// plane's window maxima first, then windows along depth.
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "kiln/nn/functional.h"
#include "kiln/tensor/ops/conv.h"

namespace kiln::nn::functional {

namespace {
// Scatters x (N, C, spatial...) or (C, spatial...) into zeros of `out` per plane, at indices (x's shape, int64,
// positions within the plane), as max_unpool1d/2d/3d do.
Tensor unpool(const char* op, const Tensor& x_in, const Tensor& indices_in, const Shape& out) {
  const int64_t dims = static_cast<int64_t>(out.size());
  KILN_CHECK(x_in.defined() && indices_in.defined(), op, ": an input tensor is undefined");
  KILN_CHECK(x_in.dim() == dims + 1 || x_in.dim() == dims + 2, op, ": expected input (N, C, ...) or (C, ...) with ",
             dims, " spatial dims, got ", shape_str(x_in.sizes()));
  KILN_CHECK(indices_in.sizes() == x_in.sizes() && indices_in.dtype() == kInt64, op, ": indices must be int64 of "
             "the input's shape ", shape_str(x_in.sizes()), ", got ", indices_in.dtype(), " ",
             shape_str(indices_in.sizes()));
  const bool added = x_in.dim() == dims + 1;
  const Tensor x = added ? x_in.unsqueeze(0) : x_in;
  const Tensor indices = added ? indices_in.unsqueeze(0) : indices_in;
  for (int64_t s : out) KILN_CHECK(s > 0, op, ": the output size ", shape_str(out), " must be positive");
  const int64_t N = x.size(0), C = x.size(1), plane = shape_numel(out);
  if (indices.numel() > 0) {
    const int64_t lo = indices.min().item<int64_t>(), hi = indices.max().item<int64_t>();
    KILN_CHECK(lo >= 0 && hi < plane, op, ": index ", lo < 0 ? lo : hi, " is outside the output ",
               dims == 3 ? "volume" : "plane", " of ", shape_str(out), " = ", plane, " positions");
  }
  Shape full{N, C};
  full.insert(full.end(), out.begin(), out.end());
  const Tensor zero = zeros({N, C, plane}, TensorOptions(x.dtype()).device(x.device()));
  const Tensor y = scatter(zero, 2, indices.reshape({N, C, -1}), x.reshape({N, C, -1})).view(full);
  return added ? y.squeeze(0) : y;
}

// An unpooled size: (in - 1) stride - 2 padding + kernel.
int64_t unpooled(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  return (in - 1) * stride - 2 * padding + kernel;
}
}  // namespace

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, Pair kernel, OptionalSize<Pair> stride_in,
                    Pair padding, std::optional<Pair> output_size) {
  KILN_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), "max_unpool2d: expected input (N, C, H, W) or "
             "(C, H, W), got ", x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  const Pair s = stride_in.value_or(kernel);
  const Pair out = output_size.value_or(Pair(unpooled(x.size(-2), kernel.h, s.h, padding.h),
                                             unpooled(x.size(-1), kernel.w, s.w, padding.w)));
  return unpool("max_unpool2d", x, indices, {out.h, out.w});
}

Tensor max_unpool3d(const Tensor& x, const Tensor& indices, Triple kernel, OptionalSize<Triple> stride_in,
                    Triple padding, std::optional<Triple> output_size) {
  KILN_CHECK(x.defined() && (x.dim() == 4 || x.dim() == 5), "max_unpool3d: expected input (N, C, D, H, W) or "
             "(C, D, H, W), got ", x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  const Triple s = stride_in.value_or(kernel);
  const Triple out = output_size.value_or(Triple(unpooled(x.size(-3), kernel.d, s.d, padding.d),
                                                 unpooled(x.size(-2), kernel.h, s.h, padding.h),
                                                 unpooled(x.size(-1), kernel.w, s.w, padding.w)));
  return unpool("max_unpool3d", x, indices, {out.d, out.h, out.w});
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


namespace {
// One dim of a 3-d pool's depth: the output size, checked as the 2-d pools check theirs.
struct DepthWindows {
  int64_t out, extent, extra;  // extra: how far a ceil_mode last window runs past the padded end
};
DepthWindows depth_windows(const char* op, const Tensor& x, Triple kernel, Triple stride, Triple padding,
                           Triple dilation, bool ceil_mode) {
  KILN_CHECK(x.dim() == 5, op, ": expected input (N, C, D, H, W) or (C, D, H, W), got ", shape_str(x.sizes()));
  KILN_CHECK(kernel.d > 0 && stride.d > 0 && dilation.d > 0 && padding.d >= 0, op, ": in depth, kernel ", kernel.d,
             ", stride ", stride.d, " and dilation ", dilation.d, " must be positive and padding ", padding.d,
             " non-negative");
  const int64_t extent = dilation.d * (kernel.d - 1) + 1, padded = x.size(2) + 2 * padding.d;
  KILN_CHECK(padded >= extent, op, ": input of shape ", shape_str(x.sizes()), " with depth padding ", padding.d,
             " is shallower than the kernel's depth extent ", extent);
  const int64_t out = ops::pool_out_size(x.size(2), kernel.d, stride.d, padding.d, dilation.d, ceil_mode);
  return {out, extent, std::max<int64_t>(0, (out - 1) * stride.d + extent - padded)};
}

// y (N, C, D, ...) padded along depth with value and cut into its windows: (N, C, OD, ..., kd).
Tensor along_depth(const Tensor& y, const DepthWindows& g, Triple stride, Triple padding, Triple dilation,
                   double value) {
  const bool padded = padding.d || g.extra;
  Tensor w = (padded ? kiln::pad(y, {0, 0, 0, 0, padding.d, padding.d + g.extra}, value) : y)
                 .unfold(2, g.extent, stride.d);
  return dilation.d > 1 ? w.slice(w.dim() - 1, 0, std::nullopt, dilation.d) : w;
}
// What both 3-d max pools do first: the checks, a batch dim, the stride, the depth windows, and each (H, W)
// plane's window maxima (N, C, D, OH, OW), with their h W + w when `indices` (which needs the max-pool kernels).
struct PlaneMaxima {
  Tensor x;  // batched
  bool added = false;
  Triple stride = 1;
  DepthWindows depth{};
  Tensor planes, at;
};
PlaneMaxima plane_maxima(const char* op, const Tensor& x_in, Triple kernel, OptionalSize<Triple> stride_in,
                         Triple padding, Triple dilation, bool ceil_mode, bool indices) {
  KILN_CHECK(padding.d * 2 <= kernel.d && padding.h * 2 <= kernel.h && padding.w * 2 <= kernel.w, op,
             ": padding (", padding.d, ", ", padding.h, ", ", padding.w, ") must be at most half the kernel (",
             kernel.d, ", ", kernel.h, ", ", kernel.w, ")");
  PlaneMaxima m;
  m.added = x_in.dim() == 4;
  m.x = m.added ? x_in.unsqueeze(0) : x_in;
  KILN_CHECK(!indices || is_floating(m.x.dtype()), op, ": expected a floating-point input, got ", m.x.dtype());
  m.stride = stride_in.value_or(kernel);
  m.depth = depth_windows(op, m.x, kernel, m.stride, padding, dilation, ceil_mode);
  const int64_t N = m.x.size(0), C = m.x.size(1), D = m.x.size(2), H = m.x.size(3), W = m.x.size(4);
  const Tensor flat = m.x.reshape({N, C * D, H, W});
  const Pair k2{kernel.h, kernel.w}, s2{m.stride.h, m.stride.w}, p2{padding.h, padding.w}, d2{dilation.h, dilation.w};
  if (indices) {
    std::tie(m.planes, m.at) = max_pool2d_with_indices(flat, k2, s2, p2, d2, ceil_mode);
    m.at = m.at.view({N, C, D, m.planes.size(2), m.planes.size(3)});
  } else {
    m.planes = max_pool2d(flat, k2, s2, p2, d2, ceil_mode);
  }
  m.planes = m.planes.view({N, C, D, m.planes.size(2), m.planes.size(3)});
  return m;
}
}  // namespace

// The max of a box is the max over its depths of each plane's window max; the first maximum stays first.
Tensor max_pool3d(const Tensor& x, Triple kernel, OptionalSize<Triple> stride, Triple padding, Triple dilation,
                  bool ceil_mode) {
  const PlaneMaxima m = plane_maxima("max_pool3d", x, kernel, stride, padding, dilation, ceil_mode, false);
  const Tensor y = max(along_depth(m.planes, m.depth, m.stride, padding, dilation,
                                   -std::numeric_limits<double>::infinity()),
                       -1)
                       .first;
  return m.added ? y.squeeze(0) : y;
}

std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, Triple kernel, OptionalSize<Triple> stride,
                                                  Triple padding, Triple dilation, bool ceil_mode) {
  const PlaneMaxima m = plane_maxima("max_pool3d_with_indices", x, kernel, stride, padding, dilation, ceil_mode, true);
  const int64_t H = m.x.size(3), W = m.x.size(4), OD = m.depth.out;
  // The first depth whose plane holds the box's maximum: the box's first maximum in (d, h, w) order, as
  // PyTorch's scan finds it.
  auto [y, tap] = max(along_depth(m.planes, m.depth, m.stride, padding, dilation,
                                  -std::numeric_limits<double>::infinity()),
                      -1);
  NoGradGuard no_grad;
  // A box of -inf only ties with the -inf padding before it; PyTorch then names the box's first position in the
  // input, so such a tap moves to the window's first depth inside.
  std::vector<int64_t> first_inside(static_cast<size_t>(OD));
  for (int64_t od = 0; od < OD; ++od) {
    const int64_t before = padding.d - od * m.stride.d;  // padded positions ahead of the window's first tap
    first_inside[static_cast<size_t>(od)] = before <= 0 ? 0 : (before + dilation.d - 1) / dilation.d;
  }
  const TensorOptions on_device = TensorOptions(kInt64).device(m.x.device());
  const Tensor od = arange(0, OD, 1, on_device).view({OD, 1, 1});
  const Tensor first = tensor(first_inside, {OD, 1, 1}, on_device);
  tap = where(od * m.stride.d - padding.d + tap * dilation.d < 0, first, tap);
  const Tensor depth = od * m.stride.d - padding.d + tap * dilation.d;
  const Tensor in_plane = gather(along_depth(m.at, m.depth, m.stride, padding, dilation, 0), -1, tap.unsqueeze(-1))
                              .squeeze(-1);
  const Tensor indices = depth * (H * W) + in_plane;
  if (m.added) return {y.squeeze(0), indices.squeeze(0)};
  return {y, indices};
}

}  // namespace kiln::nn::functional
