// Tensor: a view (offset, shape, strides, dtype) into a shared Storage.
//
// A Tensor is a cheap handle (one shared_ptr) to a TensorImpl; copying a Tensor shares the data, as in
// PyTorch. Views (view, transpose, narrow, expand, ...) make a new TensorImpl over the same Storage; in-place
// ops write through it and bump the storage's version counter. Strides and offsets are in elements.
//
// The tensor layer defines the metadata and data-access members. Every member that computes or makes a view
// (x.exp(), a + b, x.sum(1), x.view(...)) and the autograd members (requires_grad_, backward, grad) are defined
// by the autograd layer (kiln/autograd/tensor_methods.cpp), so that whatever a user calls is differentiable.
// Code inside the tensor layer calls the raw functions of namespace kiln::ops instead (kiln/tensor/ops.h), which
// check their arguments and look up the kernel for the op and the tensor's device; a link test keeps the tensor
// library free of references to the layers above it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/tensor/device.h"
#include "kiln/tensor/dtype.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/scalar.h"
#include "kiln/tensor/shape.h"
#include "kiln/tensor/storage.h"

namespace kiln {

namespace autograd {
class Node;
}

// Autograd's per-tensor state (kiln/autograd/meta.h). The tensor layer only owns it: a tensor that has never
// been near autograd has none, which keeps plain tensors as small and fast as before.
struct AutogradMetaBase {
  virtual ~AutogradMetaBase() = default;
};

class TensorImpl {
 public:
  TensorImpl(Storage storage, DType dtype, Shape shape, Shape strides, int64_t offset);

  // Takes `source`'s data (storage, dtype, shape, strides, offset), keeping this tensor's identity and autograd
  // state: what Module::to does to each parameter (PyTorch's param.data = ...). It is no longer a view.
  void set_data(const TensorImpl& source);

  const Storage& storage() const { return storage_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t numel() const { return numel_; }
  bool is_contiguous() const { return is_contiguous_; }

  // A scalar that came from a C++ number (add(x, 2)): type promotion lets it yield to tensors.
  bool is_wrapped_number = false;
  // Made by a view op (view, transpose, select, ...): it shares its storage with the tensor it was made from.
  bool is_view = false;
  // The tensor the first view op of a chain was applied to (a view of a view points to that root), so that an
  // in-place write through the view can give the root its new autograd history. Weak: a view does not keep
  // its base (and the base's graph) alive, and no saved tensor can close a cycle through it. Empty for
  // detach() and for tensors not made by a view op.
  std::weak_ptr<TensorImpl> view_base;
  // For autograd (kiln/autograd/meta.h): as a base, how many times an in-place op rewrote its history; as a
  // view, its base's count when the view was made or its history last set. Atomic: a view's history is
  // rebuilt lazily, possibly from several threads, and base_generation is stored (release) only after the new
  // history, so a thread that reads it current (acquire) may read the history without a lock.
  std::atomic<uint64_t> history_generation{0};
  std::atomic<uint64_t> base_generation{0};
  // Set and read by the autograd layer only.
  std::unique_ptr<AutogradMetaBase> autograd_meta;

 private:
  Storage storage_;
  DType dtype_;
  Shape shape_;
  Shape strides_;
  int64_t offset_;
  int64_t numel_;
  bool is_contiguous_;
};

// Options for factories: dtype (default: the default float dtype, or what the factory implies) and device.
//   zeros({2, 3}, kInt64);  ones({4}, Device::cuda());  empty({8}, TensorOptions().dtype(kF16).device("cuda:1"))
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions(DeviceType t) : device_(t) {}
  TensorOptions dtype(DType d) const {
    auto o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  std::optional<DType> dtype_opt() const { return dtype_; }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
  Device device() const { return device_; }

 private:
  std::optional<DType> dtype_;
  Device device_ = kCPU;
};

// Indexing, as x[...] in PyTorch: x.index({0, Slice(1, None, 2), None, Ellipsis}) picks a view (basic
// indexing); a tensor among the indices (int64 positions, or a bool mask) gathers a copy (advanced indexing).
struct NoneIndex {};
struct EllipsisIndex {};
inline constexpr NoneIndex None{};
inline constexpr EllipsisIndex Ellipsis{};
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  Slice() = default;
  Slice(std::optional<int64_t> start_, std::optional<int64_t> stop_ = std::nullopt, int64_t step_ = 1)
      : start(start_), stop(stop_), step(step_) {}
  Slice(std::optional<int64_t> start_, NoneIndex, int64_t step_ = 1) : start(start_), step(step_) {}
  Slice(NoneIndex, std::optional<int64_t> stop_ = std::nullopt, int64_t step_ = 1) : stop(stop_), step(step_) {}
  Slice(NoneIndex, NoneIndex, int64_t step_ = 1) : step(step_) {}
};
// One entry of x.index({...}); defined after Tensor, which it may hold.
struct TensorIndex;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  int64_t dim() const { return static_cast<int64_t>(checked().shape().size()); }
  const Shape& sizes() const { return checked().shape(); }
  const Shape& shape() const { return checked().shape(); }
  int64_t size(int64_t d) const;
  const Shape& strides() const { return checked().strides(); }
  int64_t stride(int64_t d) const;
  int64_t numel() const { return checked().numel(); }
  DType dtype() const { return checked().dtype(); }
  Device device() const { return checked().device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  int64_t storage_offset() const { return checked().offset(); }
  const Storage& storage() const { return checked().storage(); }
  bool is_contiguous() const { return checked().is_contiguous(); }
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  uint64_t version() const { return storage()->version(); }
  // `op` names the in-place op that wrote (a string literal); see StorageImpl::bump_version.
  void bump_version(const char* op) const { storage()->bump_version(op); }
  // True when both tensors view the same storage block.
  bool shares_storage_with(const Tensor& other) const { return storage() == other.storage(); }
  // True when some element of one may be an element of the other (same storage, intersecting byte ranges).
  bool may_overlap(const Tensor& other) const;
  // True when both are the same view: same storage, offset, shape and strides.
  bool is_same_view(const Tensor& other) const;
  // True when two positions of this tensor reach one element (a stride-0 dim of size > 1, from expand).
  bool has_internal_overlap() const;

  // ---- data access (CPU) ----
  // Pointer to the first element (offset applied). T must match the dtype.
  template <typename T>
  T* data_ptr() const {
    KILN_CHECK(dtype_of<T> == dtype(), "data_ptr: tensor has dtype ", dtype(), " but ", dtype_of<T>,
               " was asked for");
    return static_cast<T*>(raw_data_ptr());
  }
  void* raw_data_ptr() const;
  // The value of a one-element tensor.
  Scalar item() const;
  template <typename T>
  T item() const {
    return item().to<T>();
  }
  // All elements in row-major order, converted to T (copies through the CPU).
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- views (share storage) ----
  Tensor view(IntArrayRef shape) const;  // one dim may be -1
  Tensor reshape(IntArrayRef shape) const;  // a view when the strides allow, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(IntArrayRef order) const;
  Tensor t() const;  // 2-D transpose (0-D and 1-D unchanged)
  Tensor mT() const;  // swaps the last two dims
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
               int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  // Basic indices make a view. Index tensors (int64 or int32 positions, negative from the end; bool masks, each
  // standing for its nonzero() coordinates over as many dims as it has) are broadcast together, and the result
  // takes their shape where the first of them stood when they stand side by side, or first otherwise (NumPy's
  // and PyTorch's rule). Differentiable: the gradient adds up at repeated positions.
  Tensor index(std::initializer_list<TensorIndex> indices) const;
  Tensor index(const std::vector<TensorIndex>& indices) const;
  Tensor operator[](const Tensor& index) const;  // x[mask], x[positions]: index({index})
  // Writes values (broadcast to x.index(indices)'s shape) at the indexed places: x[indices] = values, or
  // x[indices] += values with accumulate, where repeated places add up (without it, one of them wins).
  const Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate = false) const;
  const Tensor& index_put_(const std::vector<TensorIndex>& indices, const Scalar& value) const;
  Tensor index_put(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate = false) const;
  Tensor expand(IntArrayRef shape) const;  // -1 keeps a dim
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, IntArrayRef sizes) const;
  Tensor unfold(int64_t dim, int64_t size, int64_t step) const;  // sliding windows as a new last dim
  Tensor diagonal(int64_t offset = 0, int64_t d0 = 0, int64_t d1 = 1) const;
  Tensor as_strided(IntArrayRef shape, IntArrayRef strides, std::optional<int64_t> offset = std::nullopt) const;
  Tensor alias() const;  // a new handle to the same view

  // ---- copies and conversion ----
  Tensor contiguous() const;
  Tensor clone() const;
  // In-place methods are const, as in current PyTorch: they change the data, never the handle.
  // Broadcasts src, converts dtype and device. non_blocking: see ops::copy_ (views.h): a copy between host and GPU
  // from or into pinned memory is only queued.
  const Tensor& copy_(const Tensor& src, bool non_blocking = false) const;
  Tensor to(DType dtype) const;  // returns *this when nothing changes, as PyTorch does
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  Tensor cpu() const { return to(kCPU); }

  // ---- math (see ops.h for each one's doc) ----
  Tensor neg() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tan() const;
  Tensor asin() const;
  Tensor acos() const;
  Tensor atan() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor asinh() const;
  Tensor acosh() const;
  Tensor atanh() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor reciprocal() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;  // halves to even
  Tensor trunc() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor erf() const;
  Tensor silu() const;
  Tensor square() const;  // x * x
  // In place, as the free functions of the same names (kiln/autograd/functions.h).
  const Tensor& neg_() const;
  const Tensor& abs_() const;
  const Tensor& exp_() const;
  const Tensor& log_() const;
  const Tensor& sqrt_() const;
  const Tensor& tanh_() const;
  const Tensor& sigmoid_() const;
  const Tensor& relu_() const;
  const Tensor& floor_() const;
  const Tensor& round_() const;
  const Tensor& pow_(const Scalar& exponent) const;
  const Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor pow(const Scalar& exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor add(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor sub(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor atan2(const Tensor& other) const;
  Tensor fmod(const Tensor& other) const;       // the sign of this (C's fmod)
  Tensor remainder(const Tensor& other) const;  // the sign of other (Python's %)
  const Tensor& add_(const Tensor& other, const Scalar& alpha = 1) const;
  const Tensor& sub_(const Tensor& other, const Scalar& alpha = 1) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& add_(const Scalar& other) const;
  const Tensor& mul_(const Scalar& other) const;
  const Tensor& fill_(const Scalar& value) const;
  const Tensor& zero_() const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  Tensor masked_select(const Tensor& mask) const;  // 1-D
  Tensor nonzero() const;  // (count, dim) int64 coordinates
  const Tensor& masked_fill_(const Tensor& mask, const Scalar& value) const;

  Tensor sum() const;
  Tensor sum(IntArrayRef dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntArrayRef dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // (values, indices)
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor prod(IntArrayRef dims = {}, bool keepdim = false) const;  // dims {}: every element
  Tensor amax(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor amin(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor var(IntArrayRef dims = {}, double correction = 1.0, bool keepdim = false) const;
  Tensor std(IntArrayRef dims = {}, double correction = 1.0, bool keepdim = false) const;
  Tensor norm(double p = 2.0, IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor logsumexp(IntArrayRef dims, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  std::pair<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;  // (values, indices)
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true) const;  // (values, indices)
  // Order statistics and NaN-skipping reductions (kiln/autograd/functions.h says what each gives).
  std::pair<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false) const;
  Tensor median() const;
  std::pair<Tensor, Tensor> median(int64_t dim, bool keepdim = false) const;  // (values, indices)
  Tensor nanmedian() const;
  std::pair<Tensor, Tensor> nanmedian(int64_t dim, bool keepdim = false) const;
  Tensor quantile(double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                  std::string_view interpolation = "linear") const;
  Tensor nanquantile(double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                     std::string_view interpolation = "linear") const;
  Tensor nansum(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor nanmean(IntArrayRef dims = {}, bool keepdim = false) const;
  // LibTorch's matrix methods over kiln::linalg (kiln/autograd/linalg.h): det, inv, pinv (pinverse's relative
  // cutoff rcond, 1e-15 as in torch), matrix_power.
  Tensor det() const;
  Tensor inverse() const;
  Tensor pinverse(double rcond = 1e-15) const;
  Tensor matrix_power(int64_t k) const;
  // Indexed reads and writes (see ops/indexing.h); the underscored ones write in place.
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1) const;
  const Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src) const;
  const Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) const;
  const Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1) const;
  // Shape and layout, as PyTorch's methods of the same names.
  Tensor view_as(const Tensor& other) const { return view(other.sizes()); }
  Tensor reshape_as(const Tensor& other) const { return reshape(other.sizes()); }
  Tensor type_as(const Tensor& other) const { return to(other.device(), other.dtype()); }  // dtype and device
  Tensor repeat(IntArrayRef repeats) const;
  Tensor roll(IntArrayRef shifts, IntArrayRef dims = {}) const;
  Tensor flip(IntArrayRef dims) const;
  Tensor tril(int64_t k = 0) const;
  Tensor triu(int64_t k = 0) const;
  // NOTE: split({2}) is split(2), pieces of 2, as in LibTorch; one piece list of a single size is
  // split(std::vector<int64_t>{2}).
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(IntArrayRef sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  bool equal(const Tensor& other) const;  // the same shape and equal elements

  // ---- autograd (defined by the autograd layer; see kiln/autograd/autograd.h) ----
  bool requires_grad() const;
  // Makes this leaf record operations for backward (or stop); an error on a non-leaf or a non-float tensor.
  const Tensor& requires_grad_(bool requires_grad = true) const;
  // The gradient accumulated by backward (an undefined Tensor before the first one); for leaves, and for
  // non-leaves after retain_grad().
  const Tensor& grad() const;
  // Replaces the gradient (an undefined Tensor clears it), as optimizers and zero_grad(set_to_none) do.
  void set_grad(const Tensor& grad) const;
  // The node that computed this tensor, or null for leaves and tensors that do not require grad.
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  // Gradients of this tensor with respect to the leaves that require grad, accumulated into their .grad().
  // `gradient` may be omitted only for a one-element tensor (it is then 1).
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  // Shares the data, but has no history and does not require grad.
  Tensor detach() const;
  const Tensor& detach_() const;
  // Keeps this non-leaf's gradient in grad() after backward.
  const Tensor& retain_grad() const;
  bool retains_grad() const;
  // Calls `hook` with this tensor's gradient each time backward computes it; a defined Tensor returned
  // replaces the gradient. Returns a handle for remove_hook.
  unsigned register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(unsigned handle) const;
  // Calls `hook` on a leaf after backward has accumulated into its grad() (DDP all-reduces buckets from here).
  unsigned register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;

  // PyTorch-style printing: tensor([[1.0000, 2.5000]], dtype=float64)
  std::string str() const;

 private:
  const TensorImpl& checked() const {
    KILN_CHECK(impl_ != nullptr, "tensor is undefined (default-constructed)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

struct TensorIndex {
  std::variant<int64_t, Slice, NoneIndex, EllipsisIndex, Tensor> value;
  TensorIndex(int64_t i) : value(i) {}
  TensorIndex(int i) : value(int64_t{i}) {}
  TensorIndex(Slice s) : value(s) {}
  TensorIndex(NoneIndex) : value(NoneIndex{}) {}
  TensorIndex(EllipsisIndex) : value(EllipsisIndex{}) {}
  TensorIndex(Tensor t) : value(std::move(t)) {}
};

// Operators. Comparisons return bool tensors (a == b compares element-wise, as in PyTorch).
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Scalar& b);
Tensor& operator-=(Tensor& a, const Scalar& b);
Tensor& operator*=(Tensor& a, const Scalar& b);
Tensor& operator/=(Tensor& a, const Scalar& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);

}  // namespace kiln
