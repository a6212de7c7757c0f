// Matrix products. All go through the bmm kernel, which the CPU hands to a BLAS sgemm/dgemm (or Eigen's
// product in a build without BLAS); transposed operands are passed as transposes, not copied.
#pragma once

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
