// Matrices and comparisons the linalg tests share (decompositions_test.cpp, linalg_backends_test.cpp): seeded
// well-conditioned, symmetric and symmetric positive-definite inputs, from grad_test_util.h's leaf().
#pragma once

#include "grad_test_util.h"

namespace kiln::test::linalg_test {

// The largest |a - b| over all elements, in float64.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return ops::amax(ops::abs(ops::sub(a.detach().to(kFloat64), b.detach().to(kFloat64)))).item<double>();
}

// The identity in a's shape and dtype (a batch of them for a batch).
inline Tensor eye_like(const Tensor& a) {
  return eye(a.size(-1), a.size(-1), TensorOptions(a.dtype())).expand(a.sizes()).contiguous();
}

// A seeded float64 (..., n, n) matrix that is well conditioned: uniform in [-1, 1) plus shift on the diagonal.
inline Tensor well_conditioned(IntArrayRef shape, double shift = 3.0) {
  Tensor x = leaf(shape, -1.0, 1.0).detach();
  return (x + shift * eye_like(x)).detach();
}

// Symmetric positive definite: x x^T + n I.
inline Tensor spd(IntArrayRef shape) {
  Tensor x = leaf(shape, -1.0, 1.0).detach();
  return (matmul(x, x.mT()) + static_cast<double>(x.size(-1)) * eye_like(x)).detach();
}

inline Tensor sym(const Tensor& x) { return 0.5 * (x + x.mT()); }

}  // namespace kiln::test::linalg_test
