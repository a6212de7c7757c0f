// Differentiable cumsum, sort and topk.
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

}  // namespace kiln
