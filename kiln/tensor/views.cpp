// Views: new shapes and strides over the same storage, no data copied. reshape is the one exception: when
// the strides cannot express the new shape (a transposed tensor flattened), it copies, as in PyTorch.
#include <algorithm>
#include <numeric>

#include "kiln/tensor/views.h"

namespace kiln::ops {

namespace {

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>(base.storage(), base.dtype(), std::move(shape), std::move(strides), offset);
  impl->is_view = true;
  // The root: base's own root while that lives, else base itself.
  std::shared_ptr<TensorImpl> root = base.impl()->view_base.lock();
  if (!root) root = base.impl_ptr();
  impl->view_base = root;
  impl->base_generation.store(root->history_generation.load());  // made now: it sees the root as it is
  return Tensor(std::move(impl));
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

Tensor alias(const Tensor& self) { return make_view(self, self.sizes(), self.strides(), self.storage_offset()); }

Tensor view(const Tensor& self, IntArrayRef shape) {
  Shape new_shape = infer_shape(shape, self.numel(), "view", self.sizes());
  auto st = view_strides(self.sizes(), self.strides(), new_shape);
  KILN_CHECK(st.has_value(), "view: cannot view a tensor of shape ", shape_str(self.sizes()), " and strides ",
             shape_str(self.strides()), " as ", shape_str(new_shape),
             " without copying (its dims are not contiguous); use reshape or contiguous() first");
  return make_view(self, std::move(new_shape), std::move(*st), self.storage_offset());
}

Tensor reshape(const Tensor& self, IntArrayRef shape) {
  Shape new_shape = infer_shape(shape, self.numel(), "reshape", self.sizes());
  if (auto st = view_strides(self.sizes(), self.strides(), new_shape)) return make_view(self, new_shape, *st, self.storage_offset());
  return view(clone(self), new_shape);
}

Tensor transpose(const Tensor& self, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, self.dim(), "transpose");
  d1 = wrap_dim(d1, self.dim(), "transpose");
  if (self.dim() == 0) return alias(self);
  Shape shape = self.sizes(), st = self.strides();
  std::swap(shape[d0], shape[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(self, std::move(shape), std::move(st), self.storage_offset());
}

Tensor permute(const Tensor& self, IntArrayRef order) {
  KILN_CHECK(static_cast<int64_t>(order.size()) == self.dim(), "permute: got ", order.size(), " dims ",
             shape_str(order), " for a tensor of ", self.dim(), " dims");
  Shape shape(order.size()), st(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = wrap_dim(order[i], self.dim(), "permute");
    KILN_CHECK(!seen[d], "permute: dim ", d, " appears twice in ", shape_str(order));
    seen[d] = true;
    shape[i] = self.sizes()[d];
    st[i] = self.strides()[d];
  }
  return make_view(self, std::move(shape), std::move(st), self.storage_offset());
}

Tensor t(const Tensor& self) {
  KILN_CHECK(self.dim() <= 2, "t: expected a tensor of at most 2 dims, got shape ", shape_str(self.sizes()),
             " (use transpose or mT for batches)");
  return self.dim() < 2 ? alias(self) : transpose(self, 0, 1);
}

Tensor mT(const Tensor& self) {
  KILN_CHECK(self.dim() >= 2, "mT: expected at least 2 dims, got shape ", shape_str(self.sizes()));
  return transpose(self, -2, -1);
}

Tensor narrow(const Tensor& self, int64_t d, int64_t start, int64_t length) {
  KILN_CHECK(self.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim(d, self.dim(), "narrow");
  int64_t n = self.sizes()[d];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, "narrow: start ", start, " and length ", length,
             " are out of range for dim ", d, " of size ", n);
  Shape shape = self.sizes();
  shape[d] = length;
  return make_view(self, std::move(shape), self.strides(), self.storage_offset() + start * self.strides()[d]);
}

Tensor slice(const Tensor& self, int64_t d, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  KILN_CHECK(self.dim() > 0, "slice: cannot slice a 0-dim tensor");
  d = wrap_dim(d, self.dim(), "slice");
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = self.sizes()[d];
  // Python semantics: negative values count from the end, out-of-range values clamp.
  auto clampi = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
  int64_t b = start ? clampi(*start) : 0;
  int64_t e = stop ? clampi(*stop) : n;
  int64_t len = e > b ? (e - b - 1) / step + 1 : 0;  // not (e - b + step - 1) / step: that overflows
  Shape shape = self.sizes(), st = self.strides();
  shape[d] = len;
  st[d] *= step;
  return make_view(self, std::move(shape), std::move(st), self.storage_offset() + b * self.strides()[d]);
}

Tensor select(const Tensor& self, int64_t d, int64_t index) {
  KILN_CHECK(self.dim() > 0, "select: cannot select from a 0-dim tensor");
  d = wrap_dim(d, self.dim(), "select");
  int64_t n = self.sizes()[d];
  KILN_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  Shape shape = self.sizes(), st = self.strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  return make_view(self, std::move(shape), std::move(st), self.storage_offset() + index * self.strides()[d]);
}

Tensor index(const Tensor& self, std::initializer_list<TensorIndex> indices) {
  return index(self, std::vector<TensorIndex>(indices));
}

Tensor index(const Tensor& self, const std::vector<TensorIndex>& indices) {
  // Count the dims the indices consume (ints and slices), to know how many an Ellipsis stands for.
  int64_t consumed = 0, ellipses = 0;
  for (const auto& i : indices) {
    if (std::holds_alternative<int64_t>(i.value) || std::holds_alternative<Slice>(i.value)) ++consumed;
    if (std::holds_alternative<EllipsisIndex>(i.value)) ++ellipses;
    KILN_CHECK(!std::holds_alternative<Tensor>(i.value), "index: ops::index takes basic indices only; an index "
               "tensor gathers a copy, which Tensor::index does");
  }
  KILN_CHECK(ellipses <= 1, "index: at most one Ellipsis is allowed");
  KILN_CHECK(consumed <= self.dim(), "index: too many indices (", consumed, ") for a tensor of ", self.dim(), " dims");
  Tensor result = self;
  int64_t d = 0;  // the dim of `result` the next index applies to
  for (const auto& i : indices) {
    if (auto* k = std::get_if<int64_t>(&i.value)) {
      result = select(result, d, *k);
    } else if (auto* s = std::get_if<Slice>(&i.value)) {
      result = slice(result, d, s->start, s->stop, s->step);
      ++d;
    } else if (std::holds_alternative<NoneIndex>(i.value)) {
      result = unsqueeze(result, d);
      ++d;
    } else {
      d += self.dim() - consumed;
    }
  }
  return result;
}

Tensor expand(const Tensor& self, IntArrayRef shape) {
  KILN_CHECK(static_cast<int64_t>(shape.size()) >= self.dim(), "expand: the new shape ", shape_str(shape),
             " has fewer dims than the tensor's ", shape_str(self.sizes()));
  size_t lead = shape.size() - static_cast<size_t>(self.dim());
  Shape new_shape(shape.size()), st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(shape[i] >= -1, "expand: invalid size ", shape[i], " in ", shape_str(shape));
    if (i < lead) {
      KILN_CHECK(shape[i] >= 0, "expand: a new leading dim cannot be ", shape[i], " in ", shape_str(shape));
      new_shape[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t old = self.sizes()[i - lead];
    int64_t want = shape[i] == -1 ? old : shape[i];
    KILN_CHECK(want == old || old == 1, "expand: cannot expand shape ", shape_str(self.sizes()), " to ", shape_str(shape),
               ": dim ", i, " is ", old, " (only size-1 dims expand)");
    new_shape[i] = want;
    st[i] = (want == old) ? self.strides()[i - lead] : 0;
  }
  return make_view(self, std::move(new_shape), std::move(st), self.storage_offset());
}

Tensor squeeze(const Tensor& self) {
  Shape shape, st;
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (self.sizes()[i] == 1) continue;
    shape.push_back(self.sizes()[i]);
    st.push_back(self.strides()[i]);
  }
  return make_view(self, std::move(shape), std::move(st), self.storage_offset());
}

Tensor squeeze(const Tensor& self, int64_t d) {
  d = wrap_dim(d, self.dim(), "squeeze");
  if (self.dim() == 0 || self.sizes()[d] != 1) return alias(self);
  Shape shape = self.sizes(), st = self.strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  return make_view(self, std::move(shape), std::move(st), self.storage_offset());
}

Tensor unsqueeze(const Tensor& self, int64_t d) {
  d = wrap_dim(d, self.dim() + 1, "unsqueeze");
  Shape shape = self.sizes(), st = self.strides();
  int64_t new_stride = d < self.dim() ? self.sizes()[d] * self.strides()[d] : 1;
  shape.insert(shape.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return make_view(self, std::move(shape), std::move(st), self.storage_offset());
}

Tensor flatten(const Tensor& self, int64_t start_dim, int64_t end_dim) {
  if (self.dim() == 0) return reshape(self, {1});
  start_dim = wrap_dim(start_dim, self.dim(), "flatten");
  end_dim = wrap_dim(end_dim, self.dim(), "flatten");
  KILN_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " must not come after end_dim ", end_dim);
  Shape shape(self.sizes().begin(), self.sizes().begin() + start_dim);
  int64_t n = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) n *= self.sizes()[i];
  shape.push_back(n);
  shape.insert(shape.end(), self.sizes().begin() + end_dim + 1, self.sizes().end());
  return reshape(self, shape);
}

Tensor unflatten(const Tensor& self, int64_t d, IntArrayRef new_sizes) {
  d = wrap_dim(d, self.dim(), "unflatten");
  Shape inner = infer_shape(new_sizes, self.sizes()[d], "unflatten", {self.sizes()[d]});
  Shape shape(self.sizes().begin(), self.sizes().begin() + d);
  shape.insert(shape.end(), inner.begin(), inner.end());
  shape.insert(shape.end(), self.sizes().begin() + d + 1, self.sizes().end());
  return view(self, shape);
}

Tensor unfold(const Tensor& self, int64_t d, int64_t size, int64_t step) {
  d = wrap_dim(d, self.dim(), "unfold");
  int64_t n = self.dim() == 0 ? 1 : self.sizes()[d];
  KILN_CHECK(size >= 0, "unfold: window size must be non-negative, got ", size);
  KILN_CHECK(size <= n, "unfold: window size ", size, " is larger than dim ", d, " of size ", n);
  KILN_CHECK(step > 0, "unfold: step must be positive, got ", step);
  Shape shape = self.sizes(), st = self.strides();
  if (self.dim() == 0) {
    shape = {size};
    st = {1};
  } else {
    shape[d] = (n - size) / step + 1;
    st[d] *= step;
    shape.push_back(size);
    st.push_back(self.strides()[d]);
  }
  return make_view(self, std::move(shape), std::move(st), self.storage_offset());
}

Tensor diagonal(const Tensor& self, int64_t offset, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, self.dim(), "diagonal");
  d1 = wrap_dim(d1, self.dim(), "diagonal");
  KILN_CHECK(d0 != d1, "diagonal: the two dims must differ, got ", d0, " twice");
  int64_t n0 = self.sizes()[d0], n1 = self.sizes()[d1];
  int64_t len = offset >= 0 ? std::max<int64_t>(0, std::min(n0, n1 - offset)) : std::max<int64_t>(0, std::min(n0 + offset, n1));
  int64_t start = self.storage_offset();
  if (len > 0) start += offset >= 0 ? offset * self.strides()[d1] : -offset * self.strides()[d0];
  Shape shape, st;
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (i == d0 || i == d1) continue;
    shape.push_back(self.sizes()[i]);
    st.push_back(self.strides()[i]);
  }
  shape.push_back(len);
  st.push_back(self.strides()[d0] + self.strides()[d1]);
  return make_view(self, std::move(shape), std::move(st), start);
}

Tensor as_strided(const Tensor& self, IntArrayRef shape, IntArrayRef st, std::optional<int64_t> offset) {
  KILN_CHECK(shape.size() == st.size(), "as_strided: shape ", shape_str(shape), " and strides ", shape_str(st),
             " have different lengths");
  int64_t off = offset.value_or(self.storage_offset());
  // Every element reachable must lie inside the storage.
  int64_t lo = off, hi = off;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(shape[i] >= 0, "as_strided: negative size in ", shape_str(shape));
    if (shape[i] == 0) empty = true;
    int64_t span = (shape[i] - 1) * st[i];
    (span >= 0 ? hi : lo) += span;
  }
  int64_t capacity = static_cast<int64_t>(self.storage()->nbytes() / self.element_size());
  KILN_CHECK(empty || (lo >= 0 && hi < capacity), "as_strided: shape ", shape_str(shape), " with strides ",
             shape_str(st), " at offset ", off, " reaches elements [", lo, ", ", hi, "] outside the storage of ",
             capacity, " elements");
  return make_view(self, shape.vec(), st.vec(), off);
}

}  // namespace kiln::ops
