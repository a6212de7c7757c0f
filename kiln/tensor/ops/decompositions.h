// Matrix factorizations and what is built on them, without autograd: the ops under kiln::linalg
// (kiln/autograd/linalg.h), which is what users call.
//
//   Tensor l = ops::cholesky(a);                 // a = l l^T
//   Tensor x = ops::solve(a, b);                 // a x = b, b (..., n, k)
//   auto [w, v] = ops::eigh(a);                  // a = v diag(w) v^T
//
// Every function takes one matrix or a batch of them, (..., m, n), float32 or float64, and gives results on a's
// device. A device with no kernel for a factorization (CUDA so far: kiln has no cuSOLVER kernels yet) has it
// done by the CPU's kernel: the batch goes to the host and the results come back, which is correct but costs two
// copies and the CPU's speed. Bad input is an error that names the matrix: "cholesky: matrix (1, 0) of the
// (2, 3, 4, 4) input is not positive-definite: its leading minor of order 3 is not".
#pragma once

#include <utility>

#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// The lower-triangular l with a = l l^T, for symmetric positive-definite a (..., n, n); only a's lower
// triangle is read. Not positive-definite (or not finite): an error.
Tensor cholesky(const Tensor& a);

// P a = L U with partial pivoting, for square a (..., n, n): lu holds L below the diagonal (its diagonal of
// ones implied) and U on and above; perm (..., n, int64): row i of P a is row perm[i] of a. (PyTorch's
// lu_factor gives LAPACK's 1-based row swaps instead; a permutation reads more plainly.) A singular a factors
// too, with a zero on U's diagonal.
struct LuFactors {
  Tensor lu, perm;
};
LuFactors lu_factor(const Tensor& a);
// x = a^-1 b (transpose: a^-T b) from lu_factor(a); b (..., n, k), batch dims broadcast. perm must hold a
// permutation of 0..n-1 in each row (checked: the kernel indexes with it).
Tensor lu_solve(const LuFactors& factors, const Tensor& b, bool transpose = false);

// x = a^-1 b for square a (..., n, n) and b (..., n, k), batch dims broadcast; a singular a is an error, which
// names op (inv is a solve too). The same as lu_solve(lu_factor_invertible(a, op), b).
Tensor solve(const Tensor& a, const Tensor& b, const char* op = "solve");
// lu_factor(a), with a singular a (a zero on U's diagonal) an error that names op and the matrix: the factors
// solve keeps for its backward (a^-T g is lu_solve with transpose).
LuFactors lu_factor_invertible(const Tensor& a, const char* op);
// x with a x = b for triangular a (..., n, n), b (..., n, k); the other triangle of a is not read, nor its
// diagonal when unitriangular. A zero on the diagonal gives infinities, as LAPACK's trsm does.
Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool unitriangular = false);

// The determinant of square a (..., n, n), as the product of U's diagonal and the permutation's sign.
Tensor det(const Tensor& a);
// (sign, log|det|): sign is -1, 0 or 1; a singular a gives (0, -inf).
std::pair<Tensor, Tensor> slogdet(const Tensor& a);
// The same from a's LU factors (lu_factor(a)), which the gradient reuses.
Tensor det(const LuFactors& factors);
std::pair<Tensor, Tensor> slogdet(const LuFactors& factors);

// (eigenvalues (..., n) ascending, eigenvectors (..., n, n) as orthonormal columns) of symmetric a; only its
// lower triangle is read. Each eigenvector's sign is whatever the solver gave.
std::pair<Tensor, Tensor> eigh(const Tensor& a);
Tensor eigvalsh(const Tensor& a);

// (q, r) with a = q r for a (..., m, n): reduced, q (..., m, k) and r (..., k, n) with k = min(m, n); complete,
// q (..., m, m) and r (..., m, n). r's diagonal may be negative, as LAPACK leaves it. Without with_q, q is not
// formed (undefined).
std::pair<Tensor, Tensor> qr(const Tensor& a, bool complete = false, bool with_q = true);

// a = u diag(s) vh for a (..., m, n), s (..., k) descending, k = min(m, n); u (..., m, k) and vh (..., k, n), or
// with full_matrices u (..., m, m) and vh (..., n, n). Singular vectors' signs are whatever the solver gave.
struct SvdFactors {
  Tensor u, s, vh;
};
SvdFactors svd(const Tensor& a, bool full_matrices = false);
Tensor svdvals(const Tensor& a);

}  // namespace kiln::ops
