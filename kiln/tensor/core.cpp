// Dtype names and promotion, devices, shapes, scalars, storage and the CPU allocator.
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "kiln/tensor/allocator.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/dtype.h"
#include "kiln/tensor/scalar.h"
#include "kiln/tensor/shape.h"
#include "kiln/tensor/storage.h"

namespace kiln {

#ifdef KILN_WITH_CUDA
namespace cuda {
Allocator* cuda_allocator();  // cuda/cuda_runtime.cu
}
#endif

// ---- dtype ----

const char* dtype_name(DType t) {
  switch (t) {
#define KILN_DTYPE_NAME(e, T, name, cat) \
  case DType::e:                         \
    return name;
    KILN_FORALL_DTYPES(KILN_DTYPE_NAME)
#undef KILN_DTYPE_NAME
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
#define KILN_DTYPE_SIZE(e, T, name, cat) \
  case DType::e:                         \
    return sizeof(T);
    KILN_FORALL_DTYPES(KILN_DTYPE_SIZE)
#undef KILN_DTYPE_SIZE
  }
  return 0;
}

DTypeCategory dtype_category(DType t) {
  switch (t) {
#define KILN_DTYPE_CAT(e, T, name, cat) \
  case DType::e:                        \
    return DTypeCategory::cat;
    KILN_FORALL_DTYPES(KILN_DTYPE_CAT)
#undef KILN_DTYPE_CAT
  }
  return DTypeCategory::Bool;
}

std::ostream& operator<<(std::ostream& out, DType t) { return out << dtype_name(t); }

void throw_unsupported_dtype(const char* op, DType t) {
  detail::throw_error(detail::concat(op, ": dtype ", t, " is not supported"));
}

namespace {
std::atomic<DType> g_default_dtype{DType::Float32};
}

DType default_dtype() { return g_default_dtype.load(std::memory_order_relaxed); }

void set_default_dtype(DType t) {
  KILN_CHECK(t == kFloat32 || t == kFloat64, "set_default_dtype: expected float32 or float64, got ", t);
  g_default_dtype.store(t, std::memory_order_relaxed);
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto ca = dtype_category(a), cb = dtype_category(b);
  if (ca != cb) return ca > cb ? a : b;
  // Same category, different types.
  if (ca == DTypeCategory::Floating) {
    if (a == kFloat64 || b == kFloat64) return kFloat64;
    return kFloat32;  // float32 with a 16-bit float, or float16 with bfloat16
  }
  // Integral: the wider wins (uint8 with a signed type gives the signed type: int32 and int64 hold all of uint8).
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

// ---- device ----

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = Device::cpu();
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    if (spec.size() == 4) {
      *this = Device::cuda(0);
      return;
    }
    if (spec[4] == ':' && spec.size() > 5 && spec.size() <= 7) {
      int idx = 0;
      bool ok = true;
      for (size_t i = 5; i < spec.size(); ++i) {
        ok &= spec[i] >= '0' && spec[i] <= '9';
        idx = idx * 10 + (spec[i] - '0');
      }
      if (ok && idx < 64) {
        *this = Device::cuda(idx);
        return;
      }
    }
  }
  detail::throw_error(detail::concat("Device: cannot parse \"", spec, "\": expected \"cpu\", \"cuda\" or \"cuda:N\""));
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
std::ostream& operator<<(std::ostream& out, Device d) { return out << d.str(); }

// ---- shape ----

std::string shape_str(IntArrayRef shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

int64_t shape_numel(IntArrayRef shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    KILN_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape_str(shape), " has more elements than int64 can count");
  }
  return n;
}

Shape contiguous_strides(IntArrayRef shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1, as in PyTorch
  KILN_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
             " dims (expected ", -n, " <= dim < ", n, ")");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast: dim ", i, " is ", da, " vs ", db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- scalar ----

DType Scalar::dtype() const {
  switch (kind_) {
    case DTypeCategory::Bool:
      return kBool;
    case DTypeCategory::Integral:
      return kInt64;
    default:
      return default_dtype();
  }
}

std::ostream& operator<<(std::ostream& out, const Scalar& s) {
  if (s.is_floating()) return out << s.to_double();
  if (s.is_bool()) return out << (s.to_bool() ? "true" : "false");
  return out << s.to_int();
}

// ---- allocators and storage ----

namespace {

std::array<Allocator*, kNumDeviceTypes>& allocator_table() {
#ifdef KILN_WITH_CUDA
  static std::array<Allocator*, kNumDeviceTypes> table{cpu_allocator(), cuda::cuda_allocator()};
#else
  static std::array<Allocator*, kNumDeviceTypes> table{cpu_allocator(), nullptr};
#endif
  return table;
}

}  // namespace

Allocator* get_allocator(DeviceType type) {
  Allocator* a = allocator_table()[static_cast<int>(type)];
  KILN_CHECK(a != nullptr, "cannot allocate memory on ", Device(type).str(),
             ": kiln was built without CUDA (configure with the CUDA toolkit and KILN_CUDA=ON)");
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) { allocator_table()[static_cast<int>(type)] = allocator; }

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = get_allocator(device.type);
  data_ = allocator_->allocate(nbytes, device);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (allocator_ != nullptr) allocator_->deallocate(data_, nbytes_, device_);
  else if (deleter_) deleter_(data_);
}

}  // namespace kiln
