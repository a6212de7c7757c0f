// CUDA kernels of softmax and log_softmax along one dim; the CPU kernels (ops/softmax_cpu.cpp) are the
// reference they match.
//
// As on the CPU the input is made contiguous and seen as (outer, D, inner), D the softmax dim. Three passes
// over the data (max, sum of exp(x - max), write); the second and third mostly hit L2.
//   inner == 1 (the last dim): a warp per row for rows up to 1024 elements, a block per row beyond;
//   inner > 1: a block per 32 neighbouring columns (read coalesced), 8 threads down each column.
// float32 and the 16-bit floats compute in float, float64 in double.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/row_reduce.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

namespace kiln {
namespace {

constexpr int kThreads = 256;
using cuda::kWarpSize;

using cuda::Add;
using cuda::MaxSkipNan;
using cuda::to_storage;

// NOTE: a row holding NaN, a row of -inf (x - max = -inf + inf) and a row holding +inf (inf - inf) all come out
// NaN, as on the CPU and in PyTorch: the kernels write NaN where the max is not finite or the sum is NaN.
template <typename M>
__device__ __forceinline__ bool finite(M v) {
  return isfinite(v);
}

// out[i] for x[i] = v, given the row's max and sum (log: x - max - log(sum), not log(softmax), which would
// underflow to -inf where exp(x - max) rounds to 0).
template <bool kLog, typename M>
__device__ __forceinline__ M softmax_value(M v, M mx, M shift_or_scale) {
  if constexpr (kLog) return v - shift_or_scale;
  else return exp(v - mx) * shift_or_scale;
}

template <bool kLog, typename M>
__device__ __forceinline__ M shift_or_scale(M mx, M sum) {
  if constexpr (kLog) return mx + log(sum);
  else return M(1) / sum;
}

// x, y: (rows, d) contiguous. lanes (32 or kThreads) threads per row.
template <bool kLog, typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t d, int lanes) {
  using M = opmath_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / lanes) + threadIdx.x / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const bool active = row < rows;
  const T* p = x + (active ? row : 0) * d;
  M mx = -std::numeric_limits<M>::infinity();
  if (active)
    for (int64_t i = lane; i < d; i += lanes) mx = MaxSkipNan{}(mx, static_cast<M>(p[i]));
  mx = cuda::row_allreduce<kThreads>(mx, MaxSkipNan{}, lanes);
  M sum = 0;
  if (active && finite(mx))
    for (int64_t i = lane; i < d; i += lanes) sum += exp(static_cast<M>(p[i]) - mx);
  sum = cuda::row_allreduce<kThreads>(sum, Add{}, lanes);
  if (!active) return;
  T* q = y + row * d;
  if (!finite(mx) || isnan(sum)) {
    const T nan = to_storage<T>(std::numeric_limits<M>::quiet_NaN());
    for (int64_t i = lane; i < d; i += lanes) q[i] = nan;
    return;
  }
  const M s = shift_or_scale<kLog>(mx, sum);
  for (int64_t i = lane; i < d; i += lanes) q[i] = to_storage<T>(softmax_value<kLog>(static_cast<M>(p[i]), mx, s));
}

// x, y: (outer, d, inner) contiguous, inner > 1. Block (32, 8): threadIdx.x picks one of 32 neighbouring
// columns (coalesced), threadIdx.y every 8th element down it; the 8 partial maxima and sums of a column meet in
// shared memory, combined in y order by every thread alike.
constexpr int kColumnsX = 32, kColumnsY = kThreads / kColumnsX;

template <bool kLog, typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_columns_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t d, int64_t inner, int64_t col_blocks) {
  using M = opmath_t<T>;
  __shared__ M part[kColumnsY][kColumnsX];
  const int64_t o = blockIdx.x / col_blocks;
  const int64_t c = (blockIdx.x % col_blocks) * kColumnsX + threadIdx.x;
  const bool active = c < inner;
  const int64_t off = o * d * inner + (active ? c : 0);
  const T* p = x + off;
  M mx = -std::numeric_limits<M>::infinity();
  if (active)
    for (int64_t i = threadIdx.y; i < d; i += kColumnsY) mx = MaxSkipNan{}(mx, static_cast<M>(p[i * inner]));
  part[threadIdx.y][threadIdx.x] = mx;
  __syncthreads();
  mx = part[0][threadIdx.x];
#pragma unroll
  for (int k = 1; k < kColumnsY; ++k) mx = MaxSkipNan{}(mx, part[k][threadIdx.x]);
  __syncthreads();  // all have read part before it is reused
  M sum = 0;
  if (active && finite(mx))
    for (int64_t i = threadIdx.y; i < d; i += kColumnsY) sum += exp(static_cast<M>(p[i * inner]) - mx);
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  sum = part[0][threadIdx.x];
#pragma unroll
  for (int k = 1; k < kColumnsY; ++k) sum += part[k][threadIdx.x];
  if (!active) return;
  T* q = y + off;
  if (!finite(mx) || isnan(sum)) {
    const T nan = to_storage<T>(std::numeric_limits<M>::quiet_NaN());
    for (int64_t i = threadIdx.y; i < d; i += kColumnsY) q[i * inner] = nan;
    return;
  }
  const M s = shift_or_scale<kLog>(mx, sum);
  for (int64_t i = threadIdx.y; i < d; i += kColumnsY)
    q[i * inner] = to_storage<T>(softmax_value<kLog>(static_cast<M>(p[i * inner]), mx, s));
}

// out, x: one shape, floating; along dim.
template <bool kLog>
void softmax_impl(const char* name, const Tensor& out, const Tensor& x, int64_t dim) {
  if (x.numel() == 0) return;
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  Tensor in = ops::contiguous(x);
  Tensor dst = out.is_contiguous() ? out : empty(out.sizes(), TensorOptions(out.dtype()).device(out.device()));
  const int64_t d = x.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < dim; ++k) outer *= x.size(k);
  for (int64_t k = dim + 1; k < x.dim(); ++k) inner *= x.size(k);
  visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() {
    const T* p = static_cast<const T*>(in.raw_data_ptr());
    T* q = static_cast<T*>(dst.raw_data_ptr());
    if (inner == 1) {
      const int lanes = d <= 1024 ? kWarpSize : kThreads;
      const int64_t blocks = (outer + kThreads / lanes - 1) / (kThreads / lanes);
      KILN_CHECK(blocks <= INT32_MAX, name, ": too many rows (", outer, ") for one launch");
      softmax_rows_kernel<kLog, T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, q, outer, d, lanes);
    } else {
      const int64_t col_blocks = (inner + kColumnsX - 1) / kColumnsX;
      KILN_CHECK(outer * col_blocks <= INT32_MAX, name, ": too many columns (", outer * inner, ") for one launch");
      softmax_columns_kernel<kLog, T><<<static_cast<unsigned>(outer * col_blocks), dim3(kColumnsX, kColumnsY), 0,
                                        stream>>>(p, q, d, inner, col_blocks);
    }
    KILN_CUDA_CHECK_LAUNCH(name);
  });
  if (dst.impl() != out.impl()) ops::copy_(out, dst);
}

void softmax_cuda(const Tensor& out, const Tensor& x, int64_t dim) { softmax_impl<false>("softmax", out, x, dim); }
void log_softmax_cuda(const Tensor& out, const Tensor& x, int64_t dim) {
  softmax_impl<true>("log_softmax", out, x, dim);
}

}  // namespace

namespace detail {
void register_cuda_softmax_kernels() {
  register_kernel<Op::softmax>(DeviceType::CUDA, softmax_cuda);
  register_kernel<Op::log_softmax>(DeviceType::CUDA, log_softmax_cuda);
}
}  // namespace detail
}  // namespace kiln
