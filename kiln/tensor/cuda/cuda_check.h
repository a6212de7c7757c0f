// Checking every CUDA call: a failure throws kiln::Error naming the call's file:line, the error and what kiln
// was doing ("copy: cudaMemcpy failed at copy_cuda.cu:42: an illegal memory access was encountered").
#pragma once

#include <cuda_runtime.h>

#include "kiln/tensor/error.h"

#define KILN_CUDA_CHECK(expr, what)                                                                          \
  do {                                                                                                       \
    cudaError_t kiln_err_ = (expr);                                                                          \
    if (kiln_err_ != cudaSuccess) [[unlikely]] {                                                             \
      ::kiln::detail::throw_error(::kiln::detail::concat(what, ": ", #expr, " failed at ", __FILE__, ":",     \
                                                         __LINE__, ": ", cudaGetErrorString(kiln_err_),     \
                                                         " (", cudaGetErrorName(kiln_err_), ")"));            \
    }                                                                                                        \
  } while (0)

// After a kernel launch: catches bad launch configurations at once (and, with KILN_CUDA_SYNC_DEBUG defined,
// errors inside the kernel, by synchronizing).
#ifdef KILN_CUDA_SYNC_DEBUG
#define KILN_CUDA_CHECK_LAUNCH(what)                     \
  do {                                                   \
    KILN_CUDA_CHECK(cudaGetLastError(), what);           \
    KILN_CUDA_CHECK(cudaDeviceSynchronize(), what);      \
  } while (0)
#else
#define KILN_CUDA_CHECK_LAUNCH(what) KILN_CUDA_CHECK(cudaGetLastError(), what)
#endif

namespace kiln::cuda {

// Makes `device` current for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    KILN_CUDA_CHECK(cudaGetDevice(&previous_), "DeviceGuard");
    if (device != previous_) KILN_CUDA_CHECK(cudaSetDevice(device), "DeviceGuard");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace kiln::cuda
