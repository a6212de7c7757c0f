// TensorImpl, metadata, element access, and the copies and conversions every other file relies on.
#include "kiln/tensor/tensor.h"

#include "kiln/tensor/cuda/cuda.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/views.h"

namespace kiln {

namespace {

bool compute_contiguous(const Shape& shape, const Shape& strides) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;  // a size-1 dim's stride never matters
    if (shape[i] == 0) return true;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

}  // namespace

TensorImpl::TensorImpl(Storage storage, DType dtype, Shape shape, Shape strides, int64_t offset)
    : storage_(std::move(storage)),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(shape_numel(shape_)),
      is_contiguous_(compute_contiguous(shape_, strides_)) {
  KILN_ASSERT(shape_.size() == strides_.size());
  for (int64_t s : shape_) KILN_CHECK(s >= 0, "tensor: negative size ", s, " in shape ", shape_str(shape_));
}

void TensorImpl::set_data(const TensorImpl& source) {
  storage_ = source.storage_;
  dtype_ = source.dtype_;
  shape_ = source.shape_;
  strides_ = source.strides_;
  offset_ = source.offset_;
  numel_ = source.numel_;
  is_contiguous_ = source.is_contiguous_;
  is_wrapped_number = source.is_wrapped_number;
  is_view = false;
  view_base.reset();
}

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

void* Tensor::raw_data_ptr() const {
  const auto& impl = checked();
  return static_cast<char*>(impl.storage()->data()) + impl.offset() * static_cast<int64_t>(dtype_size(impl.dtype()));
}

Scalar Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape_str(sizes()));
  Tensor c = ops::to(*this, kCPU, dtype());
  return visit_dtype(dtype(), "item", [&]<typename T>() -> Scalar { return Scalar(*static_cast<T*>(c.raw_data_ptr())); });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = ops::contiguous(ops::to(*this, kCPU, dtype_of<T>));
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}
#define KILN_TO_VECTOR(e, T, name, cat) template std::vector<T> Tensor::to_vector<T>() const;
KILN_FORALL_DTYPES(KILN_TO_VECTOR)
#undef KILN_TO_VECTOR

// ---- aliasing ----

namespace {
// The first and one-past-last element offsets a view can reach.
std::pair<int64_t, int64_t> extent(const Tensor& t) {
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span = (t.size(d) - 1) * t.stride(d);
    (span >= 0 ? hi : lo) += span;
  }
  return {lo, hi + 1};
}
}  // namespace

bool Tensor::may_overlap(const Tensor& other) const {
  if (!shares_storage_with(other) || numel() == 0 || other.numel() == 0) return false;
  auto [a0, a1] = extent(*this);
  auto [b0, b1] = extent(other);
  int64_t ea = static_cast<int64_t>(element_size()), eb = static_cast<int64_t>(other.element_size());
  return a0 * ea < b1 * eb && b0 * eb < a1 * ea;
}

bool Tensor::is_same_view(const Tensor& other) const {
  return shares_storage_with(other) && storage_offset() == other.storage_offset() && dtype() == other.dtype() &&
         sizes() == other.sizes() && strides() == other.strides();
}

bool Tensor::has_internal_overlap() const {
  for (int64_t d = 0; d < dim(); ++d)
    if (stride(d) == 0 && size(d) > 1) return true;
  return false;
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

}  // namespace kiln

namespace kiln::ops {

Tensor contiguous(const Tensor& self) {
  if (self.is_contiguous()) return self;
  return clone(self);
}

Tensor clone(const Tensor& self) {
  Tensor out = empty(self.sizes(), TensorOptions(self.dtype()).device(self.device()));
  copy_(out, self);
  return out;
}

const Tensor& copy_(const Tensor& dst, const Tensor& src, bool non_blocking) {
  KILN_CHECK(dst.defined() && src.defined(), "copy_: ", dst.defined() ? "source" : "destination", " tensor is undefined");
  Shape b = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  KILN_CHECK(b == dst.sizes(), "copy_: source of shape ", shape_str(src.sizes()), " cannot be broadcast to ",
             shape_str(dst.sizes()));
  if (dst.numel() == 0) return dst;
  KILN_CHECK(!dst.has_internal_overlap(), "copy_: cannot write into a tensor of shape ", shape_str(dst.sizes()),
             " and strides ", shape_str(dst.strides()),
             ": several of its positions are one element (it was expanded); clone() it first");
  if (dst.is_same_view(src)) return dst;
  // A source that partly overlaps the destination (x.copy_(x.t())) would be read after being written: copy it first.
  Tensor s = dst.may_overlap(src) ? clone(src) : src;
  if (s.sizes() != dst.sizes()) s = expand(s, dst.sizes());
  // A copy between devices runs on the device that is not the CPU (its kernel knows how to reach both).
  Device run_on = dst.device().is_cpu() ? s.device() : dst.device();
  if (non_blocking) call_kernel<Op::copy_async>(run_on, dst, s);
  else call_kernel<Op::copy>(run_on, dst, s);
  dst.bump_version("copy_");
  return dst;
}

Tensor to(const Tensor& self, Device device, DType dtype, bool non_blocking) {
  if (device == self.device() && dtype == self.dtype()) return self;
  // Back to the host without waiting needs a pinned landing place (PyTorch does the same); where the host will
  // not pin it, ordinary memory and a copy that waits.
  Tensor out;
  if (non_blocking && device.is_cpu() && self.device().is_cuda()) {
    try {
      out = cuda::empty_pinned(self.sizes(), dtype);
    } catch (const Error&) {
      non_blocking = false;
    }
  }
  if (!out.defined()) out = empty(self.sizes(), TensorOptions(dtype).device(device));
  copy_(out, self, non_blocking);
  return out;
}

Tensor to(const Tensor& self, DType dtype) { return to(self, self.device(), dtype); }
Tensor to(const Tensor& self, Device device, bool non_blocking) {
  return to(self, device, self.dtype(), non_blocking);
}

const Tensor& fill_(const Tensor& self, const Scalar& value) {
  if (self.numel() > 0) call_kernel<Op::fill>(self.device(), self, value);
  self.bump_version("fill_");
  return self;
}

}  // namespace kiln::ops
