// interpolate: resizing (N, C, ...) over its 1 to 3 spatial dims, as torch.nn.functional.interpolate.
//
// area is adaptive average pooling (kiln::adaptive_avg_pool, a kernel of its own). The other modes resize one
// spatial dim at a time; their filters are separable, so this is the sum PyTorch computes (rounded in another
// order). Along one dim each output position reads a few input positions (taps) with weights computed here, on
// the host, the way PyTorch's kernels compute them: nearest and nearest-exact one tap, linear two, cubic four
// (clamped at the edges). The resize is then a weighted sum of index_selects, so it runs on every device and its
// gradient is index_select's (summed where outputs share an input).
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kiln/nn/functional.h"

namespace kiln::nn::functional {

namespace {

// One dim's taps: output position d reads input position idx[k][d] with weight w[k][d], for each tap k.
struct Taps {
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<double>> w;
  Taps(size_t taps, int64_t out)
      : idx(taps, std::vector<int64_t>(static_cast<size_t>(out))), w(taps, std::vector<double>(static_cast<size_t>(out))) {}
  void set(size_t k, int64_t d, int64_t i, double weight) {
    idx[k][static_cast<size_t>(d)] = i;
    w[k][static_cast<size_t>(d)] = weight;
  }
};

// nearest: src = min(floor(dst * scale), in - 1); nearest-exact: min(floor((dst + 0.5) * scale), in - 1). Both
// in single precision, as PyTorch's kernels, with scale = 1 / scale_factor when one was given, else in / out
// (and nearest's two shortcuts for equal and doubled sizes).
Taps nearest_taps(int64_t in, int64_t out, std::optional<double> factor, bool exact) {
  Taps t(1, out);
  const float scale = factor ? static_cast<float>(1.0 / *factor) : static_cast<float>(in) / static_cast<float>(out);
  for (int64_t d = 0; d < out; ++d) {
    int64_t s;
    if (exact) s = std::min(static_cast<int64_t>(std::floor((static_cast<float>(d) + 0.5f) * scale)), in - 1);
    else if (out == in) s = d;
    else if (out == 2 * in) s = d / 2;
    else s = std::min(static_cast<int64_t>(std::floor(static_cast<float>(d) * scale)), in - 1);
    t.set(0, d, s, 1.0);
  }
  return t;
}

// Where output position dst sits in the input: dst * (in - 1) / (out - 1) with align_corners, else the
// half-pixel centre (dst + 0.5) * scale - 0.5, which linear holds at 0 and cubic does not.
double source_position(int64_t in, int64_t out, int64_t dst, std::optional<double> factor, bool align_corners,
                       bool cubic) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) * static_cast<double>(dst) : 0.0;
  const double scale = factor ? 1.0 / *factor : static_cast<double>(in) / static_cast<double>(out);
  const double real = scale * (static_cast<double>(dst) + 0.5) - 0.5;
  return !cubic && real < 0 ? 0.0 : real;
}

// linear: the two input positions around the source, weighted by distance.
Taps linear_taps(int64_t in, int64_t out, std::optional<double> factor, bool align_corners) {
  Taps t(2, out);
  for (int64_t d = 0; d < out; ++d) {
    const double real = source_position(in, out, d, factor, align_corners, false);
    const auto i0 = static_cast<int64_t>(real);  // real >= 0: truncation is floor
    const double lambda = real - static_cast<double>(i0);
    t.set(0, d, i0, 1.0 - lambda);
    t.set(1, d, i0 < in - 1 ? i0 + 1 : i0, lambda);
  }
  return t;
}

// cubic: Keys' cubic convolution with a = -0.75 (PyTorch's) over the four positions around the source, those
// past an edge read the edge.
Taps cubic_taps(int64_t in, int64_t out, std::optional<double> factor, bool align_corners) {
  constexpr double a = -0.75;
  auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };          // |x| <= 1
  auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };  // 1 < |x| < 2
  Taps t(4, out);
  for (int64_t d = 0; d < out; ++d) {
    const double real = source_position(in, out, d, factor, align_corners, true);
    const auto i = static_cast<int64_t>(std::floor(real));
    const double f = real - static_cast<double>(i);
    const double w[4] = {far(f + 1), near(f), near(1 - f), far(2 - f)};
    for (int64_t k = 0; k < 4; ++k) t.set(static_cast<size_t>(k), d, std::clamp(i - 1 + k, int64_t{0}, in - 1), w[k]);
  }
  return t;
}

// x resized along dim to `out` positions: the weighted sum of its taps.
Tensor resize_dim(const Tensor& x, int64_t dim, int64_t out, std::optional<double> factor, const InterpolateOptions& o) {
  const int64_t in = x.size(dim);
  Taps taps = o.mode == "nearest" || o.mode == "nearest-exact" ? nearest_taps(in, out, factor, o.mode != "nearest")
              : o.mode == "bicubic"                             ? cubic_taps(in, out, factor, o.align_corners)
                                                                : linear_taps(in, out, factor, o.align_corners);
  auto read = [&](size_t k) { return index_select(x, dim, tensor(taps.idx[k]).to(x.device())); };
  if (taps.idx.size() == 1) return read(0);  // nearest: a pick, in any dtype
  Shape wshape(static_cast<size_t>(x.dim()), 1);
  wshape[static_cast<size_t>(dim)] = out;
  Tensor y;
  for (size_t k = 0; k < taps.idx.size(); ++k) {
    const Tensor term = read(k) * tensor(taps.w[k]).to(x.device(), x.dtype()).view(wshape);
    y = k == 0 ? term : y + term;
  }
  return y;
}

// The modes each input rank allows, as PyTorch's: linear is 1-d, bilinear and bicubic 2-d, trilinear 3-d.
int64_t spatial_dims_of(const std::string& mode) {
  if (mode == "linear") return 1;
  if (mode == "bilinear" || mode == "bicubic") return 2;
  if (mode == "trilinear") return 3;
  return 0;  // any
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  KILN_CHECK(x.defined(), "interpolate: the input is undefined");
  const std::vector<std::string> modes = {"nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area"};
  KILN_CHECK(std::find(modes.begin(), modes.end(), o.mode) != modes.end(), "interpolate: mode must be one of nearest, ",
             "nearest-exact, linear, bilinear, bicubic, trilinear, area; got \"", o.mode, "\"");
  const int64_t spatial = x.dim() - 2;
  KILN_CHECK(spatial >= 1 && spatial <= 3, "interpolate: expected (N, C, L), (N, C, H, W) or (N, C, D, H, W), got ",
             shape_str(x.sizes()));
  const int64_t wanted = spatial_dims_of(o.mode);
  KILN_CHECK(wanted == 0 || wanted == spatial, "interpolate: mode \"", o.mode, "\" resizes ", wanted,
             " spatial dim", wanted > 1 ? "s" : "", " (an input of ", wanted + 2, " dims), but the input has shape ",
             shape_str(x.sizes()));
  const bool interpolating = wanted > 0;
  KILN_CHECK(interpolating || !o.align_corners, "interpolate: align_corners is for linear, bilinear, bicubic and ",
             "trilinear, not ", o.mode);
  KILN_CHECK(o.mode == "nearest" || o.mode == "nearest-exact" || is_floating(x.dtype()), "interpolate: mode \"",
             o.mode, "\" needs a floating input, got ", x.dtype());
  KILN_CHECK(o.size.empty() != o.scale_factor.empty(), "interpolate: give exactly one of size and scale_factor");
  auto per_dim = [&](size_t n, const char* what) {
    KILN_CHECK(n == 1 || n == static_cast<size_t>(spatial), "interpolate: ", what, " has ", n, " values for ",
               spatial, " spatial dim", spatial > 1 ? "s" : "", "; give one, or one per dim");
  };
  std::vector<int64_t> out(static_cast<size_t>(spatial));
  std::vector<std::optional<double>> factors(static_cast<size_t>(spatial));
  for (int64_t i = 0; i < spatial; ++i) {
    const auto s = static_cast<size_t>(i);
    if (!o.size.empty()) {
      per_dim(o.size.size(), "size");
      out[s] = o.size[o.size.size() == 1 ? 0 : s];
    } else {
      per_dim(o.scale_factor.size(), "scale_factor");
      const double f = o.scale_factor[o.scale_factor.size() == 1 ? 0 : s];
      KILN_CHECK(f > 0, "interpolate: scale_factor must be positive, got ", f);
      factors[s] = f;
      out[s] = static_cast<int64_t>(std::floor(static_cast<double>(x.size(i + 2)) * f));
    }
    KILN_CHECK(out[s] > 0, "interpolate: the output's spatial dim ", i, " is ", out[s], " for input ",
               shape_str(x.sizes()), "; every spatial dim needs at least one position");
  }
  // area is adaptive average pooling, one kernel over every spatial dim.
  if (o.mode == "area") return adaptive_avg_pool(x, out);
  Tensor y = x;
  for (int64_t i = 0; i < spatial; ++i) y = resize_dim(y, i + 2, out[static_cast<size_t>(i)], factors[static_cast<size_t>(i)], o);
  return y;
}

namespace {
// -1 .. 1 across n positions: the corner pixels' centres with align_corners, else the image's edges (so the
// centres sit half a pixel in); a single position is 0.
std::vector<double> normalized_positions(int64_t n, bool align_corners) {
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  if (n <= 1) return v;
  for (int64_t i = 0; i < n; ++i) {
    const double t = -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
    v[static_cast<size_t>(i)] = align_corners ? t : t * static_cast<double>(n - 1) / static_cast<double>(n);
  }
  return v;
}

// The pixel coordinate of a normalized one along a dim of `size`: -1 and 1 the corner pixels' centres with
// align_corners, else the outer edges.
Tensor pixel_coordinate(const Tensor& g, int64_t size, bool align_corners) {
  const double n = static_cast<double>(size);
  return align_corners ? (g + 1.0) * ((n - 1) / 2) : ((g + 1.0) * n - 1.0) / 2;
}

// The padding mode's rule for pixel coordinates outside: border clamps to the edge pixels; reflection mirrors
// about the edges (the corner centres with align_corners, else the image's edges), then clamps; zeros leaves
// them (they read 0).
Tensor padded_coordinate(Tensor c, int64_t size, const GridSampleOptions& o) {
  const double n = static_cast<double>(size);
  if (o.padding_mode == "reflection") {
    // Reflect about [lo, lo + span]: the distance from lo, folded back and forth over spans.
    const double lo = o.align_corners ? 0.0 : -0.5, span = o.align_corners ? n - 1 : n;
    if (span <= 0) return zeros_like(c);
    const Tensor d = (c - lo).abs();
    const Tensor flips = (d / span).floor();
    const Tensor extra = d - flips * span;
    c = where(flips.fmod(full_like(flips, 2.0)) == 0, extra + lo, (extra * -1.0) + (span + lo));
  }
  if (o.padding_mode != "zeros") c = clamp(c, 0.0, n - 1);
  return c;
}

Tensor source_coordinate(const Tensor& g, int64_t size, const GridSampleOptions& o) {
  return padded_coordinate(pixel_coordinate(g, size, o.align_corners), size, o);
}

// Keys' cubic convolution weights (a = -0.75, PyTorch's) of the taps at -1, 0, 1, 2 from a position t in [0, 1)
// past tap 0.
std::array<Tensor, 4> cubic_weights(const Tensor& t) {
  constexpr double A = -0.75;
  auto near = [](const Tensor& x) { return ((x * (A + 2) - (A + 3)) * x) * x + 1.0; };        // |x| <= 1
  auto far = [](const Tensor& x) { return ((x * A - 5 * A) * x + 8 * A) * x - 4 * A; };       // 1 < |x| < 2
  const Tensor rest = 1.0 - t;
  return {far(t + 1.0), near(t), near(rest), far(rest + 1.0)};
}
}  // namespace

Tensor affine_grid(const Tensor& theta, IntArrayRef size, bool align_corners) {
  KILN_CHECK(size.size() == 4 || size.size() == 5, "affine_grid: size must be the output's (N, C, H, W) or (N, C, "
             "D, H, W), got ", shape_str(size));
  const int64_t spatial = static_cast<int64_t>(size.size()) - 2, N = size[0];
  KILN_CHECK(theta.dim() == 3 && theta.size(0) == N && theta.size(1) == spatial && theta.size(2) == spatial + 1,
             "affine_grid: theta must be (N, ", spatial, ", ", spatial + 1, ") with N = ", N, " for size ",
             shape_str(size), ", got ", shape_str(theta.sizes()));
  KILN_CHECK(is_floating(theta.dtype()), "affine_grid: theta must be floating, got ", theta.dtype());
  // Each output position's normalized coordinates, x (the last dim) first, then 1: (positions, spatial + 1),
  // in the output's row-major order.
  std::vector<std::vector<double>> axes;  // the spatial dims' positions, outermost first
  int64_t positions = 1;
  for (int64_t d = 0; d < spatial; ++d) {
    axes.push_back(normalized_positions(size[static_cast<size_t>(d + 2)], align_corners));
    positions *= size[static_cast<size_t>(d + 2)];
  }
  std::vector<double> base;
  base.reserve(static_cast<size_t>(positions * (spatial + 1)));
  std::vector<size_t> at(static_cast<size_t>(spatial), 0);
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t d = spatial - 1; d >= 0; --d) base.push_back(axes[static_cast<size_t>(d)][at[static_cast<size_t>(d)]]);
    base.push_back(1.0);
    for (int64_t d = spatial - 1; d >= 0 && ++at[static_cast<size_t>(d)] == axes[static_cast<size_t>(d)].size(); --d)
      at[static_cast<size_t>(d)] = 0;
  }
  const Tensor b = tensor(base, {1, positions, spatial + 1}, TensorOptions(theta.dtype()).device(theta.device()));
  Shape out{N};
  for (int64_t d = 0; d < spatial; ++d) out.push_back(size[static_cast<size_t>(d + 2)]);
  out.push_back(spatial);
  return matmul(b, theta.transpose(1, 2)).view(out);
}

Tensor grid_sample(const Tensor& x, const Tensor& grid, const GridSampleOptions& o) {
  KILN_CHECK(x.dim() == 4 || x.dim() == 5, "grid_sample: expected input (N, C, H, W) or (N, C, D, H, W), got ",
             shape_str(x.sizes()));
  const int64_t spatial = x.dim() - 2, N = x.size(0), C = x.size(1);
  KILN_CHECK(grid.dim() == x.dim() && grid.size(0) == N && grid.size(-1) == spatial, "grid_sample: grid must be ",
             spatial == 2 ? "(N, Ho, Wo, 2)" : "(N, Do, Ho, Wo, 3)", " with N = ", N, " for input ",
             shape_str(x.sizes()), ", got ", shape_str(grid.sizes()));
  KILN_CHECK(is_floating(x.dtype()) && grid.dtype() == x.dtype(), "grid_sample: input and grid must share a "
             "floating dtype, got ", x.dtype(), " and ", grid.dtype());
  KILN_CHECK(o.mode == "bilinear" || o.mode == "nearest" || o.mode == "bicubic", "grid_sample: mode must be "
             "\"bilinear\", \"nearest\" or \"bicubic\", got \"", o.mode, "\"");
  KILN_CHECK(o.mode != "bicubic" || x.dim() == 4, "grid_sample: bicubic takes a 4-d input (N, C, H, W), got ",
             shape_str(x.sizes()), ", as in PyTorch");
  KILN_CHECK(o.padding_mode == "zeros" || o.padding_mode == "border" || o.padding_mode == "reflection",
             "grid_sample: padding_mode must be \"zeros\", \"border\" or \"reflection\", got \"", o.padding_mode,
             "\"");
  // Per spatial dim d (outermost first): its size, and the source coordinate the grid gives along it (the
  // grid's last dim lists x, the innermost dim, first).
  Shape sizes, out{N, C};
  std::vector<Tensor> coord;
  int64_t volume = 1;
  for (int64_t d = 0; d < spatial; ++d) {
    sizes.push_back(x.size(d + 2));
    volume *= sizes.back();
    coord.push_back(source_coordinate(grid.select(-1, spatial - 1 - d), sizes.back(), o));
    out.push_back(grid.size(d + 1));
  }
  const int64_t outputs = grid.numel() / (N * spatial);
  const Tensor flat_x = x.reshape({N, C, volume});
  // x at integer positions p[d] (each (N, out...)), times `weight`; positions outside the input read 0.
  auto read = [&](const std::vector<Tensor>& p, const Tensor& weight) {
    Tensor inside, index;
    for (int64_t d = 0; d < spatial; ++d) {
      const double last = static_cast<double>(sizes[static_cast<size_t>(d)] - 1);
      const Tensor in_d = logical_and(p[static_cast<size_t>(d)] >= 0, p[static_cast<size_t>(d)] <= last);
      inside = d == 0 ? in_d : logical_and(inside, in_d);
      const Tensor clamped = clamp(p[static_cast<size_t>(d)], 0.0, last);
      index = d == 0 ? clamped : index * static_cast<double>(sizes[static_cast<size_t>(d)]) + clamped;
    }
    const Tensor flat = index.to(kInt64).reshape({N, 1, outputs});
    const Tensor v = gather(flat_x, 2, flat.expand({N, C, outputs})).view(out);
    return v * where(inside, weight, zeros_like(weight)).unsqueeze(1);
  };
  if (o.mode == "bicubic") {
    // PyTorch's rule: the 4 x 4 taps around the unpadded position, each tap's own coordinate then padded (so
    // border repeats edge pixels and reflection mirrors them), weighted by Keys' cubic along each dim.
    const Tensor px = pixel_coordinate(grid.select(-1, 0), sizes[1], o.align_corners),
                 py = pixel_coordinate(grid.select(-1, 1), sizes[0], o.align_corners);
    const Tensor x0 = px.detach().floor(), y0 = py.detach().floor();
    const std::array<Tensor, 4> wx = cubic_weights(px - x0), wy = cubic_weights(py - y0);
    Tensor y;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const Tensor term = read({padded_coordinate(y0 + (i - 1.0), sizes[0], o),
                                  padded_coordinate(x0 + (j - 1.0), sizes[1], o)},
                                 wy[static_cast<size_t>(i)] * wx[static_cast<size_t>(j)]);
        y = i == 0 && j == 0 ? term : y + term;
      }
    return y;
  }
  if (o.mode == "nearest") {
    std::vector<Tensor> nearest;
    for (const Tensor& c : coord) nearest.push_back(c.detach().round());
    return read(nearest, ones_like(coord[0]).detach());
  }
  // Bilinear (trilinear over volumes): the 2^spatial corners around each position, each weighted by the
  // product over dims of its share along that dim.
  std::vector<Tensor> low, far_share;
  for (const Tensor& c : coord) {
    low.push_back(c.detach().floor());
    far_share.push_back(c - low.back());
  }
  Tensor y;
  for (int64_t corner = 0; corner < (int64_t{1} << spatial); ++corner) {
    std::vector<Tensor> p;
    Tensor weight;
    for (int64_t d = 0; d < spatial; ++d) {
      const bool far = (corner >> (spatial - 1 - d)) & 1;
      p.push_back(far ? low[static_cast<size_t>(d)] + 1.0 : low[static_cast<size_t>(d)]);
      const Tensor share = far ? far_share[static_cast<size_t>(d)] : 1.0 - far_share[static_cast<size_t>(d)];
      weight = d == 0 ? share : weight * share;
    }
    const Tensor term = read(p, weight);
    y = corner == 0 ? term : y + term;
  }
  return y;
}

}  // namespace kiln::nn::functional
