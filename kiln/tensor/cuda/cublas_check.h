// Checking every cuBLAS call, as cuda_check.h does for the runtime: a failure throws kiln::Error naming what
// kiln was doing, the call, its file:line and cuBLAS's status ("bmm: cublasSetStream(...) failed at
// linalg_cuda.cu:120: the library was not initialized (CUBLAS_STATUS_NOT_INITIALIZED)").
#pragma once

#include <cublas_v2.h>

#include "kiln/tensor/error.h"

#define KILN_CUBLAS_CHECK(expr, what)                                                                               \
  do {                                                                                                              \
    cublasStatus_t kiln_status_ = (expr);                                                                           \
    if (kiln_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                                       \
      ::kiln::detail::throw_error(::kiln::detail::concat(what, ": ", #expr, " failed at ", __FILE__, ":", __LINE__, \
                                                         ": ", cublasGetStatusString(kiln_status_), " (",           \
                                                         cublasGetStatusName(kiln_status_), ")"));                  \
    }                                                                                                               \
  } while (0)
