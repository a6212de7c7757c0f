// affine_grid and grid_sample (PyTorch's spatial transformer sampling).
//
// grid_sample has two paths:
//   - for images (N, C, H, W) in float32 or float64 sampled bilinearly or at the nearest pixel, on a device
//     with the kernels (the CPU and CUDA), fused kernels (GridSampleFunction over ops::grid_sample_2d; the math
//     is in kiln/tensor/ops/grid_sample.h): each output position's coordinates, padding and corner weights are
//     worked out once and used for every channel; backward scatters into the input's gradient and sums the
//     grid's gradient over the channels in the same pass.
//   - anywhere else (volumes, bicubic, 16-bit types), a composite of differentiable ops: a gather per corner
//     (or tap), weighted and summed.
// A backward with create_graph (a second derivative) differentiates the composite on the saved inputs.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/function.h"
#include "kiln/nn/functional.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/grid_sample.h"

namespace kiln::nn::functional {

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
// them (they read 0). Where border or reflection clamp, the edges themselves included, the coordinate does not
// move with the grid (PyTorch's rule: its gradient there is 0).
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
  if (o.padding_mode != "zeros") c = where(logical_and(c > 0.0, c < n - 1), c, clamp(c, 0.0, n - 1).detach());
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

namespace {

// ---- the composite path: differentiable ops, for every device, dtype and mode ----

Tensor grid_sample_composite(const Tensor& x, const Tensor& grid, const GridSampleOptions& o) {
  const int64_t spatial = x.dim() - 2, N = x.size(0), C = x.size(1);
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
    // (where, not a product with a zero weight: an inf or NaN edge pixel read for an outside position stays out)
    return where(inside.unsqueeze(1), v * weight.unsqueeze(1), 0.0);
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

// ---- the fused path: images, bilinear or nearest, float32 or float64 ----

GridSampleParams params_of(const GridSampleOptions& o) {
  GridSampleParams p;
  p.bilinear = o.mode == "bilinear";
  p.padding = o.padding_mode == "border"       ? GridPadding::Border
              : o.padding_mode == "reflection" ? GridPadding::Reflection
                                               : GridPadding::Zeros;
  p.align_corners = o.align_corners;
  return p;
}

struct GridSampleFunction : autograd::Function<GridSampleFunction> {
  static constexpr const char* name = "GridSampleBackward";

  // x (N, C, H, W), grid (N, Ho, Wo, 2): float32 or float64, on a device with the kernels.
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, const Tensor& grid,
                        const GridSampleOptions& o) {
    ctx->save_for_backward({x, grid});
    ctx->saved_data["options"] = o;
    return ops::grid_sample_2d(x, grid, params_of(o));
  }

  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &grid = saved[1];
    const auto o = std::any_cast<GridSampleOptions>(ctx->saved_data["options"]);
    const bool want_x = ctx->needs_input_grad(0), want_grid = ctx->needs_input_grad(1);
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    if (autograd::GradMode::is_enabled()) return differentiable_backward(x, grid, grads[0], o, want_x, want_grid);
    // nearest's output does not move with the grid: its gradient is zero (none, as the composite gives)
    const ops::GridSample2dGrads d = ops::grid_sample_2d_backward(grads[0], x, grid, params_of(o), want_x,
                                                                  want_grid && o.mode == "bilinear");
    return {d.x, d.grid};
  }

  // The same gradients as differentiable functions of the inputs and g: the composite differentiated.
  static std::vector<Tensor> differentiable_backward(const Tensor& x, const Tensor& grid, const Tensor& g,
                                                     const GridSampleOptions& o, bool want_x, bool want_grid) {
    std::vector<Tensor> wrt;
    if (want_x) wrt.push_back(x);
    if (want_grid) wrt.push_back(grid);
    if (wrt.empty()) return {Tensor(), Tensor()};
    const Tensor y = grid_sample_composite(x, grid, o);
    std::vector<Tensor> d = autograd::grad({y}, wrt, {g}, std::nullopt, /*create_graph=*/true, /*allow_unused=*/true);
    return {want_x ? d[0] : Tensor(), want_grid ? d.back() : Tensor()};
  }
};

}  // namespace

Tensor grid_sample(const Tensor& x, const Tensor& grid, const GridSampleOptions& o) {
  KILN_CHECK(x.dim() == 4 || x.dim() == 5, "grid_sample: expected input (N, C, H, W) or (N, C, D, H, W), got ",
             shape_str(x.sizes()));
  const int64_t spatial = x.dim() - 2, N = x.size(0);
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
  const bool fused = !CompositeOnlyGuard::active() && x.dim() == 4 && (x.dtype() == kFloat32 || x.dtype() == kFloat64) &&
                     (o.mode == "bilinear" || o.mode == "nearest") && grid.device() == x.device() &&
                     has_kernel<Op::grid_sample_2d>(x.device().type);
  if (!fused) return grid_sample_composite(x, grid, o);
  return GridSampleFunction::apply(x.contiguous(), grid.contiguous(), o);
}

}  // namespace kiln::nn::functional
