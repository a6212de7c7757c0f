// Element-wise reductions for the tcp backend: see reduce_kernels.h.
#include "kiln/distributed/tcp/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// One element in the opmath type M. Integers wrap through their unsigned type: signed overflow is undefined.
template <typename M>
M combine_one(M a, M b, ReduceOp op) {
  if constexpr (std::is_same_v<M, bool>) {
    return (op == ReduceOp::Sum || op == ReduceOp::Max || op == ReduceOp::Avg) ? (a || b) : (a && b);
  } else if constexpr (std::is_integral_v<M>) {
    using U = std::make_unsigned_t<M>;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return static_cast<M>(static_cast<U>(a) + static_cast<U>(b));
      // NOTE: unsigned short/char promote to int, so multiply in a type at least as wide as unsigned int.
      case ReduceOp::Product:
        return static_cast<M>(static_cast<std::common_type_t<U, unsigned>>(a) *
                              static_cast<std::common_type_t<U, unsigned>>(b));
      case ReduceOp::Min: return b < a ? b : a;
      case ReduceOp::Max: return a < b ? b : a;
    }
    return a;
  } else {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return a + b;
      case ReduceOp::Product: return a * b;
      case ReduceOp::Min: return is_nan(a) ? a : is_nan(b) ? b : (b < a ? b : a);
      case ReduceOp::Max: return is_nan(a) ? a : is_nan(b) ? b : (a < b ? b : a);
    }
    return a;
  }
}

// The op is a template parameter so the compiler vectorizes each loop; bool/uint8 via the generic path.
template <typename T, ReduceOp Op>
void combine_loop(T* out, const T* a, const T* b, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t i = 0; i < n; ++i) out[i] = T(combine_one<M>(M(a[i]), M(b[i]), Op));
}

template <typename T>
void combine_typed(void* out, const void* a, const void* b, int64_t n, ReduceOp op) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return combine_loop<T, ReduceOp::Sum>(o, x, y, n);
    case ReduceOp::Product: return combine_loop<T, ReduceOp::Product>(o, x, y, n);
    case ReduceOp::Min: return combine_loop<T, ReduceOp::Min>(o, x, y, n);
    case ReduceOp::Max: return combine_loop<T, ReduceOp::Max>(o, x, y, n);
  }
}

}  // namespace

void combine(void* out, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op) {
  visit_dtype(dtype, "tcp combine", [&]<typename T>() { combine_typed<T>(out, a, b, n, op); });
}

void combine_reference(void* out, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op) {
  const size_t size = dtype_size(dtype);
  auto* o = static_cast<uint8_t*>(out);
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (int64_t i = 0; i < n; ++i) {
    const size_t at = static_cast<size_t>(i) * size;
    switch (dtype) {
      case DType::Float64:
      case DType::Float32: {
        double u = 0, v = 0;
        if (dtype == DType::Float64) std::memcpy(&u, x + at, 8), std::memcpy(&v, y + at, 8);
        else {
          float fu, fv;
          std::memcpy(&fu, x + at, 4), std::memcpy(&fv, y + at, 4);
          u = fu, v = fv;
        }
        // NOTE: one op in double then one rounding to float equals the float op (53 >= 2 * 24 + 2 bits).
        double r = combine_one<double>(u, v, op);
        if (dtype == DType::Float64) std::memcpy(o + at, &r, 8);
        else {
          const float f = static_cast<float>(r);
          std::memcpy(o + at, &f, 4);
        }
        break;
      }
      case DType::Float16:
      case DType::BFloat16: {
        uint16_t u, v;
        std::memcpy(&u, x + at, 2), std::memcpy(&v, y + at, 2);
        const bool half = dtype == DType::Float16;
        const float fu = half ? detail::half_bits_to_float_portable(u) : detail::bfloat16_bits_to_float(u);
        const float fv = half ? detail::half_bits_to_float_portable(v) : detail::bfloat16_bits_to_float(v);
        const float r = combine_one<float>(fu, fv, op);
        const uint16_t bits = half ? detail::float_to_half_bits_portable(r) : detail::float_to_bfloat16_bits(r);
        std::memcpy(o + at, &bits, 2);
        break;
      }
      case DType::Bool: {
        const bool r = combine_one<bool>(x[at] != 0, y[at] != 0, op);
        o[at] = r ? 1 : 0;
        break;
      }
      case DType::UInt8:
      case DType::Int32:
      case DType::Int64: {
        // Sign- or zero-extend to int64, wrap in uint64, keep the low bytes: arithmetic modulo 2^bits.
        int64_t u = 0, v = 0;
        if (dtype == DType::UInt8) u = x[at], v = y[at];
        else if (dtype == DType::Int32) {
          int32_t a32, b32;
          std::memcpy(&a32, x + at, 4), std::memcpy(&b32, y + at, 4);
          u = a32, v = b32;
        } else {
          std::memcpy(&u, x + at, 8), std::memcpy(&v, y + at, 8);
        }
        uint64_t r = 0;
        if (op == ReduceOp::Sum || op == ReduceOp::Avg) r = static_cast<uint64_t>(u) + static_cast<uint64_t>(v);
        else if (op == ReduceOp::Product) r = static_cast<uint64_t>(u) * static_cast<uint64_t>(v);
        else if (op == ReduceOp::Min) r = static_cast<uint64_t>(std::min(u, v));
        else r = static_cast<uint64_t>(std::max(u, v));
        std::memcpy(o + at, &r, size);  // little-endian: the low `size` bytes
        break;
      }
    }
  }
}

void divide_by(void* data, int64_t n, DType dtype, int64_t divisor) {
  visit_dtype<kFloatingSet>(dtype, "avg", [&]<typename T>() {
    using M = opmath_t<T>;
    auto* p = static_cast<T*>(data);
    const M d = static_cast<M>(divisor);
    for (int64_t i = 0; i < n; ++i) p[i] = T(M(p[i]) / d);
  });
}

void check_reduce_op(ReduceOp op, DType dtype, const char* what) {
  KILN_CHECK(op != ReduceOp::Avg || is_floating(dtype), what, ": avg needs a floating dtype, not ",
             dtype_name(dtype), " (use sum and divide)");
}

}  // namespace kiln::distributed::tcp
