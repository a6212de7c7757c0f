// TensorImpl, metadata, element access, and the copies and conversions every other file relies on.
#include "kiln/tensor/tensor.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"

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

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

void* Tensor::raw_data_ptr() const {
  const auto& impl = checked();
  return static_cast<char*>(impl.storage()->data()) + impl.offset() * static_cast<int64_t>(dtype_size(impl.dtype()));
}

Scalar Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape_str(sizes()));
  Tensor c = device().is_cpu() ? *this : cpu();
  return visit_dtype(dtype(), "item", [&]<typename T>() -> Scalar { return Scalar(*static_cast<T*>(c.raw_data_ptr())); });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(kCPU, dtype_of<T>).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}
#define KILN_TO_VECTOR(e, T, name, cat) template std::vector<T> Tensor::to_vector<T>() const;
KILN_FORALL_DTYPES(KILN_TO_VECTOR)
#undef KILN_TO_VECTOR

// ---- copies and conversion ----

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(sizes(), TensorOptions(dtype()).device(device()));
  out.copy_(*this);
  return out;
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  KILN_CHECK(src.defined(), "copy_: source tensor is undefined");
  Shape b = broadcast_shapes(sizes(), src.sizes(), "copy_");
  KILN_CHECK(b == sizes(), "copy_: source of shape ", shape_str(src.sizes()), " cannot be broadcast to ",
             shape_str(sizes()));
  if (numel() == 0) return *this;
  Tensor s = src.sizes() == sizes() ? src : src.expand(sizes());
  // A copy between devices runs on the device that is not the CPU (its kernel knows how to reach both).
  Device run_on = device().is_cpu() ? s.device() : device();
  get_kernel<Op::copy>(run_on)(*this, s);
  bump_version();
  return *this;
}

Tensor Tensor::to(DType d) const { return to(device(), d); }
Tensor Tensor::to(Device dev) const { return to(dev, dtype()); }
Tensor Tensor::to(Device dev, DType d) const {
  if (dev == device() && d == dtype()) return *this;
  Tensor out = empty(sizes(), TensorOptions(d).device(dev));
  out.copy_(*this);
  return out;
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

}  // namespace kiln
