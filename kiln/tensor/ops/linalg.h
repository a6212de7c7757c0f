// Matrix products. All go through the bmm kernel, which the CPU hands to OpenBLAS's sgemm/dgemm or to Eigen's
// product (cpu_gemm_backend() below); transposed operands are passed as transposes, not copied.
#pragma once

#include <string>

#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// PyTorch's matmul: 1-D @ 1-D is a dot product, 2-D @ 2-D a matrix product, 1-D operands get a dim added and
// removed, and leading (batch) dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // a: (M, K), b: (K, N) -> (M, N)
Tensor bmm(const Tensor& a, const Tensor& b);  // a: (B, M, K), b: (B, K, N) -> (B, M, N)
Tensor mv(const Tensor& a, const Tensor& v);   // a: (M, K), v: (K) -> (M)
Tensor dot(const Tensor& a, const Tensor& b);  // (K), (K) -> ()
Tensor outer(const Tensor& a, const Tensor& b);  // (M), (N) -> (M, N)
// beta * c + alpha * (a @ b); c broadcasts to (M, N) / (B, M, N).
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);
Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);

}  // namespace kiln::ops

namespace kiln {

// Where the CPU's float32/float64 products go: name "OpenBLAS" or "Eigen", and why. In a build with OpenBLAS
// that is OpenBLAS, unless the variable KILN_GEMM says "eigen", or OpenBLAS runs kernels older than the CPU:
// Debian 12's OpenBLAS 0.3.21 does not know Sapphire Rapids and runs its generic "Prescott" (SSE3) kernels there,
// 4x slower than Eigen's product (bench/gemm_bench). Decided on the first product, then fixed until
// set_cpu_gemm_backend; the two round differently, so one process keeps one.
struct CpuGemmBackend {
  std::string name;
  std::string why;
};
CpuGemmBackend cpu_gemm_backend();
// "openblas" or "eigen"; "openblas" in a build without it is an error.
void set_cpu_gemm_backend(const std::string& name);

namespace detail {
// The choice itself: KILN_GEMM's value (null: unset), whether the build has OpenBLAS, the core OpenBLAS picked
// (openblas_get_corename) and whether this CPU has AVX2 and FMA.
CpuGemmBackend choose_cpu_gemm_backend(const char* env, bool have_blas, const std::string& blas_core,
                                       bool cpu_has_avx2_fma);
}  // namespace detail

}  // namespace kiln
