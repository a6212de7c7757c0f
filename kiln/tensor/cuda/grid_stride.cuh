// The grid-stride loop of the kernels that give each thread one element at a time (padding, pooling, resizing,
// grid sampling, CTC, convolution's bias):
//
//   for (int64_t i = first_index(); i < n; i += grid_step()) out[i] = ...;
//   kernel<<<blocks_for(n), kThreads, 0, stream>>>(...);
//
// The grid is capped at 2^20 blocks; the loop covers whatever lies beyond, so any n works with one launch.
// Indices are int64: tensors past 2^31 elements are in reach of an H200's memory.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::cuda::grid_stride {

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: one per kThreads elements, at least 1, at most 2^20.
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}

__device__ __forceinline__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace kiln::cuda::grid_stride
