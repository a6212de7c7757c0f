// Indexing with index tensors (advanced indexing): x.index({...}), x[mask], index_put and index_put_.
//
// Both directions start the same way. The indices are split in two: the basic ones (ints, slices, None,
// Ellipsis) pick a view as before, with a full slice standing in for each dim an index tensor indexes; the index
// tensors then index dims of that view. A bool mask over k dims becomes the k int64 coordinate columns of its
// true elements (nonzero). The index tensors are broadcast to one shape B, checked against the sizes of their
// dims, and negative positions wrapped. The result has B where the first indexed dim stood when the indexed
// dims are side by side, or first when they are not, and the other dims of the view in order around it.
//
// Reading gathers along one dim: the indexed dims, moved to the front when apart, are flattened into one (a
// view when the strides allow it), index_select picks the combined positions sum_j idx_j * prod_{k>j} n_k along
// it, and B is unflattened in its place. So x[idx] on a contiguous x is one gather of whole rows, and the
// gradient is index_select's (an index_add: repeated positions add up).
//
// Writing computes where each element of the result lies in a contiguous x, as flat positions, from the basic
// view's strides and offset and the wrapped index tensors; then scatters the values there (index_add with
// accumulate). Out of place it is differentiable in x and in the values; in place it is recorded as the
// out-of-place op, as every in-place op is, and without autograd it writes straight into x.
//
// Position tensors are checked against their dims' sizes before anything is read or written, which reads one
// flag back from the device per tensor (PyTorch checks inside its CUDA kernels instead, and fails later).
#include <algorithm>
#include <string>

#include "kiln/autograd/record.h"

namespace kiln {

using autograd::record_inplace;
using autograd::should_record;

namespace {

bool has_index_tensor(const std::vector<TensorIndex>& indices) {
  return std::any_of(indices.begin(), indices.end(),
                     [](const TensorIndex& i) { return std::holds_alternative<Tensor>(i.value); });
}

struct IndexTensor {
  int64_t dim;      // the first dim of the basic view it indexes
  Tensor tensor;    // as given
  size_t position;  // where it stood among the indices, for messages
};

struct Parsed {
  std::vector<TensorIndex> basic;    // the indices, with full slices for the dims the index tensors index
  std::vector<IndexTensor> tensors;  // in the order given
};

Parsed parse(const Tensor& x, const std::vector<TensorIndex>& indices, const char* op) {
  // The dims the indices consume, to know how many an Ellipsis stands for.
  int64_t consumed = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const auto& v = indices[k].value;
    if (std::holds_alternative<int64_t>(v) || std::holds_alternative<Slice>(v)) ++consumed;
    if (const Tensor* t = std::get_if<Tensor>(&v)) {
      KILN_CHECK(t->defined(), op, ": the index tensor at position ", k, " is undefined");
      KILN_CHECK(t->dtype() == kBool || t->dtype() == kInt64 || t->dtype() == kInt32, op,
                 ": an index tensor must be int64, int32 or bool; the one at position ", k, " is ", t->dtype());
      KILN_CHECK(t->dtype() != kBool || t->dim() > 0, op, ": the bool index at position ", k,
                 " has no dims; a 0-dim mask is not supported (use a 1-element mask on an unsqueezed dim)");
      consumed += t->dtype() == kBool ? t->dim() : 1;
    }
  }
  KILN_CHECK(consumed <= x.dim(), op, ": too many indices for a tensor of shape ", shape_str(x.sizes()),
             ": they index ", consumed, " dims");
  Parsed p;
  int64_t d = 0;  // the dim of the basic view the next index applies to
  for (size_t k = 0; k < indices.size(); ++k) {
    const auto& v = indices[k].value;
    if (const Tensor* t = std::get_if<Tensor>(&v)) {
      const int64_t n = t->dtype() == kBool ? t->dim() : 1;
      p.tensors.push_back({d, *t, k});
      for (int64_t j = 0; j < n; ++j) p.basic.emplace_back(Slice());
      d += n;
      continue;
    }
    p.basic.push_back(indices[k]);
    if (std::holds_alternative<EllipsisIndex>(v)) d += x.dim() - consumed;
    else if (!std::holds_alternative<int64_t>(v)) ++d;  // a slice keeps its dim, None adds one
  }
  return p;
}

struct Advanced {
  std::vector<int64_t> dims;  // the dims of the basic view that are indexed, in order
  std::vector<Tensor> idx;    // for each, int64 positions in [0, size), all broadcast to `shape`
  Shape shape;                // B
  bool adjacent = true;       // the dims are side by side: B stands where they did, else first
};

Advanced resolve(const Tensor& view, const std::vector<IndexTensor>& tensors, const char* op) {
  Advanced a;
  for (const auto& [d, given, k] : tensors) {
    Tensor t = given.device() == view.device() ? given : ops::to(given, view.device());
    if (t.dtype() == kBool) {
      const Shape indexed(view.sizes().begin() + d, view.sizes().begin() + d + t.dim());
      KILN_CHECK(t.sizes() == indexed, op, ": the bool mask at position ", k, " has shape ", shape_str(t.sizes()),
                 ", but the dims it indexes have shape ", shape_str(indexed));
      const Tensor coords = ops::nonzero(t);  // (count, t.dim()), all in range
      for (int64_t j = 0; j < t.dim(); ++j) {
        a.dims.push_back(d + j);
        a.idx.push_back(ops::select(coords, 1, j));
      }
      continue;
    }
    t = ops::to(t, kInt64);
    const int64_t n = view.size(d);
    const Tensor bad = ops::logical_or(ops::lt(t, -n), ops::ge(t, n));
    if (ops::any(bad).item<bool>()) {
      const int64_t first = ops::index_select(ops::reshape(t, {-1}), 0, ops::flat_nonzero(bad))[0].item<int64_t>();
      KILN_CHECK(false, op, ": index ", first, " is out of range for dim ", d, " of size ", n,
                 " (the index tensor at position ", k, ")");
    }
    a.dims.push_back(d);
    a.idx.push_back(ops::where(ops::lt(t, 0), ops::add(t, n), t));
  }
  const std::string what = std::string(op) + ": the index tensors";
  a.shape = a.idx[0].sizes();
  for (const Tensor& i : a.idx) a.shape = broadcast_shapes(a.shape, i.sizes(), what.c_str());
  for (Tensor& i : a.idx) i = ops::expand(i, a.shape);
  for (size_t j = 1; j < a.dims.size(); ++j) a.adjacent = a.adjacent && a.dims[j] == a.dims[j - 1] + 1;
  return a;
}

// Where each element of c.index(indices) lies in c, which is contiguous: int64 flat positions in that result's
// shape.
Tensor flat_positions(const Tensor& c, const std::vector<TensorIndex>& indices, const char* op) {
  const Parsed p = parse(c, indices, op);
  const Tensor view = ops::index(c, p.basic);  // only its geometry is read
  const TensorOptions i64 = TensorOptions(kInt64).device(c.device());
  Advanced a;
  int64_t at = 0, rank = view.dim();  // where B stands in the result, and the result's dims
  if (!p.tensors.empty()) {
    a = resolve(view, p.tensors, op);
    at = a.adjacent ? a.dims[0] : 0;
    rank += static_cast<int64_t>(a.shape.size()) - static_cast<int64_t>(a.dims.size());
  }
  // Each term has the sizes of its own dims of the result and 1 elsewhere; their sum fills the result's shape.
  auto placed = [rank](const Tensor& t, int64_t first) {
    Shape s(rank, 1);
    std::copy(t.sizes().begin(), t.sizes().end(), s.begin() + first);
    return ops::reshape(t, s);
  };
  Tensor pos = full({}, view.storage_offset() - c.storage_offset(), i64);
  if (!a.dims.empty()) {
    Tensor term = zeros(a.shape, i64);
    for (size_t j = 0; j < a.dims.size(); ++j) term = ops::add(term, ops::mul(a.idx[j], view.stride(a.dims[j])));
    pos = ops::add(pos, placed(term, at));
  }
  int64_t r = 0;  // the result's dim for the next dim of the view that is not indexed
  for (int64_t d = 0; d < view.dim(); ++d) {
    if (std::find(a.dims.begin(), a.dims.end(), d) != a.dims.end()) continue;
    if (!a.dims.empty() && r == at) r += static_cast<int64_t>(a.shape.size());  // B's dims come here
    pos = ops::add(pos, placed(ops::mul(arange(view.size(d), i64), view.stride(d)), r++));
  }
  return pos;
}

// The values for index_put, checked and broadcast to the indexed shape, flattened.
Tensor flat_values(const Tensor& x, const Tensor& values, const Shape& indexed, const char* op) {
  KILN_CHECK(values.defined(), op, ": the values are undefined");
  KILN_CHECK(values.dtype() == x.dtype(), op, ": the values are ", values.dtype(), " but the tensor is ", x.dtype(),
             "; convert them with .to(", x.dtype(), ")");
  KILN_CHECK(values.device() == x.device(), op, ": the values are on ", values.device(), " but the tensor is on ",
             x.device());
  const Shape& vs = values.sizes();
  bool fits = vs.size() <= indexed.size();
  for (size_t i = 1; fits && i <= vs.size(); ++i)
    fits = vs[vs.size() - i] == 1 || vs[vs.size() - i] == indexed[indexed.size() - i];
  KILN_CHECK(fits, op, ": values of shape ", shape_str(vs), " do not broadcast to the indexed shape ",
             shape_str(indexed));
  return values.expand(indexed).reshape({-1});
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  if (!has_index_tensor(indices)) return x.index(indices);
  const Parsed p = parse(x, indices, "index");
  Tensor y = x.index(p.basic);
  const Advanced a = resolve(y, p.tensors, "index");
  const int64_t m = static_cast<int64_t>(a.dims.size());
  // The combined position over the indexed dims, as if they were one dim in row-major order.
  Tensor combined = a.idx[0];
  for (int64_t j = 1; j < m; ++j) combined = ops::add(ops::mul(combined, y.size(a.dims[j])), a.idx[j]);
  int64_t at = a.dims[0];
  if (!a.adjacent) {
    Shape order(a.dims.begin(), a.dims.end());
    for (int64_t d = 0; d < y.dim(); ++d)
      if (std::find(a.dims.begin(), a.dims.end(), d) == a.dims.end()) order.push_back(d);
    y = y.permute(order);
    at = 0;
  }
  const Tensor out = index_select(y.flatten(at, at + m - 1), at, ops::reshape(combined, {-1}));
  Shape shape(out.sizes().begin(), out.sizes().begin() + at);
  shape.insert(shape.end(), a.shape.begin(), a.shape.end());
  shape.insert(shape.end(), out.sizes().begin() + at + 1, out.sizes().end());
  return out.reshape(shape);
}

Tensor index_put(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  KILN_CHECK(x.defined(), "index_put: the tensor is undefined");
  const Tensor c = x.contiguous();
  const Tensor pos = flat_positions(c, indices, "index_put");
  const Tensor v = flat_values(x, values, pos.sizes(), "index_put");
  const Tensor flat = c.reshape({-1}), places = ops::reshape(pos, {-1});
  return (accumulate ? index_add(flat, 0, places, v) : scatter(flat, 0, places, v)).view(x.sizes());
}

Tensor& index_put_(Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  KILN_CHECK(x.defined(), "index_put_: the tensor is undefined");
  if (should_record(x, values)) {
    return record_inplace("index_put_", x, [&](const Tensor& old) {
      return index_put(old, indices, values, accumulate);
    }, false);
  }
  Tensor c = x.is_contiguous() ? x : ops::contiguous(x);
  const Tensor pos = flat_positions(c, indices, "index_put_");
  Tensor v = flat_values(x, values, pos.sizes(), "index_put_");
  if (v.shares_storage_with(x)) v = ops::clone(v);  // read all of it before any of it is overwritten
  Tensor flat = ops::view(c, {-1});
  if (accumulate) ops::index_add_(flat, 0, ops::reshape(pos, {-1}), v);
  else ops::scatter_(flat, 0, ops::reshape(pos, {-1}), v);
  if (c.impl() != x.impl()) ops::copy_(x, c);
  return x;
}

}  // namespace kiln
