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
// vector's sign is arbitrary (a loss must not depend on it). With full_matrices, U's columns and Vh's rows past
// k are any basis of what the first k leave out: gradients reaching them are ignored, as in PyTorch.
struct SvdResult {
  Tensor U, S, Vh;
};
SvdResult svd(const Tensor& a, bool full_matrices = true);
Tensor svdvals(const Tensor& a);

// ---- built on the factorizations ----

// The Moore-Penrose pseudo-inverse (..., n, m) of a (..., m, n), from its SVD: singular values at or below
// max(atol, rtol * the largest) count as zero. rtol < 0 means PyTorch's default: max(m, n) * the dtype's epsilon
// when atol is 0, else 0. Its gradient is Golub and Pereyra's, right wherever small changes of a keep its rank
// (so everywhere for a matrix of full rank, and on a rank-deficient one along perturbations of that rank).
Tensor pinv(const Tensor& a, double atol = 0.0, double rtol = -1.0);

// The least-squares solution of a x = b for a (..., m, n), b (..., m, k) (batch dims broadcast): the x that
// minimizes ||a x - b||, the smallest such when a is rank-deficient, as pinv(a, 0, rcond) b; singular values at
// or below rcond times the largest count as zero (rcond < 0: pinv's default). rank (int64) and the singular
// values come from the same SVD. (PyTorch's lstsq also returns residuals; here they are ||a x - b||^2 away.)
struct LstsqResult {
  Tensor solution, rank, singular_values;
};
LstsqResult lstsq(const Tensor& a, const Tensor& b, double rcond = -1.0);

// x with a x = b for a = l l^T given its Cholesky factor l (upper: a = u^T u given u): two triangular solves.
// PyTorch's cholesky_solve(b, l), argument order included.
Tensor cholesky_solve(const Tensor& b, const Tensor& l, bool upper = false);

// a^k for square a (..., n, n) and any integer k: ceil(log2 |k|) squarings and the products of the bits that are
// set; k = 0 gives the identity, k < 0 the power of inv(a).
Tensor matrix_power(const Tensor& a, int64_t k);

// The norm of each matrix of a (..., m, n): "fro" (the root of the sum of squares) or "nuc" (the sum of the
// singular values); or, as a number, 2 / -2 (the largest / smallest singular value), 1 / -1 (the largest /
// smallest column sum of |a|), inf / -inf (the same over rows). keepdim keeps the two dims, with size 1.
Tensor matrix_norm(const Tensor& a, std::string_view ord = "fro", bool keepdim = false);
Tensor matrix_norm(const Tensor& a, double ord, bool keepdim = false);
// The ord-norm of x's elements over dims (all of them when empty), as torch.linalg.vector_norm: ord 2 by
// default, inf the largest |x|, -inf the smallest, 0 the number of non-zeros.
Tensor vector_norm(const Tensor& x, double ord = 2.0, IntArrayRef dims = {}, bool keepdim = false);

// The 2-norm condition number of each matrix: its largest singular value over its smallest (inf when singular).
Tensor cond(const Tensor& a);

// How many singular values exceed max(atol, rtol * the largest), as int64 (no gradient); rtol as pinv's.
Tensor matrix_rank(const Tensor& a, double atol = 0.0, double rtol = -1.0);

}  // namespace kiln::linalg
