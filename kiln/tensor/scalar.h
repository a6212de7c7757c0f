// Scalar: a number given to an op (add(x, 2), clamp(x, 0.0, 1.0)) that remembers whether it was a bool, an
// integer or a floating point value, because type promotion depends on it: int tensor + 2 stays int,
// int tensor + 2.5 becomes float.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/tensor/dtype.h"

namespace kiln {

class Scalar {
 public:
  Scalar() : Scalar(int64_t{0}) {}
  Scalar(bool v) : kind_(DTypeCategory::Bool), i_(v) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(DTypeCategory::Integral), i_(static_cast<int64_t>(v)) {}
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(DTypeCategory::Floating), d_(static_cast<double>(v)) {}
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}

  DTypeCategory category() const { return kind_; }
  bool is_floating() const { return kind_ == DTypeCategory::Floating; }
  bool is_integral() const { return kind_ == DTypeCategory::Integral; }
  bool is_bool() const { return kind_ == DTypeCategory::Bool; }
  // The dtype a tensor made from this scalar alone gets: bool, int64, or the default float dtype.
  DType dtype() const;

  double to_double() const { return is_floating() ? d_ : static_cast<double>(i_); }
  int64_t to_int() const { return is_floating() ? static_cast<int64_t>(d_) : i_; }
  bool to_bool() const { return is_floating() ? d_ != 0.0 : i_ != 0; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(to_int());
    else return static_cast<T>(static_cast<opmath_t<T>>(to_double()));
  }

 private:
  DTypeCategory kind_;
  union {
    int64_t i_;
    double d_;
  };
};

std::ostream& operator<<(std::ostream& out, const Scalar& s);

}  // namespace kiln
