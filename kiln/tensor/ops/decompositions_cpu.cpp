// The CPU's matrix factorizations: each matrix of a batch by one of Eigen's dense solvers (LLT, PartialPivLU,
// SelfAdjointEigenSolver, HouseholderQR, BDCSVD), the matrices of a batch spread over the threads.
//
// In a build with OpenBLAS whose products go there (gemm_cpu.h, cpu_blas_usable_here), large matrices take
// LAPACK's blocked routines inside OpenBLAS instead for the Cholesky and LU factorizations (potrf, getrf) and
// BLAS's trsm for the triangular solves: on one 512 x 512 matrix Eigen's LLT and PartialPivLU took 1.4-2.6x
// LibTorch's time (bench/linalg_bench), and OpenBLAS also threads inside one matrix. Measured on 2 cores
// (float32, one matrix, medians), OpenBLAS / Eigen time:
//
//   order                        96    128   192   256   384
//   getrf / PartialPivLU         0.87  0.37  0.30  0.24  0.31
//   potrf / LLT                  0.87  0.49  0.54  0.36  0.35
//   potrf / LLT, passive waits   0.87  4.5   6.0   2.7   2.4
//   getrf, passive waits         0.87  0.37  0.31  0.92  1.07
//
// so kLapackMinOrder is 128. The last row is with OMP_WAIT_POLICY=passive, where each of the many short parallel
// regions of OpenBLAS's recursive potrf pays a thread wake-up: there Cholesky stays with Eigen below order 512
// (where OpenBLAS is ahead again, 0.65). Small matrices stay with Eigen, whose inlined loops beat a library
// call's overhead. The symmetric eigensolver and the SVD go to syevd and gesdd the same way from order 128 (the
// smaller side, for the SVD), but only when the threads spin: with passive waits LAPACK's took 2.5-6x Eigen's time
// on one 512 x 512 matrix (Eigen's solvers run each matrix on one thread and open no regions), with spinning
// threads 0.57-0.68x. QR stays with Eigen (geqrf would win by 10% with spinning threads, not worth a transposed
// copy each way). The two round differently, and eigenvectors' signs may differ between them. NOTE: a matrix's
// bits can depend on its batch: a lone matrix runs OpenBLAS threaded, a batch's matrices one per worker
// (single-threaded OpenBLAS, which may round differently), and with a pthreads OpenBLAS (never inside workers,
// see gemm_cpu.h) a batch's matrices take Eigen.
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

#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/gemm_cpu.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

#ifdef KILN_WITH_BLAS
#include <cblas.h>

// LAPACK inside OpenBLAS (Fortran calling convention: every argument by pointer, column-major matrices, and a
// hidden length after the arguments for each character argument).
extern "C" {
void spotrf_(const char* uplo, const blasint* n, float* a, const blasint* lda, blasint* info, size_t uplo_len);
void dpotrf_(const char* uplo, const blasint* n, double* a, const blasint* lda, blasint* info, size_t uplo_len);
void sgetrf_(const blasint* m, const blasint* n, float* a, const blasint* lda, blasint* ipiv, blasint* info);
void dgetrf_(const blasint* m, const blasint* n, double* a, const blasint* lda, blasint* ipiv, blasint* info);
void ssyevd_(const char* jobz, const char* uplo, const blasint* n, float* a, const blasint* lda, float* w,
             float* work, const blasint* lwork, blasint* iwork, const blasint* liwork, blasint* info, size_t jobz_len,
             size_t uplo_len);
void dsyevd_(const char* jobz, const char* uplo, const blasint* n, double* a, const blasint* lda, double* w,
             double* work, const blasint* lwork, blasint* iwork, const blasint* liwork, blasint* info,
             size_t jobz_len, size_t uplo_len);
void sgesdd_(const char* jobz, const blasint* m, const blasint* n, float* a, const blasint* lda, float* s, float* u,
             const blasint* ldu, float* vt, const blasint* ldvt, float* work, const blasint* lwork, blasint* iwork,
             blasint* info, size_t jobz_len);
void dgesdd_(const char* jobz, const blasint* m, const blasint* n, double* a, const blasint* lda, double* s,
             double* u, const blasint* ldu, double* vt, const blasint* ldvt, double* work, const blasint* lwork,
             blasint* iwork, blasint* info, size_t jobz_len);
}
#endif

namespace kiln {

namespace {

#ifdef KILN_WITH_BLAS
// From this order up, the factorizations and solves go to OpenBLAS when it is the backend (see the top).
constexpr int64_t kLapackMinOrder = 128;
constexpr int64_t kPassivePotrfMinOrder = 512;

// OMP_WAIT_POLICY, any case, as libgomp reads it. Read at each call (a getenv beside an O(n^3) factorization)
// rather than once, so that the tests can reach both paths in one process; OpenMP itself reads it at startup.
bool passive_waits() {
  const char* v = std::getenv("OMP_WAIT_POLICY");
  return v != nullptr && strcasecmp(v, "passive") == 0;
}

// syevd's and gesdd's workspaces (LAPACK's documented minimums, with vectors) must fit blasint, or the query
// itself wraps: 1 + 6n + 2n^2 reals for syevd, 4k^2 + 7k + max(m, n) for gesdd (k = min(m, n)).
bool syevd_fits(int64_t n) {
  return n < (int64_t{1} << 20) && 1 + 6 * n + 2 * n * n <= std::numeric_limits<blasint>::max();
}
bool gesdd_fits(int64_t m, int64_t n) {
  const int64_t k = std::min(m, n), big = std::max(m, n);
  return big < (int64_t{1} << 30) && k < (int64_t{1} << 20) && m * n <= std::numeric_limits<blasint>::max() &&
         4 * k * k + 7 * k + big <= std::numeric_limits<blasint>::max();
}

bool use_lapack(int64_t n, int64_t min_order = kLapackMinOrder) {
  return n >= min_order && n <= std::numeric_limits<blasint>::max() / n && detail::cpu_blas_usable_here();
}

template <typename T>
blasint potrf(T* a, blasint n) {
  blasint info = 0;
  if constexpr (std::is_same_v<T, float>) spotrf_("U", &n, a, &n, &info, 1);
  else dpotrf_("U", &n, a, &n, &info, 1);
  return info;
}

template <typename T>
blasint getrf(T* a, blasint n, blasint* ipiv) {
  blasint info = 0;
  if constexpr (std::is_same_v<T, float>) sgetrf_(&n, &n, a, &n, ipiv, &info);
  else dgetrf_(&n, &n, a, &n, ipiv, &info);
  return info;
}

// dst (n x n, row-major) = src^T by OpenBLAS's omatcopy: 48 us at n = 512 here, where a plain or tiled loop
// (or Eigen's assignment between layouts) took 140-560 us, the 2 KiB stride hitting the same cache sets.
template <typename T>
void transpose_square(const T* src, T* dst, int64_t n) {
  const auto bn = static_cast<blasint>(n);
  if constexpr (std::is_same_v<T, float>) cblas_somatcopy(CblasRowMajor, CblasTrans, bn, bn, 1.0f, src, bn, dst, bn);
  else cblas_domatcopy(CblasRowMajor, CblasTrans, bn, bn, 1.0, src, bn, dst, bn);
}

// LAPACK's workspace query (lwork = -1) answers the size in work[0]: a float, read back as a count. A float32
// answer may have been rounded down on its way into work[0] (LAPACK before 3.11 rounds to nearest): one ulp up
// first.
template <typename T>
blasint workspace_size(T answer) {
  const double up = static_cast<double>(std::nextafter(answer, std::numeric_limits<T>::infinity()));
  return static_cast<blasint>(std::min<double>(std::ceil(up), std::numeric_limits<blasint>::max()));
}

// Eigenvalues (w, ascending) and, with vectors, eigenvectors in z's columns (column-major) of the symmetric
// column-major z (n, n), read from its upper triangle; returns LAPACK's info.
template <typename T>
blasint syevd(bool vectors, T* z, blasint n, T* w) {
  const char* jobz = vectors ? "V" : "N";
  blasint info = 0, lwork = -1, liwork = -1, iwork_size = 0;
  T work_size = 0;
  const auto call = [&](T* work, blasint* iwork) {
    if constexpr (std::is_same_v<T, float>) ssyevd_(jobz, "U", &n, z, &n, w, work, &lwork, iwork, &liwork, &info, 1, 1);
    else dsyevd_(jobz, "U", &n, z, &n, w, work, &lwork, iwork, &liwork, &info, 1, 1);
  };
  call(&work_size, &iwork_size);
  lwork = workspace_size(work_size);
  liwork = std::max<blasint>(1, iwork_size);
  std::vector<T> work(static_cast<size_t>(lwork));
  std::vector<blasint> iwork(static_cast<size_t>(liwork));
  call(work.data(), iwork.data());
  return info;
}

// The SVD of the column-major (rows, cols) matrix a (overwritten): jobz "N" (values), "S" (reduced) or "A"
// (complete); u (rows, ..., ldu) and vt (..., cols, ldvt) column-major. Returns LAPACK's info.
template <typename T>
blasint gesdd(const char* jobz, blasint rows, blasint cols, T* a, T* s, T* u, blasint ldu, T* vt, blasint ldvt) {
  blasint info = 0, lwork = -1;
  T work_size = 0;
  std::vector<blasint> iwork(static_cast<size_t>(8 * std::min(rows, cols)));
  const auto call = [&](T* work) {
    if constexpr (std::is_same_v<T, float>) {
      sgesdd_(jobz, &rows, &cols, a, &rows, s, u, &ldu, vt, &ldvt, work, &lwork, iwork.data(), &info, 1);
    } else {
      dgesdd_(jobz, &rows, &cols, a, &rows, s, u, &ldu, vt, &ldvt, work, &lwork, iwork.data(), &info, 1);
    }
  };
  call(&work_size);
  lwork = workspace_size(work_size);
  std::vector<T> work(static_cast<size_t>(lwork));
  call(work.data());
  return info;
}

// b (n, k, row-major) <- op(a)^-1 b for the triangle of a (n, n, row-major) that upper/unit name.
template <typename T>
void trsm(const T* a, T* b, int64_t n, int64_t k, bool upper, bool transpose, bool unit) {
  const auto uplo = upper ? CblasUpper : CblasLower;
  const auto trans = transpose ? CblasTrans : CblasNoTrans;
  const auto diag = unit ? CblasUnit : CblasNonUnit;
  const auto bn = static_cast<blasint>(n), bk = static_cast<blasint>(k);
  if constexpr (std::is_same_v<T, float>) cblas_strsm(CblasRowMajor, CblasLeft, uplo, trans, diag, bn, bk, 1.0f, a, bn, b, bk);
  else cblas_dtrsm(CblasRowMajor, CblasLeft, uplo, trans, diag, bn, bk, 1.0, a, bn, b, bk);
}
#else
bool use_lapack(int64_t, int64_t = 0) { return false; }
#endif

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
#ifdef KILN_WITH_BLAS
      if (use_lapack(n, passive_waits() ? kPassivePotrfMinOrder : kLapackMinOrder)) {
        // Row-major a is column-major a^T, whose upper triangle is a's lower one: potrf("U") there gives U with
        // a^T = U^T U, which read row-major is L = U^T with a = L L^T, in l's lower triangle.
        T* out = static_cast<T*>(l.raw_data_ptr()) + b * n * n;
        std::memcpy(out, static_cast<const T*>(a.raw_data_ptr()) + b * n * n, sizeof(T) * n * n);
        blasint info = potrf(out, static_cast<blasint>(n));  // k > 0: the minor of order k is not positive
        bool finite = true;
        for (int64_t i = 0; i < n; ++i) {
          finite = finite && std::isfinite(out[i * n + i]);
          std::fill(out + i * n + i + 1, out + (i + 1) * n, T(0));
        }
        if (info == 0 && !finite) {  // an infinite entry that potrf's positivity test let through
          const int64_t minor = first_bad_minor<T>(matrix_at<T>(a, b, n, n));
          info = static_cast<blasint>(minor > 0 ? minor : -1);
        }
        bad[b] = info;
        return;
      }
#endif
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
#ifdef KILN_WITH_BLAS
      if (use_lapack(n)) {
        // getrf on a column-major copy of a: a = P L U with ipiv's row swaps (1-based, made in order), which
        // applied to the row numbers 0 .. n-1 give perm.
        // The scratch from kiln's allocator, which keeps freed blocks: a fresh 1 MiB from malloc is a fresh
        // mapping, and its page faults cost a quarter of getrf's own time at n = 512.
        const Tensor scratch = empty({n, n}, a.dtype());
        T* col = static_cast<T*>(scratch.raw_data_ptr());
        transpose_square(static_cast<const T*>(a.raw_data_ptr()) + b * n * n, col, n);
        std::vector<blasint> ipiv(static_cast<size_t>(n));
        const blasint info = getrf(col, static_cast<blasint>(n), ipiv.data());  // k > 0: U(k, k) == 0
        transpose_square(col, static_cast<T*>(lu.raw_data_ptr()) + b * n * n, n);
        int64_t* row = p + b * n;
        for (int64_t i = 0; i < n; ++i) row[i] = i;
        for (int64_t i = 0; i < n; ++i) std::swap(row[i], row[ipiv[i] - 1]);
        bad[b] = info;
        return;
      }
#endif
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
      const auto rhs = matrix_at<T>(b, i, n, k);
      auto out = matrix_at<T>(x, i, n, k);
      const int64_t* row = p + i * n;
#ifdef KILN_WITH_BLAS
      if (use_lapack(n)) {
        const T* f = static_cast<const T*>(lu.raw_data_ptr()) + i * n * n;
        if (!transpose) {
          for (int64_t r = 0; r < n; ++r) out.row(r) = rhs.row(row[r]);  // P b, then L U x = P b
          trsm(f, out.data(), n, k, /*upper=*/false, /*transpose=*/false, /*unit=*/true);
          trsm(f, out.data(), n, k, /*upper=*/true, /*transpose=*/false, /*unit=*/false);
        } else {
          Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w = rhs;  // U^T L^T w = b
          trsm(f, w.data(), n, k, /*upper=*/true, /*transpose=*/true, /*unit=*/false);
          trsm(f, w.data(), n, k, /*upper=*/false, /*transpose=*/true, /*unit=*/true);
          for (int64_t r = 0; r < n; ++r) out.row(row[r]) = w.row(r);
        }
        return;
      }
#endif
      const Matrix<T> f = matrix_at<T>(lu, i, n, n);
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
#ifdef KILN_WITH_BLAS
      if (use_lapack(n)) {
        auto out = matrix_at<T>(x, i, n, k);
        out = matrix_at<T>(b, i, n, k);
        trsm(static_cast<const T*>(a.raw_data_ptr()) + i * n * n, out.data(), n, k, upper, false, unit);
        return;
      }
#endif
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
#ifdef KILN_WITH_BLAS
      if (!passive_waits() && use_lapack(n) && syevd_fits(n)) {
        // Row-major a is column-major a^T = a; its lower triangle is the column-major upper one that syevd reads.
        const Tensor scratch = empty({n, n}, a.dtype());
        T* z = static_cast<T*>(scratch.raw_data_ptr());
        std::memcpy(z, static_cast<const T*>(a.raw_data_ptr()) + b * n * n, sizeof(T) * n * n);
        bad[b] = syevd(v.defined(), z, static_cast<blasint>(n), values.data()) == 0 ? 0 : 1;
        // z's columns are the eigenvectors; v (row-major) holds them as columns too: v = z read transposed.
        if (v.defined()) transpose_square(z, static_cast<T*>(v.raw_data_ptr()) + b * n * n, n);
        return;
      }
#endif
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
#ifdef KILN_WITH_BLAS
      if (!passive_waits() && use_lapack(k) && gesdd_fits(m, n)) {
        // Row-major a (m, n) is column-major a^T (n, m) = U' S V'^T, so a = V' S U'^T: gesdd's column-major
        // VT' (k or m rows) read row-major is u, and its U' (n, k or n) read row-major is vh. No transposes.
        const Tensor scratch = empty({m, n}, a.dtype());
        T* copy = static_cast<T*>(scratch.raw_data_ptr());
        std::memcpy(copy, static_cast<const T*>(a.raw_data_ptr()) + b * m * n, sizeof(T) * m * n);
        const char* jobz = !vectors ? "N" : full ? "A" : "S";
        T* u_out = vectors ? static_cast<T*>(u.raw_data_ptr()) + b * u.size(1) * u.size(2) : nullptr;
        T* vh_out = vectors ? static_cast<T*>(vh.raw_data_ptr()) + b * vh.size(1) * vh.size(2) : nullptr;
        const auto bm = static_cast<blasint>(m), bn = static_cast<blasint>(n), bk = static_cast<blasint>(k);
        const blasint info = gesdd(jobz, bn, bm, copy, values.data(), vh_out, bn, u_out, full ? bm : bk);
        bad[b] = info == 0 ? 0 : 1;
        return;
      }
#endif
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
