// Element types, their C++ counterparts, and PyTorch's type promotion.
//
// KILN_FORALL_DTYPES is the one list of dtypes; everything else (names, sizes, the C++ type of each, the
// dispatch from a runtime DType to a template) is generated from it.
#pragma once

#include <complex>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/tensor/error.h"
#include "kiln/tensor/half.h"

namespace kiln {

// X(enumerator, C++ type, name as PyTorch prints it, category)
#define KILN_FORALL_DTYPES(X)            \
  X(Bool, bool, "bool", Bool)            \
  X(UInt8, uint8_t, "uint8", Integral)   \
  X(Int32, int32_t, "int32", Integral)   \
  X(Int64, int64_t, "int64", Integral)   \
  X(Float16, Half, "float16", Floating)  \
  X(BFloat16, BFloat16, "bfloat16", Floating) \
  X(Float32, float, "float32", Floating) \
  X(Float64, double, "float64", Floating)

enum class DType : uint8_t {
#define KILN_DTYPE_ENUM(e, T, name, cat) e,
  KILN_FORALL_DTYPES(KILN_DTYPE_ENUM)
#undef KILN_DTYPE_ENUM
};
inline constexpr int kNumDTypes = 8;

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kInt = DType::Int32;

enum class DTypeCategory : uint8_t { Bool = 0, Integral = 1, Floating = 2 };

const char* dtype_name(DType t);
size_t dtype_size(DType t);
DTypeCategory dtype_category(DType t);
inline bool is_floating(DType t) { return dtype_category(t) == DTypeCategory::Floating; }
inline bool is_integral(DType t, bool include_bool = false) {
  return dtype_category(t) == DTypeCategory::Integral || (include_bool && t == DType::Bool);
}
std::ostream& operator<<(std::ostream& out, DType t);

// The dtype factories and float ops use when none is given (float32, as in PyTorch).
DType default_dtype();
void set_default_dtype(DType t);  // float32 or float64

// PyTorch's promotion of two dtypes: the higher category wins; within a category the wider type wins; the
// 16-bit floats promote to float32 when mixed (float16 + bfloat16 -> float32). uint8 + int32 -> int32.
DType promote_types(DType a, DType b);

// C++ type <-> DType.
template <typename T>
struct CppToDType;
template <DType D>
struct DTypeToCpp;
#define KILN_DTYPE_MAP(e, T, name, cat)                                     \
  template <>                                                               \
  struct CppToDType<T> {                                                    \
    static constexpr DType value = DType::e;                                \
  };                                                                        \
  template <>                                                               \
  struct DTypeToCpp<DType::e> {                                             \
    using type = T;                                                         \
  };
KILN_FORALL_DTYPES(KILN_DTYPE_MAP)
#undef KILN_DTYPE_MAP

template <typename T>
inline constexpr DType dtype_of = CppToDType<std::remove_cv_t<T>>::value;
template <DType D>
using cpp_type = typename DTypeToCpp<D>::type;

// The type arithmetic happens in: float for the 16-bit floats, the type itself otherwise.
template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

// A computed value into a storage type, as every kernel stores it. Floating values go to uint8 through int64, so
// negatives wrap modulo 256 (-2.0 -> 254) on every device: a plain float -> uint8 cast is undefined for them, and
// x86 and CUDA do differ (x86 wraps, CUDA saturates to 0).
template <typename To, typename From>
KILN_INLINE To convert(From v) {
  if constexpr (std::is_same_v<To, uint8_t> && std::is_floating_point_v<From>)
    return static_cast<uint8_t>(static_cast<int64_t>(v));
  else
    return static_cast<To>(v);
}

// Calls f.template operator()<T>() with T the C++ type of `dtype`, for the dtypes in the chosen set;
// any other dtype is an error that names the op and the dtype.
//   visit_dtype(x.dtype(), "exp", [&]<typename T>() { ... });
enum DTypeSet : uint32_t {
  kBoolSet = 1u << 0,
  kUInt8Set = 1u << 1,
  kInt32Set = 1u << 2,
  kInt64Set = 1u << 3,
  kFloat16Set = 1u << 4,
  kBFloat16Set = 1u << 5,
  kFloat32Set = 1u << 6,
  kFloat64Set = 1u << 7,
  kIntegralSet = kUInt8Set | kInt32Set | kInt64Set,
  kFloatingSet = kFloat16Set | kBFloat16Set | kFloat32Set | kFloat64Set,
  kNumericSet = kIntegralSet | kFloatingSet,
  kAllSet = kNumericSet | kBoolSet,
};

[[noreturn]] void throw_unsupported_dtype(const char* op, DType t);

template <uint32_t Set = kAllSet, typename F>
decltype(auto) visit_dtype(DType t, const char* op, F&& f) {
  switch (t) {
#define KILN_DTYPE_CASE(e, T, name, cat)                         \
  case DType::e:                                                 \
    if constexpr ((Set & (1u << static_cast<int>(DType::e))) != 0) \
      return f.template operator()<T>();                         \
    break;
    KILN_FORALL_DTYPES(KILN_DTYPE_CASE)
#undef KILN_DTYPE_CASE
  }
  throw_unsupported_dtype(op, t);
}

}  // namespace kiln
