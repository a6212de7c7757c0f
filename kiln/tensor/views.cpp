// Views: new shapes and strides over the same storage, no data copied. reshape is the one exception: when
// the strides cannot express the new shape (a transposed tensor flattened), it copies, as in PyTorch.
#include <algorithm>
#include <numeric>

#include "kiln/tensor/tensor.h"

namespace kiln {

namespace {

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.storage(), base.dtype(), std::move(shape), std::move(strides), offset));
}

// Resolves one -1 in a requested shape and checks the element count.
Shape infer_shape(IntArrayRef requested, int64_t numel, const char* op, IntArrayRef from) {
  Shape shape = requested.vec();
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      KILN_CHECK(infer < 0, op, ": only one dim can be -1, got ", shape_str(requested));
      infer = static_cast<int>(i);
    } else {
      KILN_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in ", shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(requested), " is invalid for input of shape ",
               shape_str(from), " (", numel, " elements)");
    shape[infer] = numel / known;
  } else {
    KILN_CHECK(known == numel, op, ": shape ", shape_str(requested), " is invalid for input of shape ", shape_str(from),
               " (", numel, " elements)");
  }
  return shape;
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible: each run of old dims that
// is contiguous within itself can be re-split freely (PyTorch's computeStride).
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  Shape out(new_shape.size());
  if (shape.empty() || shape_numel(shape) == 0) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    // A chunk ends where the old dims stop being contiguous with each other.
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor Tensor::alias() const { return make_view(*this, sizes(), strides(), storage_offset()); }

Tensor Tensor::view(IntArrayRef shape) const {
  Shape new_shape = infer_shape(shape, numel(), "view", sizes());
  auto st = view_strides(sizes(), strides(), new_shape);
  KILN_CHECK(st.has_value(), "view: cannot view a tensor of shape ", shape_str(sizes()), " and strides ",
             shape_str(strides()), " as ", shape_str(new_shape),
             " without copying (its dims are not contiguous); use reshape or contiguous() first");
  return make_view(*this, std::move(new_shape), std::move(*st), storage_offset());
}

Tensor Tensor::reshape(IntArrayRef shape) const {
  Shape new_shape = infer_shape(shape, numel(), "reshape", sizes());
  if (auto st = view_strides(sizes(), strides(), new_shape)) return make_view(*this, new_shape, *st, storage_offset());
  return clone().view(new_shape);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  if (dim() == 0) return alias();
  Shape shape = sizes(), st = strides();
  std::swap(shape[d0], shape[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(*this, std::move(shape), std::move(st), storage_offset());
}

Tensor Tensor::permute(IntArrayRef order) const {
  KILN_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute: got ", order.size(), " dims ",
             shape_str(order), " for a tensor of ", dim(), " dims");
  Shape shape(order.size()), st(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = wrap_dim(order[i], dim(), "permute");
    KILN_CHECK(!seen[d], "permute: dim ", d, " appears twice in ", shape_str(order));
    seen[d] = true;
    shape[i] = sizes()[d];
    st[i] = strides()[d];
  }
  return make_view(*this, std::move(shape), std::move(st), storage_offset());
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t: expected a tensor of at most 2 dims, got shape ", shape_str(sizes()),
             " (use transpose or mT for batches)");
  return dim() < 2 ? alias() : transpose(0, 1);
}

Tensor Tensor::mT() const {
  KILN_CHECK(dim() >= 2, "mT: expected at least 2 dims, got shape ", shape_str(sizes()));
  return transpose(-2, -1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = sizes()[d];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, "narrow: start ", start, " and length ", length,
             " are out of range for dim ", d, " of size ", n);
  Shape shape = sizes();
  shape[d] = length;
  return make_view(*this, std::move(shape), strides(), storage_offset() + start * strides()[d]);
}

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) const {
  KILN_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  d = wrap_dim(d, dim(), "slice");
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = sizes()[d];
  // Python semantics: negative values count from the end, out-of-range values clamp.
  auto clampi = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
  int64_t b = start ? clampi(*start) : 0;
  int64_t e = stop ? clampi(*stop) : n;
  int64_t len = e > b ? (e - b - 1) / step + 1 : 0;  // not (e - b + step - 1) / step: that overflows
  Shape shape = sizes(), st = strides();
  shape[d] = len;
  st[d] *= step;
  return make_view(*this, std::move(shape), std::move(st), storage_offset() + b * strides()[d]);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  KILN_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = sizes()[d];
  KILN_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  Shape shape = sizes(), st = strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  return make_view(*this, std::move(shape), std::move(st), storage_offset() + index * strides()[d]);
}

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return index(std::vector<TensorIndex>(indices));
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  // Count the dims the indices consume (ints and slices), to know how many an Ellipsis stands for.
  int64_t consumed = 0, ellipses = 0;
  for (const auto& i : indices) {
    if (std::holds_alternative<int64_t>(i.value) || std::holds_alternative<Slice>(i.value)) ++consumed;
    if (std::holds_alternative<EllipsisIndex>(i.value)) ++ellipses;
  }
  KILN_CHECK(ellipses <= 1, "index: at most one Ellipsis is allowed");
  KILN_CHECK(consumed <= dim(), "index: too many indices (", consumed, ") for a tensor of ", dim(), " dims");
  Tensor result = *this;
  int64_t d = 0;  // the dim of `result` the next index applies to
  for (const auto& i : indices) {
    if (auto* k = std::get_if<int64_t>(&i.value)) {
      result = result.select(d, *k);
    } else if (auto* s = std::get_if<Slice>(&i.value)) {
      result = result.slice(d, s->start, s->stop, s->step);
      ++d;
    } else if (std::holds_alternative<NoneIndex>(i.value)) {
      result = result.unsqueeze(d);
      ++d;
    } else {
      d += dim() - consumed;
    }
  }
  return result;
}

Tensor Tensor::expand(IntArrayRef shape) const {
  KILN_CHECK(static_cast<int64_t>(shape.size()) >= dim(), "expand: the new shape ", shape_str(shape),
             " has fewer dims than the tensor's ", shape_str(sizes()));
  size_t lead = shape.size() - static_cast<size_t>(dim());
  Shape new_shape(shape.size()), st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(shape[i] >= -1, "expand: invalid size ", shape[i], " in ", shape_str(shape));
    if (i < lead) {
      KILN_CHECK(shape[i] >= 0, "expand: a new leading dim cannot be ", shape[i], " in ", shape_str(shape));
      new_shape[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t old = sizes()[i - lead];
    int64_t want = shape[i] == -1 ? old : shape[i];
    KILN_CHECK(want == old || old == 1, "expand: cannot expand shape ", shape_str(sizes()), " to ", shape_str(shape),
               ": dim ", i, " is ", old, " (only size-1 dims expand)");
    new_shape[i] = want;
    st[i] = (want == old) ? strides()[i - lead] : 0;
  }
  return make_view(*this, std::move(new_shape), std::move(st), storage_offset());
}

Tensor Tensor::squeeze() const {
  Shape shape, st;
  for (int64_t i = 0; i < dim(); ++i) {
    if (sizes()[i] == 1) continue;
    shape.push_back(sizes()[i]);
    st.push_back(strides()[i]);
  }
  return make_view(*this, std::move(shape), std::move(st), storage_offset());
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (dim() == 0 || sizes()[d] != 1) return alias();
  Shape shape = sizes(), st = strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  return make_view(*this, std::move(shape), std::move(st), storage_offset());
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape shape = sizes(), st = strides();
  int64_t new_stride = d < dim() ? sizes()[d] * strides()[d] : 1;
  shape.insert(shape.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return make_view(*this, std::move(shape), std::move(st), storage_offset());
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  KILN_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " must not come after end_dim ", end_dim);
  Shape shape(sizes().begin(), sizes().begin() + start_dim);
  int64_t n = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) n *= sizes()[i];
  shape.push_back(n);
  shape.insert(shape.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(shape);
}

Tensor Tensor::unflatten(int64_t d, IntArrayRef new_sizes) const {
  d = wrap_dim(d, dim(), "unflatten");
  Shape inner = infer_shape(new_sizes, sizes()[d], "unflatten", {sizes()[d]});
  Shape shape(sizes().begin(), sizes().begin() + d);
  shape.insert(shape.end(), inner.begin(), inner.end());
  shape.insert(shape.end(), sizes().begin() + d + 1, sizes().end());
  return view(shape);
}

Tensor Tensor::unfold(int64_t d, int64_t size, int64_t step) const {
  d = wrap_dim(d, dim(), "unfold");
  int64_t n = dim() == 0 ? 1 : sizes()[d];
  KILN_CHECK(size >= 0, "unfold: window size must be non-negative, got ", size);
  KILN_CHECK(size <= n, "unfold: window size ", size, " is larger than dim ", d, " of size ", n);
  KILN_CHECK(step > 0, "unfold: step must be positive, got ", step);
  Shape shape = sizes(), st = strides();
  if (dim() == 0) {
    shape = {size};
    st = {1};
  } else {
    shape[d] = (n - size) / step + 1;
    st[d] *= step;
    shape.push_back(size);
    st.push_back(strides()[d]);
  }
  return make_view(*this, std::move(shape), std::move(st), storage_offset());
}

Tensor Tensor::diagonal(int64_t offset, int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "diagonal");
  d1 = wrap_dim(d1, dim(), "diagonal");
  KILN_CHECK(d0 != d1, "diagonal: the two dims must differ, got ", d0, " twice");
  int64_t n0 = sizes()[d0], n1 = sizes()[d1];
  int64_t len = offset >= 0 ? std::max<int64_t>(0, std::min(n0, n1 - offset)) : std::max<int64_t>(0, std::min(n0 + offset, n1));
  int64_t start = storage_offset();
  if (len > 0) start += offset >= 0 ? offset * strides()[d1] : -offset * strides()[d0];
  Shape shape, st;
  for (int64_t i = 0; i < dim(); ++i) {
    if (i == d0 || i == d1) continue;
    shape.push_back(sizes()[i]);
    st.push_back(strides()[i]);
  }
  shape.push_back(len);
  st.push_back(strides()[d0] + strides()[d1]);
  return make_view(*this, std::move(shape), std::move(st), start);
}

Tensor Tensor::as_strided(IntArrayRef shape, IntArrayRef st, std::optional<int64_t> offset) const {
  KILN_CHECK(shape.size() == st.size(), "as_strided: shape ", shape_str(shape), " and strides ", shape_str(st),
             " have different lengths");
  int64_t off = offset.value_or(storage_offset());
  // Every element reachable must lie inside the storage.
  int64_t lo = off, hi = off;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(shape[i] >= 0, "as_strided: negative size in ", shape_str(shape));
    if (shape[i] == 0) empty = true;
    int64_t span = (shape[i] - 1) * st[i];
    (span >= 0 ? hi : lo) += span;
  }
  int64_t capacity = static_cast<int64_t>(storage()->nbytes() / element_size());
  KILN_CHECK(empty || (lo >= 0 && hi < capacity), "as_strided: shape ", shape_str(shape), " with strides ",
             shape_str(st), " at offset ", off, " reaches elements [", lo, ", ", hi, "] outside the storage of ",
             capacity, " elements");
  return make_view(*this, shape.vec(), st.vec(), off);
}

}  // namespace kiln
