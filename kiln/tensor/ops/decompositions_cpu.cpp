// The CPU's matrix factorizations: each matrix of a batch by one of Eigen's dense solvers (LLT, PartialPivLU,
// SelfAdjointEigenSolver, HouseholderQR, BDCSVD), the matrices of a batch spread over the threads.
//
// The frontends (decompositions.cpp) hand every kernel contiguous (B, m, n) float32/float64 batches and fresh
// contiguous outputs. Each matrix is copied into a column-major Eigen matrix, factored there and copied out: the
// copies are O(n^2) beside the O(n^3) factorization, and they let every solver run on the layout it is written
// for. What a matrix's factorization could not do goes into info (B, int64), one entry per matrix, for the
// frontend to report: a kernel throws nothing from inside the threads.
#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

namespace kiln {

namespace {

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // column-major: the solvers' own layout
template <typename T>
using RowMajorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Matrix b of the contiguous (B, rows, cols) tensor t, as a row-major Eigen map over t's memory.
template <typename T>
RowMajorMap<T> matrix_at(const Tensor& t, int64_t b, int64_t rows, int64_t cols) {
  return RowMajorMap<T>(static_cast<T*>(t.raw_data_ptr()) + b * rows * cols, rows, cols);
}

// Runs f(b) for each matrix b < batch, over the threads when the batch holds enough work (n^3 flops a matrix).
template <typename F>
void for_each_matrix(int64_t batch, int64_t n, F&& f) {
  const int64_t flops = std::max<int64_t>(1, n * n * n);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / flops);
  parallel_for(0, batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) f(b);
  });
}

template <typename T>
bool all_finite(const Matrix<T>& m) {
  return m.allFinite();
}

template <typename F>
void on_float_types(const Tensor& a, const char* op, F&& f) {
  switch (a.dtype()) {
    case DType::Float32: f(float{}); break;
    case DType::Float64: f(double{}); break;
    default: detail::throw_error(detail::concat(op, ": the CPU kernel takes float32 or float64, got ", dtype_name(a.dtype())));
  }
}

// The order k (1-based) of the first leading minor of the symmetric matrix a (its lower triangle) that is not
// positive definite, by the plain Cholesky recurrence: the diagnosis once Eigen's LLT (which says only that it
// failed, and lets a NaN pivot through) has failed. 0 if there is none.
template <typename T>
int64_t first_bad_minor(const Matrix<T>& a) {
  const int64_t n = a.rows();
  Matrix<T> l = Matrix<T>::Zero(n, n);
  for (int64_t j = 0; j < n; ++j) {
    T d = a(j, j);
    for (int64_t k = 0; k < j; ++k) d -= l(j, k) * l(j, k);
    if (!(d > T(0)) || !std::isfinite(d)) return j + 1;
    l(j, j) = std::sqrt(d);
    for (int64_t i = j + 1; i < n; ++i) {
      T s = a(i, j);
      for (int64_t k = 0; k < j; ++k) s -= l(i, k) * l(j, k);
      l(i, j) = s / l(j, j);
    }
  }
  return 0;
}

void cholesky_cpu(const Tensor& l, const Tensor& info, const Tensor& a) {
  const int64_t n = a.size(2), batch = a.size(0);
  auto* bad = static_cast<int64_t*>(info.raw_data_ptr());
  on_float_types(a, "cholesky", [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(batch, n, [&](int64_t b) {
      const Matrix<T> m = matrix_at<T>(a, b, n, n);
      Eigen::LLT<Matrix<T>, Eigen::Lower> llt(m);
      Matrix<T> factor = llt.matrixL();
      const bool ok = llt.info() == Eigen::Success && factor.diagonal().allFinite() &&
                      (factor.diagonal().array() > T(0)).all();
      // A failure the plain recurrence does not see was rounding near the boundary: -1, "broke down".
      const int64_t minor = ok ? 0 : first_bad_minor(m);
      bad[b] = ok ? 0 : minor > 0 ? minor : -1;
      matrix_at<T>(l, b, n, n) = factor.template triangularView<Eigen::Lower>();
    });
  });
}

// P a = L U with partial pivoting: lu holds L below the diagonal (its unit diagonal implied) and U on and above;
// perm[i] is the row of a that is row i of P a. info: 0, or k when U's k-th diagonal entry is exactly zero.
void lu_factor_cpu(const Tensor& lu, const Tensor& perm, const Tensor& info, const Tensor& a) {
  const int64_t n = a.size(2), batch = a.size(0);
  auto* p = static_cast<int64_t*>(perm.raw_data_ptr());
  auto* bad = static_cast<int64_t*>(info.raw_data_ptr());
  on_float_types(a, "lu_factor", [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(batch, n, [&](int64_t b) {
      Eigen::PartialPivLU<Matrix<T>> f(Matrix<T>(matrix_at<T>(a, b, n, n)));
      const Matrix<T>& packed = f.matrixLU();
      matrix_at<T>(lu, b, n, n) = packed;
      // Eigen's P moves row i of a to row indices(i) of P a; perm is the inverse map.
      const auto& to = f.permutationP().indices();
      for (int64_t i = 0; i < n; ++i) p[b * n + to(i)] = i;
      bad[b] = 0;
      for (int64_t k = 0; k < n; ++k)
        if (packed(k, k) == T(0)) {
          bad[b] = k + 1;
          break;
        }
    });
  });
}

// x = a^-1 b (or a^-T b) from a's lu and perm; b and x (B, n, k).
void lu_solve_cpu(const Tensor& x, const Tensor& lu, const Tensor& perm, const Tensor& b, bool transpose) {
  const int64_t n = lu.size(2), k = b.size(2), batch = lu.size(0);
  const auto* p = static_cast<const int64_t*>(perm.raw_data_ptr());
  on_float_types(lu, "lu_solve", [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(batch, n, [&](int64_t i) {
      const Matrix<T> f = matrix_at<T>(lu, i, n, n);
      const auto rhs = matrix_at<T>(b, i, n, k);
      auto out = matrix_at<T>(x, i, n, k);
      const int64_t* row = p + i * n;
      Matrix<T> y(n, k);
      if (!transpose) {
        // a = P^T L U: L U x = P b, (P b)[r] = b[perm[r]].
        for (int64_t r = 0; r < n; ++r) y.row(r) = rhs.row(row[r]);
        f.template triangularView<Eigen::UnitLower>().solveInPlace(y);
        f.template triangularView<Eigen::Upper>().solveInPlace(y);
        out = y;
      } else {
        // a^T = U^T L^T P: U^T L^T w = b, then x = P^T w, x[perm[r]] = w[r].
        y = rhs;
        f.transpose().template triangularView<Eigen::Lower>().solveInPlace(y);
        f.transpose().template triangularView<Eigen::UnitUpper>().solveInPlace(y);
        for (int64_t r = 0; r < n; ++r) out.row(row[r]) = y.row(r);
      }
    });
  });
}

// x (B, n, k) with a x = b, a triangular: only its upper (lower) triangle is read, and with unit not its
// diagonal either (taken as ones).
void triangular_solve_cpu(const Tensor& x, const Tensor& a, const Tensor& b, bool upper, bool unit) {
  const int64_t n = a.size(2), k = b.size(2), batch = a.size(0);
  on_float_types(a, "solve_triangular", [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(batch, n, [&](int64_t i) {
      const Matrix<T> m = matrix_at<T>(a, i, n, n);
      Matrix<T> y = matrix_at<T>(b, i, n, k);
      if (upper && unit) m.template triangularView<Eigen::UnitUpper>().solveInPlace(y);
      else if (upper) m.template triangularView<Eigen::Upper>().solveInPlace(y);
      else if (unit) m.template triangularView<Eigen::UnitLower>().solveInPlace(y);
      else m.template triangularView<Eigen::Lower>().solveInPlace(y);
      matrix_at<T>(x, i, n, k) = y;
    });
  });
}

// w (B, n) ascending; v (B, n, n) the eigenvectors as columns, or undefined for the values alone. Only a's lower
// triangle is read. info: 0, -1 for a matrix with a NaN or infinite entry, 1 when the iteration did not
// converge.
void eigh_cpu(const Tensor& w, const Tensor& v, const Tensor& info, const Tensor& a) {
  const int64_t n = a.size(2), batch = a.size(0);
  auto* bad = static_cast<int64_t*>(info.raw_data_ptr());
  on_float_types(a, "eigh", [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(batch, n, [&](int64_t b) {
      const Matrix<T> m = Matrix<T>(matrix_at<T>(a, b, n, n)).template triangularView<Eigen::Lower>();
      auto values = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(static_cast<T*>(w.raw_data_ptr()) + b * n, n);
      if (!all_finite<T>(m)) {
        bad[b] = -1;
        values.setConstant(std::numeric_limits<T>::quiet_NaN());
        if (v.defined()) matrix_at<T>(v, b, n, n).setConstant(std::numeric_limits<T>::quiet_NaN());
        return;
      }
      Eigen::SelfAdjointEigenSolver<Matrix<T>> es(m, v.defined() ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
      bad[b] = es.info() == Eigen::Success ? 0 : 1;
      values = es.eigenvalues();
      if (v.defined()) matrix_at<T>(v, b, n, n) = es.eigenvectors();
    });
  });
}

// Householder QR of a (B, m, n): r (B, rows, n) upper trapezoidal, and q (B, m, rows) with orthonormal columns
// (rows = min(m, n) for the reduced form, m for the complete one), or q undefined for r alone. Signs as
// LAPACK's geqrf/orgqr leave them (R's diagonal may be negative).
void qr_cpu(const Tensor& q, const Tensor& r, const Tensor& a) {
  const int64_t m = a.size(1), n = a.size(2), batch = a.size(0), rows = r.size(1);
  on_float_types(a, "qr", [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(batch, std::max(m, n), [&](int64_t b) {
      Eigen::HouseholderQR<Matrix<T>> f(Matrix<T>(matrix_at<T>(a, b, m, n)));
      const Matrix<T>& packed = f.matrixQR();
      auto out_r = matrix_at<T>(r, b, rows, n);
      out_r.setZero();
      for (int64_t i = 0; i < std::min(rows, m); ++i)
        for (int64_t j = i; j < n; ++j) out_r(i, j) = packed(i, j);
      if (q.defined()) {
        Matrix<T> basis = Matrix<T>::Identity(m, rows);
        basis.applyOnTheLeft(f.householderQ());
        matrix_at<T>(q, b, m, rows) = basis;
      }
    });
  });
}

// a (B, m, n) = u diag(s) vh, s (B, k) descending and non-negative, k = min(m, n); u (B, m, m or k) and
// vh (B, n or k, n) as their shapes say (complete or reduced), or both undefined for s alone. info: 0, -1 for a
// matrix with a NaN or infinite entry, 1 when the iteration did not converge.
void svd_cpu(const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& info, const Tensor& a) {
  const int64_t m = a.size(1), n = a.size(2), batch = a.size(0), k = std::min(m, n);
  const bool vectors = u.defined();
  const bool full = vectors && u.size(2) == m && vh.size(1) == n && m != n;
  auto* bad = static_cast<int64_t*>(info.raw_data_ptr());
  on_float_types(a, "svd", [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(batch, std::max(m, n), [&](int64_t b) {
      const Matrix<T> mat = matrix_at<T>(a, b, m, n);
      auto values = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(static_cast<T*>(s.raw_data_ptr()) + b * k, k);
      if (!all_finite<T>(mat)) {
        bad[b] = -1;
        values.setConstant(std::numeric_limits<T>::quiet_NaN());
        if (vectors) {
          matrix_at<T>(u, b, u.size(1), u.size(2)).setConstant(std::numeric_limits<T>::quiet_NaN());
          matrix_at<T>(vh, b, vh.size(1), vh.size(2)).setConstant(std::numeric_limits<T>::quiet_NaN());
        }
        return;
      }
      const unsigned options =
          !vectors ? 0u : full ? Eigen::ComputeFullU | Eigen::ComputeFullV : Eigen::ComputeThinU | Eigen::ComputeThinV;
      Eigen::BDCSVD<Matrix<T>> f(mat, options);
      bad[b] = f.info() == Eigen::Success ? 0 : 1;
      values = f.singularValues();
      if (vectors) {
        matrix_at<T>(u, b, u.size(1), u.size(2)) = f.matrixU();
        matrix_at<T>(vh, b, vh.size(1), vh.size(2)) = f.matrixV().transpose();
      }
    });
  });
}

}  // namespace

namespace detail {
void register_decomposition_cpu_kernels() {
  register_kernel<Op::cholesky>(DeviceType::CPU, cholesky_cpu);
  register_kernel<Op::lu_factor>(DeviceType::CPU, lu_factor_cpu);
  register_kernel<Op::lu_solve>(DeviceType::CPU, lu_solve_cpu);
  register_kernel<Op::triangular_solve>(DeviceType::CPU, triangular_solve_cpu);
  register_kernel<Op::eigh>(DeviceType::CPU, eigh_cpu);
  register_kernel<Op::qr>(DeviceType::CPU, qr_cpu);
  register_kernel<Op::svd>(DeviceType::CPU, svd_cpu);
}
}  // namespace detail

}  // namespace kiln
