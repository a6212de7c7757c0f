// What the row-wise CUDA kernels share (softmax_cuda.cu, cross_entropy_cuda.cu, normalization_cuda.cu): the
// combines they reduce with, the store of an op-math value into a storage type, and a reduction over the
// threads that hold one row: a warp (rows up to 1024 elements) or a whole block of kThreads (longer rows).
#pragma once

#include <type_traits>

#include "kiln/tensor/cuda/reduce_cuda.cuh"
#include "kiln/tensor/half.h"

namespace kiln::cuda {

// The max that skips NaN, so it is commutative (a NaN shows up in a later sum instead, as on the CPU).
struct MaxSkipNan {
  template <typename M>
  __device__ __forceinline__ M operator()(M a, M b) const { return b > a ? b : a; }
};
struct Add {
  template <typename M>
  __device__ __forceinline__ M operator()(M a, M b) const { return a + b; }
};

// An op-math value (float or double) into storage type T, rounded once.
template <typename T, typename M>
__device__ __forceinline__ T to_storage(M v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// The combination of v over a row's `lanes` threads (kWarpSize, or kThreads: the whole block), in every one of
// them. lanes is the same for the whole launch, and every thread of the block must call it (block_allreduce
// synchronizes), whether its row is in range or not.
template <int kThreads, typename M, typename Combine>
__device__ __forceinline__ M row_allreduce(M v, const Combine& combine, int lanes) {
  if (lanes == kWarpSize) return warp_allreduce(v, combine);
  return block_allreduce<kThreads>(v, combine, shared_buffer<M, kThreads / kWarpSize>());
}

}  // namespace kiln::cuda
