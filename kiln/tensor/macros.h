// Macros shared by CPU and CUDA code.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#define KILN_INLINE __host__ __device__ __forceinline__
#else
#define KILN_HOST_DEVICE
#define KILN_INLINE inline __attribute__((always_inline))
#endif
