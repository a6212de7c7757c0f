// Checking every cuDNN call, as cuda_check.h does for the runtime and cublas_check.h for cuBLAS: a failure throws
// kiln::Error naming what kiln was doing, the call, its file:line, cuDNN's status and, where cuDNN left one, its
// own longer account ("conv2d: cudnnSetConvolution2dDescriptor(...) failed at conv_cuda.cu:120:
// CUDNN_STATUS_BAD_PARAM (...)").
#pragma once

#include <cudnn.h>

#include <string>

#include "kiln/tensor/error.h"

namespace kiln::cuda::detail {

// cudnnGetErrorString(status), followed by cuDNN's message about the last failure in brackets when it has one.
inline std::string cudnn_error_text(cudnnStatus_t status) {
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string text = cudnnGetErrorString(status);
  if (last[0] != '\0') text += std::string(" (") + last + ")";
  return text;
}

}  // namespace kiln::cuda::detail

#define KILN_CUDNN_CHECK(expr, what)                                                                             \
  do {                                                                                                           \
    cudnnStatus_t kiln_status_ = (expr);                                                                         \
    if (kiln_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] {                                                     \
      ::kiln::detail::throw_error(::kiln::detail::concat(what, ": ", #expr, " failed at ", __FILE__, ":",        \
                                                         __LINE__, ": ",                                         \
                                                         ::kiln::cuda::detail::cudnn_error_text(kiln_status_))); \
    }                                                                                                            \
  } while (0)
