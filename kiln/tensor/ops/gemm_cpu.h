// The CPU's one matrix product, for the kernels that need one (bmm, convolution):
//   c (M, N) = alpha op(a) (M, K) @ op(b) (K, N) + beta c,
// all row-major with leading dimensions lda, ldb, ldc; op(x) transposes x when its flag is set (x then lies in
// memory as (K, M) / (N, K)). With beta == 0 the old contents of c are never read (NaN included), as in BLAS.
//
// It runs OpenBLAS's sgemm/dgemm or Eigen's product, as cpu_gemm_backend() says (linalg.h), the same one inside
// the workers of a parallel_for (each product then runs on its worker's thread alone), so a product's bits do not
// depend on where it runs: the matrices of a bmm, or a convolution's images, round as the single product does.
// The exception is an OpenBLAS built on its own pthreads (not Debian's OpenMP build, which CMake prefers): every
// worker would start its threads, so the workers run Eigen's product instead.
#pragma once

#include <cstdint>

namespace kiln::detail {

template <typename T>
void cpu_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, T beta, T* c, int64_t ldc);

extern template void cpu_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                     const float*, int64_t, float, float*, int64_t);
extern template void cpu_gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                      const double*, int64_t, double, double*, int64_t);

// Whether a call made here may go to OpenBLAS (and the LAPACK inside it): the product goes there
// (cpu_gemm_backend() is "OpenBLAS"), and OpenBLAS may run on this thread (not a parallel_for worker, or an
// OpenBLAS that runs on its caller's thread there). Always false in a build without OpenBLAS. The matrix
// factorizations (decompositions_cpu.cpp) follow it, so KILN_GEMM=eigen moves them to Eigen too.
bool cpu_blas_usable_here();

}  // namespace kiln::detail
