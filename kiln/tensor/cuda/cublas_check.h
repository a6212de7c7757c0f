// Checking every cuBLAS call, as cuda_check.h does for the runtime: a failure throws kiln::Error naming what
// kiln was doing, the call, its file:line and cuBLAS's status ("bmm: cuda::cublas().set_stream(h, stream)
// failed at linalg_cuda.cu:149: the library was not initialized (CUBLAS_STATUS_NOT_INITIALIZED)"). The status strings
// come from the library itself, through cublas_loader.h, as every cuBLAS call does.
#pragma once

#include <cublas_v2.h>

#include "kiln/tensor/cuda/cublas_loader.h"
#include "kiln/tensor/error.h"

#define KILN_CUBLAS_CHECK(expr, what)                                                                               \
  do {                                                                                                              \
    cublasStatus_t kiln_status_ = (expr);                                                                           \
    if (kiln_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                                       \
      ::kiln::detail::throw_error(::kiln::detail::concat(what, ": ", #expr, " failed at ", __FILE__, ":", __LINE__, \
                                                         ": ", ::kiln::cuda::cublas().status_string(kiln_status_),  \
                                                         " (", ::kiln::cuda::cublas().status_name(kiln_status_),    \
                                                         ")"));                                                     \
    }                                                                                                               \
  } while (0)
