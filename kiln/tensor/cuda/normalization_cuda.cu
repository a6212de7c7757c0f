// CUDA kernels of the fused layer norm (the math is in ops/normalization.h; ops/normalization_cpu.cpp is the
// reference they match), forward then backward.
//
// Forward and dL/dx: a warp per row for rows of up to 1024 elements, a block per row beyond. The forward reads
// a row three times (sum, sum of squared deviations from the mean, write), the second and third mostly from
// L2; the two-pass variance does not cancel the way E[x^2] - E[x]^2 does, and the sum is shifted by the
// row's first element so that a large common offset keeps its digits in float. dL/dx reduces sum(g w) and
// sum(g w xhat) over the row, then writes it.
// dL/dw and dL/db sum over rows, in two launches so that each sum has one fixed order (the same bits every
// run, no atomics): blocks of 32 columns x a chunk of rows write partial sums, and one thread per column adds
// the chunks' partials in order. float32 and the 16-bit floats compute in float, float64 in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/reduce_cuda.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr int kThreads = 256;
using cuda::kWarpSize;

struct Add {
  template <typename M>
  __device__ __forceinline__ M operator()(M a, M b) const { return a + b; }
};

template <typename T, typename M>
__device__ __forceinline__ T to_storage(M v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// The sum of v over a row's `lanes` threads (a warp, or the whole block), in every one of them.
template <typename M>
__device__ __forceinline__ M row_sum(M v, int lanes) {
  if (lanes == kWarpSize) return cuda::warp_allreduce(v, Add{});
  return cuda::block_allreduce<kThreads>(v, Add{}, cuda::shared_buffer<M, kThreads / kWarpSize>());
}

// x, y: (rows, d); w, b: (d) or null; mean, rstd: (rows). Every thread takes part in every reduction.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                              T* __restrict__ y, opmath_t<T>* __restrict__ mean, opmath_t<T>* __restrict__ rstd,
                              int64_t rows, int64_t d, opmath_t<T> eps, int lanes) {
  using M = opmath_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / lanes) + threadIdx.x / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const bool active = row < rows;
  const T* p = x + (active ? row : 0) * d;
  // The mean of x - x0, x0 the row's first element: a float sum of values near a large common offset would
  // lose the offset's digits (the CPU sums in double instead).
  const M x0 = static_cast<M>(p[0]);
  M s = 0;
  if (active)
    for (int64_t i = lane; i < d; i += lanes) s += static_cast<M>(p[i]) - x0;
  const M mu = x0 + row_sum(s, lanes) / static_cast<M>(d);
  M sq = 0;
  if (active)
    for (int64_t i = lane; i < d; i += lanes) {
      const M c = static_cast<M>(p[i]) - mu;
      sq += c * c;
    }
  const M rs = M(1) / sqrt(row_sum(sq, lanes) / static_cast<M>(d) + eps);
  if (!active) return;
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
  T* q = y + row * d;
  for (int64_t i = lane; i < d; i += lanes) {
    M v = (static_cast<M>(p[i]) - mu) * rs;
    if (w != nullptr) v *= static_cast<M>(w[i]);
    if (b != nullptr) v += static_cast<M>(b[i]);
    q[i] = to_storage<T>(v);
  }
}

// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g w; all (rows, d) but w (d) or null.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_backward_input_kernel(T* __restrict__ dx, const T* __restrict__ g, const T* __restrict__ x,
                                     const T* __restrict__ w, const opmath_t<T>* __restrict__ mean,
                                     const opmath_t<T>* __restrict__ rstd, int64_t rows, int64_t d, int lanes) {
  using M = opmath_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / lanes) + threadIdx.x / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const bool active = row < rows;
  const int64_t off = (active ? row : 0) * d;
  const M mu = mean[active ? row : 0], rs = rstd[active ? row : 0];
  M s1 = 0, s2 = 0;
  if (active)
    for (int64_t i = lane; i < d; i += lanes) {
      const M gw = w != nullptr ? static_cast<M>(g[off + i]) * static_cast<M>(w[i]) : static_cast<M>(g[off + i]);
      s1 += gw;
      s2 += gw * ((static_cast<M>(x[off + i]) - mu) * rs);
    }
  const M a = row_sum(s1, lanes) / static_cast<M>(d);
  const M c = row_sum(s2, lanes) / static_cast<M>(d);
  if (!active) return;
  for (int64_t i = lane; i < d; i += lanes) {
    const M gw = w != nullptr ? static_cast<M>(g[off + i]) * static_cast<M>(w[i]) : static_cast<M>(g[off + i]);
    const M xhat = (static_cast<M>(x[off + i]) - mu) * rs;
    dx[off + i] = to_storage<T>(rs * (gw - a - xhat * c));
  }
}

// The first of the two launches for dw and db: block (32, 8) over 32 columns and rows [chunk R, chunk R + R):
// part_w[chunk][col] = sum g xhat, part_b[chunk][col] = sum g over those rows (either pointer may be null).
constexpr int kColumnsX = 32, kColumnsY = kThreads / kColumnsX;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_param_partials_kernel(opmath_t<T>* __restrict__ part_w, opmath_t<T>* __restrict__ part_b,
                                     const T* __restrict__ g, const T* __restrict__ x,
                                     const opmath_t<T>* __restrict__ mean, const opmath_t<T>* __restrict__ rstd,
                                     int64_t rows, int64_t d, int64_t rows_per_chunk) {
  using M = opmath_t<T>;
  __shared__ M sw[kColumnsY][kColumnsX];
  __shared__ M sb[kColumnsY][kColumnsX];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumnsX + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  M aw = 0, ab = 0;
  if (col < d)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnsY) {
      const M gv = static_cast<M>(g[r * d + col]);
      aw += gv * ((static_cast<M>(x[r * d + col]) - mean[r]) * rstd[r]);
      ab += gv;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0 || col >= d) return;
  M tw = sw[0][threadIdx.x], tb = sb[0][threadIdx.x];
#pragma unroll
  for (int k = 1; k < kColumnsY; ++k) {
    tw += sw[k][threadIdx.x];
    tb += sb[k][threadIdx.x];
  }
  if (part_w != nullptr) part_w[chunk * d + col] = tw;
  if (part_b != nullptr) part_b[chunk * d + col] = tb;
}

// The second: out[col] = sum over chunks of part[chunk][col], in chunk order.
template <typename T>
__global__ void layer_norm_param_sum_kernel(T* __restrict__ out, const opmath_t<T>* __restrict__ part, int64_t chunks,
                                            int64_t d) {
  using M = opmath_t<T>;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= d) return;
  M s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += part[k * d + col];
  out[col] = to_storage<T>(s);
}

int lanes_for(int64_t d) { return d <= 1024 ? kWarpSize : kThreads; }

unsigned row_blocks(const char* op, int64_t rows, int lanes) {
  const int64_t blocks = (rows + kThreads / lanes - 1) / (kThreads / lanes);
  KILN_CHECK(blocks <= INT32_MAX, op, ": too many rows (", rows, ") for one launch");
  return static_cast<unsigned>(blocks);
}

template <typename P>
P* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<P*>(t.raw_data_ptr()) : nullptr;
}

void layer_norm_cuda(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, double eps) {
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t rows = x.size(0), d = x.size(1);
  visit_dtype<kFloatingSet>(x.dtype(), "layer_norm", [&]<typename T>() {
    using M = opmath_t<T>;
    const int lanes = lanes_for(d);
    layer_norm_forward_kernel<T><<<row_blocks("layer_norm", rows, lanes), kThreads, 0, stream>>>(
        ptr_or_null<const T>(x), ptr_or_null<const T>(weight), ptr_or_null<const T>(bias), ptr_or_null<T>(y),
        ptr_or_null<M>(mean), ptr_or_null<M>(rstd), rows, d, static_cast<M>(eps), lanes);
    KILN_CUDA_CHECK_LAUNCH("layer_norm");
  });
}

void layer_norm_backward_cuda(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                              const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Tensor& weight) {
  const char* op = "layer_norm_backward";
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t rows = x.size(0), d = x.size(1);
  visit_dtype<kFloatingSet>(x.dtype(), op, [&]<typename T>() {
    using M = opmath_t<T>;
    if (grad_x.defined()) {
      const int lanes = lanes_for(d);
      layer_norm_backward_input_kernel<T><<<row_blocks(op, rows, lanes), kThreads, 0, stream>>>(
          ptr_or_null<T>(grad_x), ptr_or_null<const T>(grad_y), ptr_or_null<const T>(x),
          ptr_or_null<const T>(weight), ptr_or_null<const M>(mean), ptr_or_null<const M>(rstd), rows, d, lanes);
      KILN_CUDA_CHECK_LAUNCH(op);
    }
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    // Chunks of at least 64 rows, at most 256 chunks: partial sums of (chunks, d) in op-math type.
    const int64_t rows_per_chunk = std::max<int64_t>(64, (rows + 255) / 256);
    const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
    const int64_t col_blocks = (d + kColumnsX - 1) / kColumnsX;
    KILN_CHECK(col_blocks <= INT32_MAX, op, ": too many columns (", d, ") for one launch");
    TensorOptions po = TensorOptions(mean.dtype()).device(x.device());
    Tensor part_w = grad_weight.defined() ? empty({chunks, d}, po) : Tensor();
    Tensor part_b = grad_bias.defined() ? empty({chunks, d}, po) : Tensor();
    layer_norm_param_partials_kernel<T>
        <<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)), dim3(kColumnsX, kColumnsY), 0,
           stream>>>(ptr_or_null<M>(part_w), ptr_or_null<M>(part_b), ptr_or_null<const T>(grad_y),
                     ptr_or_null<const T>(x), ptr_or_null<const M>(mean), ptr_or_null<const M>(rstd), rows, d,
                     rows_per_chunk);
    KILN_CUDA_CHECK_LAUNCH(op);
    const unsigned sum_blocks = static_cast<unsigned>((d + kThreads - 1) / kThreads);
    for (const auto& [out, part] : {std::pair{grad_weight, part_w}, std::pair{grad_bias, part_b}}) {
      if (!out.defined()) continue;
      layer_norm_param_sum_kernel<T><<<sum_blocks, kThreads, 0, stream>>>(ptr_or_null<T>(out),
                                                                          ptr_or_null<const M>(part), chunks, d);
      KILN_CUDA_CHECK_LAUNCH(op);
    }
  });
}

}  // namespace

namespace detail {
void register_cuda_normalization_kernels() {
  register_kernel<Op::layer_norm>(DeviceType::CUDA, layer_norm_cuda);
  register_kernel<Op::layer_norm_backward>(DeviceType::CUDA, layer_norm_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
