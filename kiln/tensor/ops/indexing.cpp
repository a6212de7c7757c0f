// Frontends of the data-movement ops.
//
// index_select, gather, scatter, scatter_add and index_add check shapes, dims and dtypes here, once for
// every device, and hand int64 indices to their kernels (indexing_cpu.cpp), which check the index values
// as they read them. nonzero (and flat_nonzero) counts here and has a kernel to write the coordinates, with a
// composite for a device without one. Everything else (cat, stack, split, chunk, one_hot, tril, triu, flip,
// repeat, pad) is a composite of views, copy_, where, cumsum and scatter_: no kernel of its own, so it runs
// wherever its parts do.
#include "kiln/tensor/views.h"
#include "kiln/tensor/ops/indexing.h"

#include <algorithm>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/along_dim.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/ops/pad.h"
#include "kiln/tensor/ops/reduce.h"
#include "kiln/tensor/ops/spatial_canonical.h"

namespace kiln::ops {

namespace {

// ---- shared checks ----

// The index as int64 on x's device; int32 is converted, anything else is an error.
Tensor index_to_int64(const char* op, const Tensor& x, const Tensor& index) {
  KILN_CHECK(index.defined(), op, ": the index tensor is undefined");
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, ": expected an int64 (or int32) index, got ",
             index.dtype());
  KILN_CHECK(index.device() == x.device(), op, ": expected the index on ", x.device(), " like the tensor, got ",
             index.device());
  return ops::to(index, kInt64);
}

// PyTorch treats a 0-dim tensor in these ops as having one dim of size 1; so do the kernels.
Tensor as_1d_if_scalar(const Tensor& t) { return t.dim() == 0 ? ops::reshape(t, {1}) : t; }

// An in-place target must not reach one element through two positions (an expanded tensor): the writes
// would collide.
void check_writable(const char* op, const Tensor& self) {
  for (int64_t d = 0; d < self.dim(); ++d)
    KILN_CHECK(self.stride(d) != 0 || self.size(d) <= 1, op, ": cannot write into a tensor of shape ",
               shape_str(self.sizes()), " whose dim ", d, " has stride 0 (expanded); clone it first");
}

// A source that overlaps self in memory is copied first, so that writes into self cannot change what is
// read later.
Tensor unaliased(const Tensor& t, const Tensor& self) { return t.shares_storage_with(self) ? ops::clone(t) : t; }

// ---- scatter family ----

// self, index, src: one number of dims; index no larger than src anywhere, nor than self outside dim.
template <Op op>
Tensor& scatter_impl(const char* name, Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor idx = index_to_int64(name, self, index);
  KILN_CHECK(src.device() == self.device(), name, ": expected src on ", self.device(), ", got ", src.device());
  KILN_CHECK(src.dtype() == self.dtype(), name, ": expected src of dtype ", self.dtype(), " like self, got ",
             src.dtype());
  KILN_CHECK(idx.dim() == self.dim() && src.dim() == self.dim(), name, ": self ", shape_str(self.sizes()),
             ", index ", shape_str(idx.sizes()), " and src ", shape_str(src.sizes()),
             " must have the same number of dims");
  int64_t d = wrap_dim(dim, self.dim(), name);
  Tensor s = as_1d_if_scalar(self), i = as_1d_if_scalar(idx), v = as_1d_if_scalar(unaliased(src, self));
  for (int64_t k = 0; k < s.dim(); ++k) {
    KILN_CHECK(i.size(k) <= v.size(k), name, ": index ", shape_str(idx.sizes()), " is larger than src ",
               shape_str(src.sizes()), " in dim ", k);
    KILN_CHECK(k == d || i.size(k) <= s.size(k), name, ": index ", shape_str(idx.sizes()), " is larger than self ",
               shape_str(self.sizes()), " in dim ", k, " (only dim ", d, " may differ)");
  }
  check_writable(name, s);
  if (i.numel() > 0) call_kernel<op>(self.device(), s, d, unaliased(i, self), v, 1);
  self.bump_version(name);
  return self;
}

// src for scatter(self, dim, index, value): the value, in self's dtype, seen with index's shape.
Tensor value_as_src(const Tensor& self, const Tensor& index, const Scalar& value) {
  return ops::expand(full({}, value, TensorOptions(self.dtype()).device(self.device())), index.sizes());
}

}  // namespace

// ---- joining and splitting ----

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  // PyTorch's legacy rule: 1-D tensors of shape (0) are skipped, whatever the other shapes are.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  DType dtype = tensors[0].dtype();
  const Tensor* ref = nullptr;
  size_t ref_pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.defined(), "cat: tensor ", i, " is undefined");
    KILN_CHECK(t.device() == tensors[0].device(), "cat: expected all tensors on ", tensors[0].device(),
               ", tensor ", i, " is on ", t.device());
    KILN_CHECK(t.dim() > 0, "cat: tensor ", i, " is 0-dim and cannot be concatenated (unsqueeze it, or use stack)");
    dtype = promote_types(dtype, t.dtype());
    if (!ref && !skipped(t)) {
      ref = &t;
      ref_pos = i;
    }
  }
  if (!ref) return empty({0}, TensorOptions(dtype).device(tensors[0].device()));
  int64_t d = wrap_dim(dim, ref->dim(), "cat");
  Shape shape = ref->sizes();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (skipped(t)) continue;
    KILN_CHECK(t.dim() == ref->dim(), "cat: tensors must have the same number of dims, but tensor ", ref_pos,
               " has shape ", shape_str(ref->sizes()), " and tensor ", i, " has shape ", shape_str(t.sizes()));
    for (int64_t k = 0; k < t.dim(); ++k)
      KILN_CHECK(k == d || t.size(k) == ref->size(k), "cat: sizes must match except in dim ", d, ", but tensor ",
                 ref_pos, " has shape ", shape_str(ref->sizes()), " and tensor ", i, " has shape ",
                 shape_str(t.sizes()), " (dim ", k, ": ", ref->size(k), " vs ", t.size(k), ")");
    shape[d] += t.size(d);
  }
  Tensor out = empty(shape, TensorOptions(dtype).device(ref->device()));
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (skipped(t)) continue;
    ops::copy_(ops::narrow(out, d, offset, t.size(d)), t);  // copy_ converts to the promoted dtype
    offset += t.size(d);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    KILN_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: expected tensors of one shape, but tensor 0 has ",
               "shape ", shape_str(tensors[0].sizes()), " and tensor ", i, " has shape ", shape_str(tensors[i].sizes()));
  }
  int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(ops::unsqueeze(t, d));
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t n = x.size(d);
  KILN_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size,
             " for dim ", d, " of size ", n);
  // A dim of size 0 still gives one (empty) piece, as in PyTorch.
  int64_t pieces = split_size == 0 ? 1 : std::max<int64_t>(1, (n + split_size - 1) / split_size);
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(pieces));
  for (int64_t p = 0; p < pieces; ++p) {
    int64_t start = p * split_size;
    out.push_back(ops::narrow(x, d, start, std::min(split_size, n - start)));
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, IntArrayRef sizes, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split: sizes must be non-negative, got ", shape_str(sizes));
    total += s;
  }
  KILN_CHECK(total == x.size(d), "split: sizes ", shape_str(sizes), " add up to ", total, ", not to the size ",
             x.size(d), " of dim ", d, " of shape ", shape_str(x.sizes()));
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(ops::narrow(x, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  KILN_CHECK(chunks > 0, "chunk: the number of chunks must be positive, got ", chunks);
  int64_t d = wrap_dim(dim, x.dim(), "chunk");
  int64_t n = x.size(d);
  // Pieces of ceil(n / chunks): fewer than `chunks` when equal pieces cannot make that many (5 in 4 -> 2, 2, 1).
  // An empty dim gives `chunks` empty pieces, as PyTorch.
  if (n == 0) return split(x, Shape(static_cast<size_t>(chunks), 0), d);
  return split(x, (n + chunks - 1) / chunks, d);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "unbind: cannot unbind a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> parts;
  parts.reserve(static_cast<size_t>(x.size(d)));
  for (int64_t i = 0; i < x.size(d); ++i) parts.push_back(select(x, d, i));
  return parts;
}

// ---- gathering and scattering ----

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor idx = index_to_int64("index_select", x, index);
  KILN_CHECK(idx.dim() <= 1, "index_select: expected a 0-dim or 1-dim index, got shape ", shape_str(idx.sizes()));
  int64_t d = wrap_dim(dim, x.dim(), "index_select");
  int64_t k = idx.numel();
  KILN_CHECK(x.dim() > 0 || k == 1, "index_select: a 0-dim tensor takes one index, got shape ", shape_str(idx.sizes()));
  Tensor x1 = as_1d_if_scalar(x);
  Shape shape = x1.sizes();
  shape[d] = k;
  Tensor out = empty(shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() > 0) call_kernel<Op::index_select>(x.device(), out, x1, d, ops::reshape(idx, {k}));
  return x.dim() == 0 ? ops::reshape(out, {}) : out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor idx = index_to_int64("gather", x, index);
  KILN_CHECK(idx.dim() == x.dim(), "gather: index ", shape_str(idx.sizes()), " must have the same number of dims as x ",
             shape_str(x.sizes()));
  int64_t d = wrap_dim(dim, x.dim(), "gather");
  for (int64_t k = 0; k < x.dim(); ++k)
    KILN_CHECK(k == d || idx.size(k) <= x.size(k), "gather: index ", shape_str(idx.sizes()), " is larger than x ",
               shape_str(x.sizes()), " in dim ", k, " (only dim ", d, " may differ)");
  Tensor x1 = as_1d_if_scalar(x), i1 = as_1d_if_scalar(idx);
  Tensor out = empty(i1.sizes(), TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() > 0) call_kernel<Op::gather>(x.device(), out, x1, d, i1);
  return ops::view(out, idx.sizes());
}

Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl<Op::scatter>("scatter_", self, dim, index, src);
}
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  return scatter_impl<Op::scatter>("scatter_", self, dim, index, value_as_src(self, index, value));
}
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl<Op::scatter_add>("scatter_add_", self, dim, index, src);
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = ops::clone(self);
  return scatter_impl<Op::scatter>("scatter", out, dim, index, src);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  Tensor out = ops::clone(self);
  return scatter_impl<Op::scatter>("scatter", out, dim, index, value_as_src(self, index, value));
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = ops::clone(self);
  return scatter_impl<Op::scatter_add>("scatter_add", out, dim, index, src);
}

namespace {

// self: (..., n, ...), index: (k), src: self's shape with dim -> k
Tensor& index_add_impl(const char* name, Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                       const Scalar& alpha) {
  Tensor idx = index_to_int64(name, self, index);
  KILN_CHECK(idx.dim() <= 1, name, ": expected a 0-dim or 1-dim index, got shape ", shape_str(idx.sizes()));
  KILN_CHECK(src.device() == self.device(), name, ": expected src on ", self.device(), ", got ", src.device());
  KILN_CHECK(src.dtype() == self.dtype(), name, ": expected src of dtype ", self.dtype(), " like self, got ",
             src.dtype());
  KILN_CHECK(is_floating(self.dtype()) || !alpha.is_floating(), name, ": alpha must be an integer for ",
             self.dtype(), " tensors, got ", alpha);
  int64_t d = wrap_dim(dim, self.dim(), name);
  Tensor s = as_1d_if_scalar(self), v = as_1d_if_scalar(unaliased(src, self));
  Shape want = s.sizes();
  want[d] = idx.numel();
  KILN_CHECK(v.sizes() == want, name, ": src ", shape_str(src.sizes()), " must be self ", shape_str(self.sizes()),
             " with dim ", d, " of the index's size ", idx.numel(), ", i.e. ", shape_str(want));
  check_writable(name, s);
  if (v.numel() > 0) call_kernel<Op::index_add>(self.device(), s, d, ops::reshape(unaliased(idx, self), {idx.numel()}), v, alpha);
  self.bump_version("index_add_");
  return self;
}

}  // namespace

Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  return index_add_impl("index_add_", self, dim, index, src, alpha);
}
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  Tensor out = ops::clone(self);
  return index_add_impl("index_add", out, dim, index, src, alpha);
}

// ---- composites ----

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  Tensor idx = index_to_int64("one_hot", indices, indices);
  KILN_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (infer) or non-negative, got ", num_classes);
  // The output's shape may depend on the values, and bad values need a one_hot error: read them on the host.
  // NOTE: this copies the indices to the CPU; a device max/min would do once the reductions exist.
  std::vector<int64_t> v = idx.to_vector<int64_t>();
  KILN_CHECK(!v.empty() || num_classes >= 0, "one_hot: cannot infer num_classes from an empty tensor");
  if (!v.empty()) {
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    KILN_CHECK(*lo >= 0, "one_hot: class values must be non-negative, got ", *lo);
    if (num_classes == -1) num_classes = *hi + 1;
    KILN_CHECK(*hi < num_classes, "one_hot: class value ", *hi, " is out of range for num_classes ", num_classes);
  }
  Shape shape = idx.sizes();
  shape.push_back(num_classes);
  Tensor out = zeros(shape, TensorOptions(kInt64).device(idx.device()));
  if (idx.numel() > 0) scatter_(out, -1, ops::unsqueeze(idx, -1), 1);
  return out;
}

namespace {

// x: (..., M, N). Keeps x where the column c and row r satisfy c - r <= k (tril) or c - r >= k (triu).
Tensor triangle(const char* op, const Tensor& x, int64_t k, bool lower) {
  KILN_CHECK(x.dim() >= 2, op, ": expected a tensor of at least 2 dims, got shape ", shape_str(x.sizes()));
  TensorOptions o = TensorOptions(kInt64).device(x.device());
  // c - r <= k as c <= r + k: one broadcast comparison, with no (M, N) int64 of differences in between. k
  // clamped to [-(M + 1), N] keeps or drops what it did (c - r lies in [1 - M, N - 1]), and r + k cannot overflow.
  const int64_t kk = std::clamp(k, -(x.size(-2) + 1), x.size(-1));
  Tensor bound = ops::unsqueeze(add(arange(x.size(-2), o), Scalar(kk)), -1);  // (M, 1): r + k
  Tensor cols = arange(x.size(-1), o);                                        // (N)
  Tensor keep = lower ? le(cols, bound) : ge(cols, bound);                     // (M, N)
  // A 0-dim zero of x's own dtype: a wrapped C++ 0 would promote bool x to int64.
  Tensor zero = zeros({}, TensorOptions(x.dtype()).device(x.device()));
  return where(keep, x, zero);
}

}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle("tril", x, k, true); }
Tensor triu(const Tensor& x, int64_t k) { return triangle("triu", x, k, false); }

Tensor flip(const Tensor& x, IntArrayRef dims) {
  Shape strides = x.strides();
  int64_t offset = x.storage_offset();
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), false);
  for (int64_t dim : dims) {
    int64_t d = wrap_dim(dim, x.dim(), "flip");
    KILN_CHECK(!seen[d], "flip: dim ", d, " appears more than once in ", shape_str(dims));
    seen[d] = true;
    if (x.dim() == 0 || x.size(d) == 0) continue;
    // Start at the last element along d and walk back: the copy kernel takes negative strides.
    offset += (x.size(d) - 1) * strides[d];
    strides[d] = -strides[d];
  }
  Tensor reversed(std::make_shared<TensorImpl>(x.storage(), x.dtype(), x.sizes(), std::move(strides), offset));
  return ops::clone(reversed);
}

Tensor repeat(const Tensor& x, IntArrayRef repeats) {
  int64_t n = static_cast<int64_t>(repeats.size());
  KILN_CHECK(n >= x.dim(), "repeat: got ", n, " repeats ", shape_str(repeats), " for a tensor of ", x.dim(),
             " dims ", shape_str(x.sizes()), ": need at least one per dim");
  for (int64_t r : repeats) KILN_CHECK(r >= 0, "repeat: repeats must be non-negative, got ", shape_str(repeats));
  // x with leading 1s to n dims, then each dim i seen as (repeats[i], size[i]) with stride 0 on the repeats.
  Shape padded(static_cast<size_t>(n - x.dim()), 1);
  padded.insert(padded.end(), x.sizes().begin(), x.sizes().end());
  Tensor src = ops::reshape(x, padded);
  Shape interleaved, result;
  for (int64_t i = 0; i < n; ++i) {
    src = ops::unsqueeze(src, 2 * i);
    interleaved.push_back(repeats[i]);
    interleaved.push_back(padded[i]);
    result.push_back(repeats[i] * padded[i]);
  }
  // Copy into a fresh tensor: repeat never returns a view, even when every repeat is 1.
  Tensor out = empty(result, TensorOptions(x.dtype()).device(x.device()));
  ops::copy_(ops::view(out, interleaved), ops::expand(src, interleaved));
  return out;
}

namespace {

// nonzero through the device's kernel: the nonzeros counted (one read of the count from the device), then
// written. x has at least one dim.
Tensor nonzero_by_kernel(const Tensor& x) {
  const TensorOptions longs = TensorOptions(kInt64).device(x.device());
  const int64_t count = sum(ne(x, Scalar(0))).item<int64_t>();
  Tensor out = empty({count, x.dim()}, longs);
  if (count > 0) call_kernel<Op::nonzero>(x.device(), out, contiguous(x));
  return out;
}

}  // namespace

// With a kernel (the CPU's, CUDA's), that; otherwise each nonzero element's place in the output is the count of nonzeros
// before it (a cumsum), and the other elements all go to one spare slot past the end, which is cut off.
Tensor flat_nonzero(const Tensor& x) {
  KILN_CHECK(x.defined(), "nonzero: input tensor is undefined");
  const TensorOptions longs = TensorOptions(kInt64).device(x.device());
  const int64_t n = x.numel();
  if (n == 0) return empty({0}, longs);
  if (has_kernel<Op::nonzero>(x.device().type)) return view(nonzero_by_kernel(reshape(x, {-1})), {-1});
  const Tensor flags = ne(reshape(x, {-1}), Scalar(0));
  const Tensor ends = cumsum(flags, 0);  // int64: the nonzeros up to and including each element
  const int64_t count = ops::select(ends, 0, n - 1).item<int64_t>();
  const Tensor dest = where(flags, sub(ends, Scalar(1)), Scalar(count));
  Tensor out = empty({count + 1}, longs);
  scatter_(out, 0, dest, arange(0, n, 1, longs));
  return contiguous(narrow(out, 0, 0, count));
}

Tensor nonzero(const Tensor& x) {
  KILN_CHECK(x.defined(), "nonzero: input tensor is undefined");
  if (x.dim() > 0 && has_kernel<Op::nonzero>(x.device().type)) return nonzero_by_kernel(x);
  const Tensor flat = flat_nonzero(x);
  const TensorOptions longs = TensorOptions(kInt64).device(x.device());
  if (x.dim() == 0) return empty({flat.numel(), 0}, longs);
  // Column d holds the d-th coordinate of each nonzero, picked from a grid of every element's d-th coordinate.
  std::vector<Tensor> columns;
  for (int64_t d = 0; d < x.dim(); ++d) {
    Shape along(static_cast<size_t>(x.dim()), 1);
    along[static_cast<size_t>(d)] = x.size(d);
    const Tensor grid = contiguous(expand(view(arange(0, x.size(d), 1, longs), along), x.sizes()));
    columns.push_back(index_select(view(grid, {-1}), 0, flat));
  }
  return stack(columns, 1);
}

Tensor pad(const Tensor& x, IntArrayRef pads, const Scalar& value) {
  int64_t pairs = static_cast<int64_t>(pads.size()) / 2;
  KILN_CHECK(pads.size() % 2 == 0, "pad: expected (before, after) pairs, got an odd number of pads ", shape_str(pads));
  KILN_CHECK(pairs <= x.dim(), "pad: ", pairs, " pairs of pads ", shape_str(pads), " for a tensor of ", x.dim(),
             " dims ", shape_str(x.sizes()));
  Shape shape = x.sizes();
  for (int64_t j = 0; j < pairs; ++j) {
    int64_t d = x.dim() - 1 - j;
    shape[d] += pads[2 * j] + pads[2 * j + 1];
    KILN_CHECK(shape[d] >= 0, "pad: pads (", pads[2 * j], ", ", pads[2 * j + 1], ") make dim ", d, " of size ",
               x.size(d), " negative (", shape[d], ")");
  }
  Tensor out = full(shape, value, TensorOptions(x.dtype()).device(x.device()));
  // The part of x that survives (negative pads crop it) and where it lands in out.
  Tensor from = x, to = out;
  for (int64_t j = 0; j < pairs; ++j) {
    int64_t d = x.dim() - 1 - j, before = pads[2 * j], after = pads[2 * j + 1];
    int64_t len = x.size(d) - std::max<int64_t>(0, -before) - std::max<int64_t>(0, -after);
    if (len <= 0) return out;
    from = ops::narrow(from, d, std::max<int64_t>(0, -before), len);
    to = ops::narrow(to, d, std::max<int64_t>(0, before), len);
  }
  ops::copy_(to, from);
  return out;
}

namespace {
// The pad kernels' params: the before pads of D, H, W (spatial_canonical's dims).
PadParams pad_params(IntArrayRef pads, PadMode mode) {
  PadParams p;
  p.mode = mode;
  for (size_t j = 0; j < pads.size() / 2; ++j) p.before[2 - j] = pads[2 * j];
  return p;
}
Shape padded_shape(IntArrayRef shape, IntArrayRef pads) {
  Shape out = shape.vec();
  for (size_t j = 0; j < pads.size() / 2; ++j) out[shape.size() - 1 - j] += pads[2 * j] + pads[2 * j + 1];
  return out;
}
}  // namespace

void check_pad(const Tensor& x, IntArrayRef pads, PadMode mode) {
  KILN_CHECK(mode != PadMode::Constant, "pad: check_pad is for the copying modes, got constant");
  KILN_CHECK(pads.size() % 2 == 0 && !pads.empty(), "pad: expected (before, after) pairs, got ", shape_str(pads));
  const int64_t pairs = static_cast<int64_t>(pads.size()) / 2;
  KILN_CHECK(pairs <= x.dim(), "pad: ", pairs, " pairs of pads ", shape_str(pads), " for a tensor of ", x.dim(),
             " dims ", shape_str(x.sizes()));
  for (int64_t j = 0; j < pairs; ++j) {
    const int64_t d = x.dim() - 1 - j, n = x.size(d), before = pads[2 * j], after = pads[2 * j + 1];
    KILN_CHECK(n + before + after >= 0, "pad: pads (", before, ", ", after, ") make dim ", d, " of size ", n,
               " negative");
    if (mode == PadMode::Reflect)
      KILN_CHECK(before < n && after < n, "pad: reflect pads (", before, ", ", after, ") of dim ", d,
                 " must be smaller than its size ", n, " (input of shape ", shape_str(x.sizes()), ")");
    else if (mode == PadMode::Replicate)
      KILN_CHECK(n > 0, "pad: replicate needs a non-empty dim ", d, ", got input of shape ", shape_str(x.sizes()));
    else
      // A crop on one side and a wrap on the other could wrap the input or the cropped input (PyTorch versions
      // differ), so circular takes no negative pads: narrow first.
      KILN_CHECK(before >= 0 && after >= 0 && before <= n && after <= n, "pad: circular pads (", before, ", ", after,
                 ") of dim ", d, " must be in [0, ", n, "], its size (input of shape ", shape_str(x.sizes()),
                 "): they wrap once, and do not crop");
  }
}

Tensor pad(const Tensor& x, IntArrayRef pads, PadMode mode) {
  KILN_CHECK(x.defined(), "pad: the input tensor is undefined");
  check_pad(x, pads, mode);
  const size_t k = pads.size() / 2;
  KILN_CHECK(k <= 3, "pad: the ", padding::mode_name(mode), " kernels pad up to three dims, got ", k, " pairs");
  Tensor out = empty(padded_shape(x.sizes(), pads), TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  call_kernel<Op::pad>(x.device(), view(out, spatial_canonical(out.sizes(), k)),
                       view(contiguous(x), spatial_canonical(x.sizes(), k)), pad_params(pads, mode));
  return out;
}

Tensor pad_backward(const Tensor& grad_out, IntArrayRef pads, PadMode mode, IntArrayRef input_shape) {
  KILN_CHECK(grad_out.defined(), "pad_backward: grad_out is undefined");
  const size_t k = pads.size() / 2;
  KILN_CHECK(mode != PadMode::Constant && pads.size() % 2 == 0 && k >= 1 && k <= 3 && k <= input_shape.size(),
             "pad_backward: expected a copying mode and one to three (before, after) pairs, got ", shape_str(pads));
  KILN_CHECK(grad_out.sizes() == padded_shape(input_shape, pads), "pad_backward: grad_out ",
             shape_str(grad_out.sizes()), " is not the input shape ", shape_str(input_shape), " padded by ",
             shape_str(pads));
  KILN_CHECK(is_floating(grad_out.dtype()), "pad_backward: expected a floating-point grad_out, got ",
             grad_out.dtype());
  Tensor grad_x = empty(input_shape, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  if (grad_x.numel() == 0) return grad_x;
  if (grad_out.numel() == 0) return fill_(grad_x, 0);
  call_kernel<Op::pad_backward>(grad_out.device(), view(grad_x, spatial_canonical(input_shape, k)),
                                view(contiguous(grad_out), spatial_canonical(grad_out.sizes(), k)),
                                pad_params(pads, mode));
  return grad_x;
}

}  // namespace kiln::ops
