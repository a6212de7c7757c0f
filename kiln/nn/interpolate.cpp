// interpolate: resizing (N, C, ...) over its 1 to 3 spatial dims, as torch.nn.functional.interpolate.
//
// area is adaptive average pooling (kiln::adaptive_avg_pool, a kernel of its own). The other modes resize one
// spatial dim at a time; their filters are separable, so this is the sum PyTorch computes (rounded in another
// order). Along one dim each output position reads a few input positions (taps) with weights computed here, on
// the host, the way PyTorch's kernels compute them: nearest and nearest-exact one tap, linear two, cubic four
// (clamped at the edges). The resize is then the weighted sum of its taps: for float32 and float64 on a device
// with the kernels (the CPU and CUDA), one pass of ops::resize_taps each way; otherwise (16-bit types) a sum of
// index_selects, whose gradient is index_select's (summed where outputs share an input). Both round each
// product before adding it, so they give the same bits forward. Nearest is one index_select either way.
#include <algorithm>
#include <any>
#include <cmath>
#include <vector>

#include "kiln/autograd/function.h"
#include "kiln/nn/functional.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/resize_taps.h"

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

// The fused path: ops::resize_taps and its adjoint, each the other's gradient, so every order of derivative is
// one kernel call (a backward with create_graph records the adjoint, whose backward is the resize again).
struct TapTable {
  int64_t dim, in;  // the resized dim, and the input's size along it
  Tensor idx, w;    // (taps, out), on the input's device; constants, not inputs of the graph
};
struct TapsAdjoint;
struct TapsResize : autograd::Function<TapsResize> {
  static constexpr const char* name = "InterpolateBackward";
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, const TapTable& taps) {
    ctx->saved_data["taps"] = taps;
    return ops::resize_taps(x, taps.dim, taps.idx, taps.w);
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads);
};
struct TapsAdjoint : autograd::Function<TapsAdjoint> {
  static constexpr const char* name = "InterpolateBackwardBackward";
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& g, const TapTable& taps) {
    ctx->saved_data["taps"] = taps;
    return ops::resize_taps_backward(g, taps.dim, taps.idx, taps.w, taps.in);
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    if (!grads[0].defined()) return {Tensor()};
    return {TapsResize::apply(grads[0], std::any_cast<TapTable>(ctx->saved_data.at("taps")))};
  }
};
std::vector<Tensor> TapsResize::backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
  if (!grads[0].defined()) return {Tensor()};
  return {TapsAdjoint::apply(grads[0], std::any_cast<TapTable>(ctx->saved_data.at("taps")))};
}

// x resized along dim to `out` positions: the weighted sum of its taps.
Tensor resize_dim(const Tensor& x, int64_t dim, int64_t out, std::optional<double> factor, const InterpolateOptions& o) {
  const int64_t in = x.size(dim);
  Taps taps = o.mode == "nearest" || o.mode == "nearest-exact" ? nearest_taps(in, out, factor, o.mode != "nearest")
              : o.mode == "bicubic"                             ? cubic_taps(in, out, factor, o.align_corners)
                                                                : linear_taps(in, out, factor, o.align_corners);
  auto read = [&](size_t k) { return index_select(x, dim, tensor(taps.idx[k]).to(x.device())); };
  if (taps.idx.size() == 1) return read(0);  // nearest: a pick, in any dtype
  if ((x.dtype() == kFloat32 || x.dtype() == kFloat64) && !CompositeOnlyGuard::active() &&
      has_kernel<Op::resize_taps>(x.device().type) && has_kernel<Op::resize_taps_backward>(x.device().type)) {
    std::vector<int64_t> idx;
    std::vector<double> w;
    for (size_t k = 0; k < taps.idx.size(); ++k) {
      idx.insert(idx.end(), taps.idx[k].begin(), taps.idx[k].end());
      w.insert(w.end(), taps.w[k].begin(), taps.w[k].end());
    }
    const int64_t n = static_cast<int64_t>(taps.idx.size());
    return TapsResize::apply(x, TapTable{dim, in, tensor(idx, {n, out}).to(x.device()),
                                         tensor(w, {n, out}, kFloat64).to(x.device(), x.dtype())});
  }
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

}  // namespace kiln::nn::functional
