// kiln::linalg: matrix factorizations and solvers, differentiable, as torch.linalg.
//
//   Tensor l = linalg::cholesky(cov);                          // cov = l l^T
//   Tensor x = linalg::solve(a, b);                            // a x = b
//   auto [w, v] = linalg::eigh(h);                             // h = v diag(w) v^T
//   auto [u, s, vh] = linalg::svd(x, /*full_matrices=*/false);  // x = u diag(s) vh
//
// Each takes a matrix or a batch of them, (..., m, n), float32 or float64 (under autocast, float32), on any
// device: CUDA tensors are factored by the CPU's kernels for now (kiln/tensor/ops/decompositions.h), correct
// but with two copies. Bad input is an error that names the matrix of the batch ("cholesky: matrix (1) of the
// (2, 3, 3) input is not positive-definite: its leading minor of order 2 is not").
//
// Gradients are the standard real-matrix rules (the ones torch.linalg uses), written with differentiable ops,
// so they differentiate again under create_graph. Where a rule is undefined the gradient is not finite, as in
// PyTorch: eigh with repeated eigenvalues, svd with repeated singular values (or a zero one when U or Vh is
// used), solve and inv of a singular matrix (an error). The gradient of a function of symmetric input (cholesky,
// eigh) is symmetric: it is the derivative along symmetric perturbations, which are all such input has.
#pragma once

#include <string_view>

#include "kiln/tensor/tensor.h"

namespace kiln::linalg {

// The lower-triangular l with a = l l^T (upper: the upper u = l^T, a = u^T u), for symmetric positive-definite
// a (..., n, n); only a's lower triangle is read.
Tensor cholesky(const Tensor& a, bool upper = false);

// x with a x = b (left = false: x a = b), for square a (..., n, n) and b (..., n, k), or b a vector (n) or a
// batch of them (..., n) (when its shape is a's without the last dim); batch dims broadcast. A singular a is an
// error.
Tensor solve(const Tensor& a, const Tensor& b, bool left = true);

// x with a x = b (left = false: x a = b) for triangular a (..., n, n) and b (..., n, k) ((..., k, n) when not
// left); only a's upper (lower) triangle is read, and with unitriangular not its diagonal either (ones). Its
// gradient with respect to a lies in that triangle.
Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool left = true, bool unitriangular = false);

// The inverse of square a (..., n, n): solve(a, I). A singular a is an error.
Tensor inv(const Tensor& a);

// The determinant of square a (..., n, n). Its gradient det(a) a^-T is computed from an SVD where a is singular
// (there it is the cofactor matrix, finite), but is not differentiable a second time there.
Tensor det(const Tensor& a);

// sign (-1, 0 or 1; no gradient) and log|det(a)| of square a (..., n, n); a singular a gives (0, -inf).
struct SlogdetResult {
  Tensor sign, logabsdet;
};
SlogdetResult slogdet(const Tensor& a);

// Eigenvalues (..., n), ascending, and orthonormal eigenvectors (..., n, n) as columns, of symmetric a; only its
// lower triangle is read. An eigenvector's sign is arbitrary: a loss that depends on it has no gradient.
struct EighResult {
  Tensor eigenvalues, eigenvectors;
};
EighResult eigh(const Tensor& a);
Tensor eigvalsh(const Tensor& a);

// a = Q R for a (..., m, n). mode "reduced": Q (..., m, k), R (..., k, n), k = min(m, n); "complete": Q (..., m, m),
// R (..., m, n); "r": R alone (Q undefined). R's diagonal may be negative, as LAPACK leaves it. Differentiable
// except for "complete" when m > n (Q's last m - n columns are not determined by a).
struct QrResult {
  Tensor Q, R;
};
QrResult qr(const Tensor& a, std::string_view mode = "reduced");

// a = U diag(S) Vh for a (..., m, n), S (..., k) descending and non-negative, k = min(m, n); U (..., m, k) and
// Vh (..., k, n), or with full_matrices (PyTorch's default, kept) U (..., m, m) and Vh (..., n, n). A singular
// vector's sign is arbitrary (a loss must not depend on it); with full_matrices and m != n, only S has a
// gradient.
struct SvdResult {
  Tensor U, S, Vh;
};
SvdResult svd(const Tensor& a, bool full_matrices = true);
Tensor svdvals(const Tensor& a);

}  // namespace kiln::linalg
