// Tensor's math member functions and the operators: each forwards to the free function in ops/*.h.
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops.h"

namespace kiln {

Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::sign() const { return kiln::sign(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::sin() const { return kiln::sin(*this); }
Tensor Tensor::cos() const { return kiln::cos(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::pow(const Scalar& e) const { return kiln::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return kiln::pow(*this, e); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return kiln::clamp(*this, lo, hi); }
Tensor Tensor::add(const Tensor& o, const Scalar& alpha) const { return kiln::add(*this, o, alpha); }
Tensor Tensor::sub(const Tensor& o, const Scalar& alpha) const { return kiln::sub(*this, o, alpha); }
Tensor Tensor::mul(const Tensor& o) const { return kiln::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return kiln::div(*this, o); }
// The free in-place functions take Tensor&; the handle is shared, so a copy of it writes the same data.
const Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) const { Tensor t = *this; kiln::add_(t, o, alpha); return *this; }
const Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) const { Tensor t = *this; kiln::sub_(t, o, alpha); return *this; }
const Tensor& Tensor::mul_(const Tensor& o) const { Tensor t = *this; kiln::mul_(t, o); return *this; }
const Tensor& Tensor::div_(const Tensor& o) const { Tensor t = *this; kiln::div_(t, o); return *this; }
const Tensor& Tensor::add_(const Scalar& o) const { Tensor t = *this; kiln::add_(t, o); return *this; }
const Tensor& Tensor::mul_(const Scalar& o) const { Tensor t = *this; kiln::mul_(t, o); return *this; }
const Tensor& Tensor::fill_(const Scalar& value) const {
  if (numel() > 0) get_kernel<Op::fill>(device())(*this, value);
  bump_version();
  return *this;
}
const Tensor& Tensor::zero_() const { return fill_(0); }
Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& v) const { return kiln::masked_fill(*this, mask, v); }
const Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& v) const { Tensor t = *this; kiln::masked_fill_(t, mask, v); return *this; }

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(IntArrayRef dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(IntArrayRef dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool keepdim) const { return kiln::argmax(*this, d, keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> d, bool keepdim) const { return kiln::argmin(*this, d, keepdim); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return kiln::mm(*this, o); }

Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(scalar_to_tensor(a), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(scalar_to_tensor(a), b); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }
Tensor& operator+=(Tensor& a, const Scalar& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Scalar& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Scalar& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Scalar& b) { return div_(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }

}  // namespace kiln
