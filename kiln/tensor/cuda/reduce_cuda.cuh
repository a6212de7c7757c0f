// Device helpers shared by the CUDA reductions and softmax: moving any small accumulator through a warp
// shuffle, and warp / block reductions in a fixed order.
//
// Every reduction here combines values along one fixed tree that depends only on the launch shape, never on
// timing (no atomics), so a result has the same bits on every run.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_runtime.h>

namespace kiln::cuda {

inline constexpr int kWarpSize = 32;

// __shfl_down_sync / __shfl_xor_sync for any trivially copyable A (a float, a double, a (value, index) pair,
// Welford's moments): moved as 32-bit words.
template <typename A>
__device__ __forceinline__ A shfl_down(const A& v, int offset) {
  constexpr int kWords = (static_cast<int>(sizeof(A)) + 3) / 4;
  uint32_t w[kWords] = {};
  memcpy(w, &v, sizeof(A));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_down_sync(0xffffffffu, w[k], offset);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

template <typename A>
__device__ __forceinline__ A shfl_xor(const A& v, int mask) {
  constexpr int kWords = (static_cast<int>(sizeof(A)) + 3) / 4;
  uint32_t w[kWords] = {};
  memcpy(w, &v, sizeof(A));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], mask);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

// The combination of the 32 lanes' values, in lane 0 (the other lanes hold partial results). combine(a, b)
// gets the lower lanes' part as a. All 32 lanes must call it.
template <typename A, typename Combine>
__device__ __forceinline__ A warp_reduce(A v, const Combine& combine) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = combine(v, shfl_down(v, offset));
  return v;
}

// The same, with the result in every lane. NOTE: only for commutative combines (max; + is commutative in
// floating point too): partner lanes combine the same two values in opposite order, and must agree bitwise.
template <typename A, typename Combine>
__device__ __forceinline__ A warp_allreduce(A v, const Combine& combine) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) v = combine(v, shfl_xor(v, mask));
  return v;
}

// The combination over a 1-D block of kThreads threads, in thread 0; every thread must call it. smem holds
// kThreads / 32 values of A.
template <int kThreads, typename A, typename Combine>
__device__ __forceinline__ A block_reduce(A v, const Combine& combine, A* smem) {
  constexpr int kWarps = kThreads / kWarpSize;
  v = warp_reduce(v, combine);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = smem[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v = combine(v, smem[w]);
  }
  return v;
}

// The combination over a 1-D block, in every thread (same NOTE as warp_allreduce). smem holds kThreads / 32
// values of A; it may be reused as soon as this returns.
template <int kThreads, typename A, typename Combine>
__device__ __forceinline__ A block_allreduce(A v, const Combine& combine, A* smem) {
  constexpr int kWarps = kThreads / kWarpSize;
  v = warp_allreduce(v, combine);
  if (threadIdx.x % kWarpSize == 0) smem[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  v = smem[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) v = combine(v, smem[w]);
  __syncthreads();  // everyone has read smem before anyone writes it again
  return v;
}

// Shared memory for n values of a type that need not be default-constructible.
template <typename A, int n>
__device__ __forceinline__ A* shared_buffer() {
  __shared__ alignas(16) unsigned char buf[sizeof(A) * n];
  return reinterpret_cast<A*>(buf);
}

// The number of multiprocessors of a device (cached; it does not change).
int sm_count(int device);

}  // namespace kiln::cuda
