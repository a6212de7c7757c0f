// interpolate: resizing (N, C, H, W) by nearest neighbour or bilinearly, as torch.nn.functional.interpolate.
//
// Each output row (column) reads one or two input rows (columns): the positions are computed here, on the
// host, the way PyTorch computes them, and the resize is index_select along H and then W, with a lerp between
// the two for bilinear. So it runs on every device and its gradient is index_select's (summed where outputs
// share an input).
#include <cmath>
#include <vector>

#include "kiln/nn/functional.h"

namespace kiln::nn::functional {

namespace {

// The input position each output position along one dim reads (nearest), in PyTorch's single-precision
// arithmetic: src = min(floor(dst * scale), in - 1), scale = 1 / scale_factor when one was given, else in / out.
std::vector<int64_t> nearest_sources(int64_t in, int64_t out, std::optional<double> scale_factor) {
  std::vector<int64_t> src(static_cast<size_t>(out));
  const float scale = scale_factor ? static_cast<float>(1.0 / *scale_factor)
                                   : static_cast<float>(in) / static_cast<float>(out);
  for (int64_t d = 0; d < out; ++d) {
    int64_t& s = src[static_cast<size_t>(d)];
    if (out == in) s = d;
    else if (out == 2 * in) s = d / 2;
    else s = std::min(static_cast<int64_t>(std::floor(static_cast<float>(d) * scale)), in - 1);
  }
  return src;
}

// Bilinear: output position dst reads i0 and i1 = min(i0 + 1, in - 1) with weight w on i1. The source
// coordinate is dst * (in - 1) / (out - 1) with align_corners, else (dst + 0.5) * scale - 0.5 clamped at 0.
struct LinearSources {
  std::vector<int64_t> i0, i1;
  std::vector<double> w;
};
LinearSources linear_sources(int64_t in, int64_t out, std::optional<double> scale_factor, bool align_corners) {
  LinearSources s;
  double scale;
  if (align_corners) scale = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  else scale = scale_factor ? 1.0 / *scale_factor : static_cast<double>(in) / static_cast<double>(out);
  for (int64_t d = 0; d < out; ++d) {
    double real = align_corners ? scale * static_cast<double>(d) : scale * (static_cast<double>(d) + 0.5) - 0.5;
    if (real < 0) real = 0;
    const auto i0 = static_cast<int64_t>(real);  // real >= 0: truncation is floor
    s.i0.push_back(i0);
    s.i1.push_back(i0 < in - 1 ? i0 + 1 : i0);
    s.w.push_back(real - static_cast<double>(i0));
  }
  return s;
}

Tensor indices_on(const std::vector<int64_t>& v, const Tensor& like) {
  return tensor(v).to(like.device());
}

// x resized along dim (2 or 3) to `out` positions.
Tensor resize_dim(const Tensor& x, int64_t dim, int64_t out, std::optional<double> scale_factor,
                  const InterpolateOptions& o) {
  const int64_t in = x.size(dim);
  if (o.mode == "nearest") return index_select(x, dim, indices_on(nearest_sources(in, out, scale_factor), x));
  const LinearSources s = linear_sources(in, out, scale_factor, o.align_corners);
  const Tensor a = index_select(x, dim, indices_on(s.i0, x));
  const Tensor b = index_select(x, dim, indices_on(s.i1, x));
  Shape wshape{1, 1, 1, 1};
  wshape[static_cast<size_t>(dim)] = out;
  const Tensor w = tensor(s.w).to(x.device(), x.dtype()).view(wshape);
  return a + (b - a) * w;
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  KILN_CHECK(x.dim() == 4, "interpolate: expected input (N, C, H, W), got ", shape_str(x.sizes()));
  KILN_CHECK(o.mode == "nearest" || o.mode == "bilinear",
             "interpolate: mode must be \"nearest\" or \"bilinear\", got \"", o.mode, "\"");
  KILN_CHECK(o.size.has_value() != o.scale_factor.has_value(),
             "interpolate: give exactly one of size and scale_factor");
  KILN_CHECK(o.mode == "bilinear" || !o.align_corners, "interpolate: align_corners is for bilinear, not nearest");
  KILN_CHECK(o.mode == "nearest" || is_floating(x.dtype()), "interpolate: bilinear needs a floating input, got ",
             x.dtype());
  std::optional<double> sh, sw;
  int64_t oh, ow;
  if (o.size) {
    oh = o.size->h, ow = o.size->w;
  } else {
    sh = o.scale_factor->first, sw = o.scale_factor->second;
    KILN_CHECK(*sh > 0 && *sw > 0, "interpolate: scale_factor must be positive, got (", *sh, ", ", *sw, ")");
    oh = static_cast<int64_t>(std::floor(static_cast<double>(x.size(2)) * *sh));
    ow = static_cast<int64_t>(std::floor(static_cast<double>(x.size(3)) * *sw));
  }
  KILN_CHECK(oh > 0 && ow > 0, "interpolate: the output of ", oh, " x ", ow, " for input ", shape_str(x.sizes()),
             " is empty");
  return resize_dim(resize_dim(x, 2, oh, sh, o), 3, ow, sw, o);
}

}  // namespace kiln::nn::functional
