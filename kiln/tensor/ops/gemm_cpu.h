// The CPU's one matrix product, for the kernels that need one (bmm, convolution):
//   c (M, N) = alpha op(a) (M, K) @ op(b) (K, N) + beta c,
// all row-major with leading dimensions lda, ldb, ldc; op(x) transposes x when its flag is set (x then lies in
// memory as (K, M) / (N, K)). With beta == 0 the old contents of c are never read (NaN included), as in BLAS.
//
// It runs OpenBLAS's sgemm/dgemm or Eigen's product, as cpu_gemm_backend() says (linalg.h), and Eigen's on the
// calling thread inside a parallel region: OpenBLAS called from every worker of a parallel_for ran the W3
// convolutions ~2.4x slower on 2 cores than Eigen did.
#pragma once

#include <cstdint>

namespace kiln::detail {

template <typename T>
void cpu_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, T beta, T* c, int64_t ldc);

// The same product, always Eigen's (on the calling thread when OpenMP gives it one): for a caller whose bits
// must not depend on the backend or on where it runs (conv2d's weight gradient, summed over fixed slices).
template <typename T>
void eigen_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
                int64_t ldb, T beta, T* c, int64_t ldc);

extern template void cpu_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                     const float*, int64_t, float, float*, int64_t);
extern template void cpu_gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                      const double*, int64_t, double, double*, int64_t);

extern template void eigen_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                       const float*, int64_t, float, float*, int64_t);
extern template void eigen_gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                        const double*, int64_t, double, double*, int64_t);

}  // namespace kiln::detail
