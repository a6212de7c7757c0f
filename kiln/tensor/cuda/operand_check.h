// The argument checks the NCHW kernels of conv_cuda.cu and max_pool_cuda.cu make of each tensor they are given.
// The frontends guarantee all of it; a direct caller of a kernel gets a clear error instead of a bad launch.
#pragma once

#include <cstdint>

#include "kiln/tensor/error.h"
#include "kiln/tensor/tensor.h"

namespace kiln::cuda {

// `t` (named `name` in op's errors) is defined, on out's device, of `dtype`, with `dim` dims, and contiguous.
inline void check_operand(const char* op, const char* name, const Tensor& t, const Tensor& out, DType dtype,
                          int64_t dim) {
  KILN_CHECK(t.defined(), op, ": ", name, " is undefined");
  KILN_CHECK(t.device() == out.device(), op, ": ", name, " is on ", t.device(), ", the output on ", out.device());
  KILN_CHECK(t.dtype() == dtype, op, ": ", name, " has dtype ", t.dtype(), ", expected ", dtype);
  KILN_CHECK(t.dim() == dim, op, ": ", name, " must have ", dim, " dims, got shape ", shape_str(t.sizes()));
  KILN_CHECK(t.is_contiguous(), op, " (CUDA): ", name, " of shape ", shape_str(t.sizes()), " must be contiguous");
}

}  // namespace kiln::cuda
