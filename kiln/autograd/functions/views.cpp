// Differentiable views and copies: the Tensor methods that make views (x.view, x.transpose, x.select, ...) and
// copies (clone, contiguous, to, copy_, fill_). A view's gradient is g put back into the input's shape:
// reshaped for the reshaping views, transposed back for transpose/permute, summed for expand, and for the views
// that pick elements (select, narrow, slice, diagonal, index, unfold) g written into zeros at the places the
// view looks at.
#include <functional>

#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::requires_grad;
using autograd::record;
using autograd::record_inplace;
using autograd::should_record;
using autograd::TensorList;

namespace {

// The view ops whose gradient is a reshape of g.
Tensor reshaping_view(const char* name, const Tensor& self, Tensor out) {
  if (should_record(self))
    record(name, out, {self}, [shape = self.sizes()](const Tensor& g, const OpNode&) { return TensorList{g.reshape(shape)}; });
  return out;
}

// The gradient of a view that picks elements: zeros of the input's shape with g where `pick` looks. `pick` is
// itself differentiable, so this is recorded too when backward is (create_graph).
using Pick = std::function<Tensor(const Tensor&)>;
Tensor unpick(const Tensor& g, const Shape& shape, const Pick& pick) {
  Tensor z = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
  ops::copy_(pick(z), g);
  if (should_record(g)) record("unpick", z, {g}, [pick](const Tensor& gg, const OpNode&) { return TensorList{pick(gg)}; });
  return z;
}

Tensor picking_view(const char* name, const Tensor& self, Tensor out, Pick pick) {
  if (should_record(self)) {
    record(name, out, {self}, [shape = self.sizes(), pick = std::move(pick)](const Tensor& g, const OpNode&) {
      return TensorList{unpick(g, shape, pick)};
    });
  }
  return out;
}

// The picking views that keep their input's order (narrow, slice, select, indexing with ints and slices): one
// that holds every element (x[:], a narrow over a whole dim, a select from a size-1 dim) has g reshaped as its
// gradient instead of a zero-filled copy of the input.
Tensor ordered_picking_view(const char* name, const Tensor& self, Tensor out, Pick pick) {
  if (out.numel() == self.numel()) return reshaping_view(name, self, std::move(out));
  return picking_view(name, self, std::move(out), std::move(pick));
}

}  // namespace

Tensor Tensor::alias() const {
  Tensor out = ops::alias(*this);
  if (should_record(*this)) record("alias", out, {*this}, [](const Tensor& g, const OpNode&) { return TensorList{g}; });
  return out;
}

Tensor Tensor::view(IntArrayRef shape) const { return reshaping_view("view", *this, ops::view(*this, shape)); }

Tensor Tensor::reshape(IntArrayRef shape) const { return reshaping_view("reshape", *this, ops::reshape(*this, shape)); }

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return reshaping_view("flatten", *this, ops::flatten(*this, start_dim, end_dim));
}

Tensor Tensor::unflatten(int64_t dim, IntArrayRef sizes) const {
  return reshaping_view("unflatten", *this, ops::unflatten(*this, dim, sizes));
}

Tensor Tensor::squeeze() const { return reshaping_view("squeeze", *this, ops::squeeze(*this)); }
Tensor Tensor::squeeze(int64_t dim) const { return reshaping_view("squeeze", *this, ops::squeeze(*this, dim)); }
Tensor Tensor::unsqueeze(int64_t dim) const { return reshaping_view("unsqueeze", *this, ops::unsqueeze(*this, dim)); }

// transpose: g transposed back
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  Tensor out = ops::transpose(*this, d0, d1);
  if (should_record(*this))
    record("transpose", out, {*this}, [d0, d1](const Tensor& g, const OpNode&) { return TensorList{g.transpose(d0, d1)}; });
  return out;
}

// permute: g permuted by the inverse order
Tensor Tensor::permute(IntArrayRef order) const {
  Tensor out = ops::permute(*this, order);
  if (should_record(*this)) {
    Shape inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[wrap_dim(order[i], dim(), "permute")] = static_cast<int64_t>(i);
    record("permute", out, {*this}, [inverse](const Tensor& g, const OpNode&) { return TensorList{g.permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::t() const {
  ops::t(*this);  // its checks
  return dim() < 2 ? alias() : transpose(0, 1);
}

Tensor Tensor::mT() const {
  ops::mT(*this);
  return transpose(-2, -1);
}

// expand: g summed over the expanded dims
Tensor Tensor::expand(IntArrayRef shape) const {
  Tensor out = ops::expand(*this, shape);
  if (should_record(*this)) {
    record("expand", out, {*this}, [shape = sizes()](const Tensor& g, const OpNode&) {
      return TensorList{autograd::sum_to(g, shape)};
    });
  }
  return out;
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return ordered_picking_view("narrow", *this, ops::narrow(*this, dim, start, length),
                      [=](const Tensor& t) { return t.narrow(dim, start, length); });
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) const {
  return ordered_picking_view("slice", *this, ops::slice(*this, dim, start, stop, step),
                      [=](const Tensor& t) { return t.slice(dim, start, stop, step); });
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  return ordered_picking_view("select", *this, ops::select(*this, dim, index),
                      [=](const Tensor& t) { return t.select(dim, index); });
}

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return index(std::vector<TensorIndex>(indices));
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  for (const TensorIndex& i : indices)
    if (std::holds_alternative<Tensor>(i.value)) return kiln::index(*this, indices);  // advanced_index.cpp
  return ordered_picking_view("index", *this, ops::index(*this, indices),
                      [indices](const Tensor& t) { return t.index(indices); });
}

Tensor Tensor::diagonal(int64_t offset, int64_t d0, int64_t d1) const {
  return picking_view("diagonal", *this, ops::diagonal(*this, offset, d0, d1),
                      [=](const Tensor& t) { return t.diagonal(offset, d0, d1); });
}

// unfold: windows that do not overlap pick elements. Overlapping ones (step < size: a convolution's patches)
// see an element several times, so their gradient adds up. Element j of every window comes from positions
// j, j + step, j + 2 step, ... of dim d: one strided slice. So the gradient is `size` strided adds, each over
// 1/size of g. When backward is itself recorded (create_graph), it is a scatter-add of g at the positions the
// windows read instead, which is differentiable.
Tensor Tensor::unfold(int64_t dim, int64_t size, int64_t step) const {
  Tensor out = ops::unfold(*this, dim, size, step);
  if (!should_record(*this)) return out;
  if (step >= size || this->dim() == 0)
    return picking_view("unfold", *this, out, [=](const Tensor& t) { return t.unfold(dim, size, step); });
  int64_t d = wrap_dim(dim, this->dim(), "unfold");
  record("unfold", out, {*this}, [in_shape = sizes(), d, size, step](const Tensor& g, const OpNode&) {
    TensorOptions like = TensorOptions(g.dtype()).device(g.device());
    int64_t windows = g.size(d);
    if (autograd::GradMode::is_enabled()) {
      Tensor flat_positions = ops::view(arange(shape_numel(in_shape), TensorOptions(kInt64).device(g.device())), in_shape);
      Tensor positions = ops::reshape(ops::unfold(flat_positions, d, size, step), {-1});
      return TensorList{kiln::index_add(zeros({shape_numel(in_shape)}, like), 0, positions, g.reshape({-1})).view(in_shape)};
    }
    Tensor grad = zeros(in_shape, like);
    for (int64_t j = 0; j < size; ++j) {
      Tensor dst = ops::slice(grad, d, j, j + (windows - 1) * step + 1, step);
      ops::add_(dst, ops::select(g, -1, j));
    }
    return TensorList{grad};
  });
  return out;
}

// as_strided addresses the storage directly; its gradient is defined here for a contiguous input at offset 0,
// where positions in the storage are positions in the input (overlapping views add up, through index_add).
Tensor Tensor::as_strided(IntArrayRef shape, IntArrayRef strides, std::optional<int64_t> offset) const {
  Tensor out = ops::as_strided(*this, shape, strides, offset);
  if (!should_record(*this)) return out;
  KILN_CHECK(is_contiguous() && storage_offset() == 0, "as_strided: backward is supported only for a contiguous "
             "input at storage offset 0; got strides ", shape_str(this->strides()), " at offset ", storage_offset());
  // Which element of the input each output element reads.
  Tensor positions = ops::as_strided(arange(numel(), TensorOptions(kInt64).device(device())), shape, strides, offset);
  record("as_strided", out, {*this}, [in_shape = sizes(), positions](const Tensor& g, const OpNode&) {
    Tensor flat = zeros({shape_numel(in_shape)}, TensorOptions(g.dtype()).device(g.device()));
    return TensorList{kiln::index_add(flat, 0, ops::reshape(positions, {-1}), g.reshape({-1})).view(in_shape)};
  });
  return out;
}

// ---- copies and conversion ----

// clone: dx = g
Tensor Tensor::clone() const {
  Tensor out = ops::clone(*this);
  if (should_record(*this)) record("clone", out, {*this}, [](const Tensor& g, const OpNode&) { return TensorList{g}; });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

// to: the gradient goes back to the input's dtype and device
Tensor Tensor::to(Device device, DType dtype, bool non_blocking) const {
  Tensor out = ops::to(*this, device, dtype, non_blocking);
  if (out.impl() == impl() || !should_record(*this)) return out;
  if (!is_floating(dtype)) return out;  // integer results have no gradient
  record("to", out, {*this}, [from_device = this->device(), from_dtype = this->dtype()](const Tensor& g, const OpNode&) {
    return TensorList{g.to(from_device, from_dtype)};
  });
  return out;
}
Tensor Tensor::to(DType dtype) const { return to(device(), dtype); }
Tensor Tensor::to(Device device, bool non_blocking) const { return to(device, dtype(), non_blocking); }

// copy_: the old value of self is overwritten (no gradient); src gets g, summed back if it was broadcast
const Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) const {
  if (!should_record(*this, src)) {
    ops::copy_(*this, src, non_blocking);
    return *this;
  }
  Tensor self = *this;
  record_inplace("copy_", self, [&](const Tensor& old) {
    Tensor out = empty_like(old);
    ops::copy_(out, src, non_blocking);
    record("copy_", out, {old, src}, [](const Tensor& g, const OpNode& n) {
      return TensorList{Tensor(), n.needs_input_grad(1) ? g : Tensor()};
    });
    return out;
  }, /*reads_self=*/false);
  return *this;
}

// fill_ and zero_: the old value gets no gradient
const Tensor& Tensor::fill_(const Scalar& value) const {
  if (!should_record(*this)) {
    ops::fill_(*this, value);
    return *this;
  }
  Tensor self = *this;
  record_inplace("fill_", self, [&](const Tensor& old) {
    Tensor out = full(old.sizes(), value, TensorOptions(old.dtype()).device(old.device()));
    record("fill_", out, {old}, [](const Tensor&, const OpNode&) { return TensorList{Tensor()}; });
    return out;
  }, /*reads_self=*/false);
  return *this;
}

const Tensor& Tensor::zero_() const { return fill_(0); }

}  // namespace kiln
