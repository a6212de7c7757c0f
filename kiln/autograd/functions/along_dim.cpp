// Differentiable cumsum, sort and topk, and the order statistics built on sort (kthvalue, median, quantile) with
// the NaN-skipping sum and mean.
#include <cmath>
#include <limits>
#include <string>

#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::record;
using autograd::should_record;
using autograd::TensorList;

// cumsum: each x[i] is in out[i], out[i + 1], ..., so dx[i] = g[i] + g[i + 1] + ...: the cumsum of g reversed.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  Tensor out = ops::cumsum(x, dim, dtype);
  if (should_record(x)) {
    const int64_t d = wrap_dim(dim, x.dim(), "cumsum");
    record("cumsum", out, {x}, [d, scalar = x.dim() == 0, in = x.dtype()](const Tensor& g, const OpNode&) {
      if (scalar) return TensorList{g.to(in)};
      return TensorList{flip(cumsum(flip(g, {d}), d), {d}).to(in)};  // in x's dtype, when dtype asked for another
    });
  }
  return out;
}

namespace {
// The gradient of values picked from x along dim at `indices` (sort, topk): g goes back where each came from.
TensorList scatter_back(const Tensor& g, const Shape& shape, int64_t dim, const Tensor& indices) {
  if (shape.empty()) return TensorList{g};
  Tensor dx = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
  scatter_(dx, dim, indices, g);  // in place: the out-of-place scatter would copy the zeros first
  return TensorList{dx};
}
}  // namespace

// sort, topk: dx = g scattered back to the positions the values came from (each position once for sort)
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  auto [values, indices] = ops::sort(x, dim, descending);
  if (should_record(x)) {
    const int64_t d = wrap_dim(dim, x.dim(), "sort");
    record("sort", values, {x}, [shape = x.sizes(), d, indices](const Tensor& g, const OpNode&) {
      return scatter_back(g, shape, d, indices);
    });
  }
  return {values, indices};
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  auto [values, indices] = ops::topk(x, k, dim, largest);
  if (should_record(x)) {
    const int64_t d = wrap_dim(dim, x.dim(), "topk");
    record("topk", values, {x}, [shape = x.sizes(), d, indices](const Tensor& g, const OpNode&) {
      return scatter_back(g, shape, d, indices);
    });
  }
  return {values, indices};
}

// ---- order statistics ----

namespace {
// x's shape with size 1 along d.
Shape one_along(const Tensor& x, int64_t d) {
  Shape s = x.sizes();
  s[static_cast<size_t>(d)] = 1;
  return s;
}

// The number of NaNs in each line of x along d, shaped one_along(x, d), int64 (0 for integer x).
Tensor nan_counts(const Tensor& x, int64_t d) {
  if (!is_floating(x.dtype())) return zeros(one_along(x, d), TensorOptions(kInt64).device(x.device()));
  return ops::sum(ops::isnan(x), {d}, /*keepdim=*/true);
}

// The element at sorted position pos (int64, one_along(x, d)) of each line of x along d, and where it was in x.
std::pair<Tensor, Tensor> sorted_at(const Tensor& x, int64_t d, const Tensor& pos, bool keepdim) {
  auto [values, indices] = sort(x, d);
  Tensor v = gather(values, d, pos), i = ops::gather(indices, d, pos);
  if (!keepdim) {
    v = v.squeeze(d);
    i = ops::squeeze(i, d);
  }
  return {v, i};
}

// dim of x (at least 1-D; a 0-dim x comes here as one element of shape (1)) checked and wrapped, with elements.
int64_t line_dim(const Tensor& x, int64_t dim, const char* op) {
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  KILN_CHECK(x.size(d) > 0, op, ": dim ", dim, " of the input of shape ", shape_str(x.sizes()),
             " is empty; expected at least one element to pick from");
  return d;
}

// f(x, dim, keepdim) for x of at least one dim; a 0-dim x is taken as one element (dim 0 or -1), and its results
// are 0-dim again, as PyTorch's (median(s, 0) is (s, 0)).
template <typename F>
std::pair<Tensor, Tensor> on_lines(const Tensor& x, int64_t dim, bool keepdim, const char* op, F&& f) {
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  if (x.dim() > 0) return f(x, dim, keepdim);
  wrap_dim(dim, 0, op);  // only 0 and -1 name the one element
  auto [v, i] = f(x.reshape({1}), 0, false);
  return {v, i};
}

// The median of each line along d; with skip_nan the NaNs are left out, else a NaN wins.
std::pair<Tensor, Tensor> median_lines(const Tensor& x, int64_t dim, bool keepdim, bool skip_nan, const char* op) {
  const int64_t d = line_dim(x, dim, op);
  const int64_t n = x.size(d);
  const Tensor nans = nan_counts(x, d);
  Tensor pos;
  if (skip_nan) {
    // (valid - 1) / 2 of the valid ones, which sort first; a line of NaNs takes position 0, a NaN. Halved in
    // float64, exact for any count (int64 / int64 divides in the default dtype, float32, which rounds past 2^24).
    const Tensor valid = ops::to(ops::add(ops::neg(nans), Scalar(n)), kFloat64);
    pos = ops::floor(ops::div(ops::sub(valid, Scalar(1.0)), Scalar(2.0)));
    pos = ops::to(ops::clamp(pos, Scalar(0.0), std::nullopt), kInt64);
  } else {
    // The lower middle; with NaNs the first of them (the stable sort keeps them in order, after the numbers).
    pos = ops::where(ops::gt(nans, Scalar(int64_t{0})), ops::add(ops::neg(nans), Scalar(n)),
                     full(one_along(x, d), Scalar((n - 1) / 2), TensorOptions(kInt64).device(x.device())));
  }
  return sorted_at(x, d, ops::to(pos, kInt64), keepdim);
}

std::pair<Tensor, Tensor> median_along(const Tensor& x, int64_t dim, bool keepdim, bool skip_nan, const char* op) {
  return on_lines(x, dim, keepdim, op, [&](const Tensor& t, int64_t d, bool k) {
    return median_lines(t, d, k, skip_nan, op);
  });
}

// Of every element. An empty floating x has median NaN, as in PyTorch.
Tensor median_all(const Tensor& x, bool skip_nan, const char* op) {
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  if (x.numel() == 0) {
    KILN_CHECK(is_floating(x.dtype()), op, ": the ", dtype_name(x.dtype()), " input of shape ",
               shape_str(x.sizes()), " is empty; expected at least one element (an empty float input gives NaN)");
    return full({}, Scalar(std::numeric_limits<double>::quiet_NaN()), TensorOptions(x.dtype()).device(x.device()));
  }
  return median_lines(x.reshape({-1}), 0, false, skip_nan, op).first;
}
}  // namespace

std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  return on_lines(x, dim, keepdim, "kthvalue", [k](const Tensor& t, int64_t dim_, bool keep) {
    const int64_t d = line_dim(t, dim_, "kthvalue");
    KILN_CHECK(k >= 1 && k <= t.size(d), "kthvalue: k = ", k, " for a dim of size ", t.size(d), " (shape ",
               shape_str(t.sizes()), "); expected 1 <= k <= ", t.size(d));
    return sorted_at(t, d, full(one_along(t, d), Scalar(k - 1), TensorOptions(kInt64).device(t.device())), keep);
  });
}

Tensor median(const Tensor& x) { return median_all(x, false, "median"); }
std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along(x, dim, keepdim, false, "median");
}
Tensor nanmedian(const Tensor& x) { return median_all(x, true, "nanmedian"); }
std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along(x, dim, keepdim, true, "nanmedian");
}

namespace {
Tensor quantile_impl(const Tensor& x, const Tensor& q_in, std::optional<int64_t> dim, bool keepdim,
                     std::string_view interpolation, bool skip_nan, const char* op, bool q_checked = false) {
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  KILN_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", dtype_name(x.dtype()));
  KILN_CHECK(interpolation == "linear" || interpolation == "lower" || interpolation == "higher" ||
                 interpolation == "nearest" || interpolation == "midpoint",
             op, ": interpolation \"", interpolation,
             "\"; expected \"linear\", \"lower\", \"higher\", \"nearest\" or \"midpoint\"");
  KILN_CHECK(q_in.defined() && q_in.dim() <= 1, op, ": expected q to be a number or a 1-D tensor of them, got shape ",
             q_in.defined() ? shape_str(q_in.sizes()) : "undefined");
  // q's range is checked on the host: a q on the GPU is copied here (a sync), as PyTorch checks only a CPU q.
  if (!q_checked) {
    const Tensor q_host = ops::contiguous(ops::to(q_in, kCPU, kFloat64));
    for (int64_t i = 0; i < q_host.numel(); ++i) {
      const double v = q_host.data_ptr<double>()[i];
      KILN_CHECK(v >= 0.0 && v <= 1.0, op, ": q = ", v, "; expected every q in [0, 1]");
    }
  }
  KILN_CHECK(x.numel() > 0, op, ": the input of shape ", shape_str(x.sizes()),
             " is empty; expected at least one element");
  // A 0-dim x has no dim to reduce but its one element, as with no dim (PyTorch's rule).
  const bool along = dim.has_value() && x.dim() > 0;
  if (dim && x.dim() == 0) wrap_dim(*dim, 0, op);
  const Tensor src = along ? x : x.reshape({-1});
  const int64_t d = line_dim(src, along ? *dim : 0, op);
  const int64_t n = src.size(d), nq = q_in.dim() == 0 ? 1 : q_in.size(0);

  // Positions q (valid - 1) along d, one per q: (..., nq at d, ...), in float64 for every x (PyTorch computes
  // them in x's dtype, so a float32 quantile may pick the other neighbour where the float32 product rounds
  // across an integer).
  Shape q_shape(static_cast<size_t>(src.dim()), 1);
  q_shape[static_cast<size_t>(d)] = nq;
  const Tensor q = ops::view(ops::to(q_in, x.device(), kFloat64), q_shape);
  const Tensor nans = nan_counts(src, d);
  const Tensor valid = ops::to(skip_nan ? ops::add(ops::neg(nans), Scalar(n)) : full(one_along(src, d), Scalar(n), TensorOptions(kInt64).device(x.device())), kFloat64);
  // A line of NaNs (nanquantile) has no valid element: position 0, a NaN.
  Tensor pos = ops::clamp(ops::mul(q, ops::sub(valid, Scalar(1.0))), Scalar(0.0), std::nullopt);
  Shape picked = src.sizes();
  picked[static_cast<size_t>(d)] = nq;
  auto at = [&](const Tensor& p) {
    return ops::contiguous(ops::expand(ops::to(ops::clamp(p, Scalar(0.0), Scalar(double(n - 1))), kInt64), picked));
  };
  const Tensor sorted = sort(src, d).first;
  Tensor out;
  if (interpolation == "nearest") {
    out = gather(sorted, d, at(ops::round(pos)));
  } else {
    const Tensor lo = ops::floor(pos), hi = ops::ceil(pos);
    const Tensor below = gather(sorted, d, at(lo)), above = gather(sorted, d, at(hi));
    if (interpolation == "lower") out = below;
    else if (interpolation == "higher") out = above;
    else if (interpolation == "midpoint") out = below + (above - below) * 0.5;
    else out = below + (above - below) * ops::expand(ops::to(ops::sub(pos, lo), x.dtype()), picked);
  }
  if (!skip_nan) {
    // torch.quantile: a NaN in the line makes every quantile of it NaN.
    out = where(ops::expand(ops::gt(nans, Scalar(int64_t{0})), picked),
                Scalar(std::numeric_limits<double>::quiet_NaN()), out);
  }
  // (..., nq at d, ...): the q dim goes first, or away for a number q; keepdim leaves size 1 where dim was.
  if (q_in.dim() == 0) {
    if (!keepdim) out = out.squeeze(d);
  } else {
    std::vector<int64_t> order{d};
    for (int64_t i = 0; i < out.dim(); ++i)
      if (i != d) order.push_back(i);
    out = out.permute(order);
    if (keepdim) out = out.unsqueeze(d + 1);
  }
  if (!along && keepdim) {
    // Over all elements: every dim of x kept with size 1.
    Shape kept(static_cast<size_t>(x.dim()), 1);
    if (q_in.dim() == 1) kept.insert(kept.begin(), nq);
    out = out.reshape(kept);
  }
  return out;
}

// A number q as a 0-dim tensor on x's device, checked here, so quantile's own check reads no device memory.
Tensor scalar_q(double q, const Tensor& x, const char* op) {
  KILN_CHECK(q >= 0.0 && q <= 1.0, op, ": q = ", q, "; expected every q in [0, 1]");
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  return full({}, Scalar(q), TensorOptions(kFloat64).device(x.device()));
}
}  // namespace

Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim, std::string_view interpolation) {
  return quantile_impl(x, scalar_q(q, x, "quantile"), dim, keepdim, interpolation, false, "quantile", true);
}
Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                std::string_view interpolation) {
  return quantile_impl(x, q, dim, keepdim, interpolation, false, "quantile");
}
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim,
                   std::string_view interpolation) {
  return quantile_impl(x, scalar_q(q, x, "nanquantile"), dim, keepdim, interpolation, true, "nanquantile",
                       true);
}
Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   std::string_view interpolation) {
  return quantile_impl(x, q, dim, keepdim, interpolation, true, "nanquantile");
}

// NaNs replaced by 0 (masked_fill keeps the others' gradients and gives the NaNs none), then summed; the mean
// divides by the count of the others.
Tensor nansum(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_CHECK(x.defined(), "nansum: the input is undefined");
  if (!is_floating(x.dtype())) return sum(x, dims, keepdim);
  return sum(where(ops::isnan(x), Scalar(0.0), x), dims, keepdim);
}

Tensor nanmean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_CHECK(x.defined() && is_floating(x.dtype()), "nanmean: expected a floating input, got ",
             x.defined() ? dtype_name(x.dtype()) : "an undefined tensor");
  const Tensor count = ops::sum(ops::logical_not(ops::isnan(x)), dims, keepdim);
  return nansum(x, dims, keepdim) / ops::to(count, x.dtype());
}

}  // namespace kiln
