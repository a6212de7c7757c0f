// CUDA kernels of the fused layer and batch norms (the math is in ops/normalization.h; ops/normalization_cpu.cpp
// is the reference they match), forward then backward.
//
// Layer norm:
// Forward and dL/dx: a warp per row for rows of up to 1024 elements, a block per row beyond. The forward reads
// a row three times (sum, sum of squared deviations from the mean, write), the second and third mostly from
// L2; the two-pass variance does not cancel the way E[x^2] - E[x]^2 does, and the sum is shifted by the
// row's first element so that a large common offset keeps its digits in float. dL/dx reduces sum(g w) and
// sum(g w xhat) over the row, then writes it.
// dL/dw and dL/db sum over rows, in two launches so that each sum has one fixed order (the same bits every
// run, no atomics): blocks of 32 columns x a chunk of rows write partial sums, and one thread per column adds
// the chunks' partials in order.
// Batch norm: a channel's statistics (and the backward's two sums) also come from blocks of (channel, chunk of
// its values) writing partial sums and one thread per channel adding them in order: the mean (its sum shifted
// by the channel's first value, as layer norm's), then the squared deviations from it, two passes as on the
// CPU. y and dx are element-wise launches.
// float32 and the 16-bit floats compute in float, float64 in double.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/row_reduce.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr int kThreads = 256;
using cuda::kWarpSize;

using cuda::Add;
using cuda::to_storage;

// The sum of v over a row's `lanes` threads (a warp, or the whole block), in every one of them.
template <typename M>
__device__ __forceinline__ M row_sum(M v, int lanes) {
  return cuda::row_allreduce<kThreads>(v, Add{}, lanes);
}

// The shift of a row's or channel's mean: its first value, unless that is infinite (inf - inf would make every
// shifted value NaN; the mean is then infinite, as on the CPU).
template <typename M>
__device__ M finite_or_zero(M v) {
  return isfinite(v) ? v : M(0);
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
  const M x0 = finite_or_zero(static_cast<M>(p[0]));
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

// ---- batch norm ----

// x: (N, C, S); value j of channel ch (of count = N S) lies at ((j / S) C + ch) S + j % S.
__device__ __forceinline__ int64_t channel_offset(int64_t j, int64_t ch, int64_t c, int64_t s) {
  const int64_t i = j / s;
  return (i * c + ch) * s + (j - i * s);
}

// Chunks of a channel's values for the partial sums: at least 4096 values each, at most 64 chunks.
int64_t bn_chunk(int64_t count) { return std::max<int64_t>(4096, (count + 63) / 64); }

// What a partial-sums launch adds over a channel's values.
enum class BnSum {
  kShifted,  // a: x - (the channel's first value), for the mean
  kSquares,  // a: (x - mean)^2, for the variance (two passes: nothing cancels)
  kGrad,     // a: g, b: g (x - mean), for the backward
};

// Block (ch, k): part_a[ch][k] (and part_b for kGrad) over values [k chunk, (k + 1) chunk) of channel ch.
template <BnSum kWhat, typename T>
__global__ void __launch_bounds__(kThreads)
    bn_partials_kernel(opmath_t<T>* __restrict__ part_a, opmath_t<T>* __restrict__ part_b, const T* __restrict__ x,
                       const T* __restrict__ g, const opmath_t<T>* __restrict__ mean, int64_t c, int64_t s,
                       int64_t count, int64_t chunk) {
  using M = opmath_t<T>;
  const int64_t ch = blockIdx.x, k = blockIdx.y, chunks = gridDim.y;
  const M center = kWhat == BnSum::kShifted ? finite_or_zero(static_cast<M>(x[ch * s])) : mean[ch];
  const int64_t j0 = k * chunk, j1 = min(count, j0 + chunk);
  M a = 0, b = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += kThreads) {
    const int64_t off = channel_offset(j, ch, c, s);
    const M d = static_cast<M>(x[off]) - center;
    if constexpr (kWhat == BnSum::kShifted) {
      a += d;
    } else if constexpr (kWhat == BnSum::kSquares) {
      a += d * d;
    } else {
      const M gv = static_cast<M>(g[off]);
      a += gv;
      b += gv * d;
    }
  }
  a = cuda::block_allreduce<kThreads>(a, Add{}, cuda::shared_buffer<M, kThreads / kWarpSize>());
  if constexpr (kWhat == BnSum::kGrad)
    b = cuda::block_allreduce<kThreads>(b, Add{}, cuda::shared_buffer<M, kThreads / kWarpSize>());
  if (threadIdx.x != 0) return;
  part_a[ch * chunks + k] = a;
  if constexpr (kWhat == BnSum::kGrad) part_b[ch * chunks + k] = b;
}

// One thread per channel adds its chunks in order. kShifted: mean = first value + sum / count; kSquares:
// var = sum / count.
template <BnSum kWhat, typename T>
__global__ void bn_stats_finalize_kernel(opmath_t<T>* __restrict__ out, const opmath_t<T>* __restrict__ part,
                                         const T* __restrict__ x, int64_t c, int64_t s, int64_t count, int64_t chunks) {
  using M = opmath_t<T>;
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  M a = 0;
  for (int64_t k = 0; k < chunks; ++k) a += part[ch * chunks + k];
  if constexpr (kWhat == BnSum::kShifted) out[ch] = finite_or_zero(static_cast<M>(x[ch * s])) + a / static_cast<M>(count);
  else out[ch] = a / static_cast<M>(count);
}

// The backward's: sums[ch] = sum g, sums[c + ch] = sum g xhat (= rstd sum g (x - mean)); dw and db written
// where wanted.
template <typename T>
__global__ void bn_grad_finalize_kernel(opmath_t<T>* __restrict__ sums, T* __restrict__ dw, T* __restrict__ db,
                                        const opmath_t<T>* __restrict__ part_a, const opmath_t<T>* __restrict__ part_b,
                                        const opmath_t<T>* __restrict__ var, int64_t c, int64_t chunks, opmath_t<T> eps) {
  using M = opmath_t<T>;
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  M a = 0, b = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    a += part_a[ch * chunks + k];
    b += part_b[ch * chunks + k];
  }
  const M sgx = b * (M(1) / sqrt(var[ch] + eps));
  sums[ch] = a;
  sums[c + ch] = sgx;
  if (dw != nullptr) dw[ch] = to_storage<T>(sgx);
  if (db != nullptr) db[ch] = to_storage<T>(a);
}

// y = (x - mean) (rstd w) + b, one thread per element (grid-stride, int64 positions).
template <typename T>
__global__ void bn_apply_kernel(T* __restrict__ y, const T* __restrict__ x, const opmath_t<T>* __restrict__ mean,
                                const opmath_t<T>* __restrict__ var, const T* __restrict__ w, const T* __restrict__ b,
                                int64_t n, int64_t c, int64_t s, opmath_t<T> eps) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t ch = (i / s) % c;
    const M scale = M(1) / sqrt(var[ch] + eps) * (w != nullptr ? static_cast<M>(w[ch]) : M(1));
    const M shift = b != nullptr ? static_cast<M>(b[ch]) : M(0);
    y[i] = to_storage<T>((static_cast<M>(x[i]) - mean[ch]) * scale + shift);
  }
}

// dx = w rstd (g - sum(g) / count - xhat sum(g xhat) / count) when training, w rstd g otherwise.
template <typename T>
__global__ void bn_backward_input_kernel(T* __restrict__ dx, const T* __restrict__ g, const T* __restrict__ x,
                                         const opmath_t<T>* __restrict__ mean, const opmath_t<T>* __restrict__ var,
                                         const T* __restrict__ w, const opmath_t<T>* __restrict__ sums, int64_t n,
                                         int64_t c, int64_t s, int64_t count, opmath_t<T> eps, bool training) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t ch = (i / s) % c;
    const M rstd = M(1) / sqrt(var[ch] + eps);
    const M wr = rstd * (w != nullptr ? static_cast<M>(w[ch]) : M(1));
    M v = static_cast<M>(g[i]);
    if (training) {
      const M xhat = (static_cast<M>(x[i]) - mean[ch]) * rstd;
      v -= sums[ch] / static_cast<M>(count) + xhat * (sums[c + ch] / static_cast<M>(count));
    }
    dx[i] = to_storage<T>(wr * v);
  }
}

unsigned elementwise_blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16));
}

void batch_norm_cuda(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, double eps, bool training) {
  const char* op = "batch_norm";
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t c = x.size(1), s = x.size(2), count = x.size(0) * s, n = x.numel();
  KILN_CHECK(c <= INT32_MAX, op, ": too many channels (", c, ") for one launch");
  visit_dtype<kFloatingSet>(x.dtype(), op, [&]<typename T>() {
    using M = opmath_t<T>;
    if (training) {
      const int64_t chunk = bn_chunk(count), chunks = (count + chunk - 1) / chunk;
      Tensor part = empty({c, chunks}, TensorOptions(mean.dtype()).device(x.device()));
      const dim3 grid(static_cast<unsigned>(c), static_cast<unsigned>(chunks));
      const unsigned channel_blocks = static_cast<unsigned>((c + kThreads - 1) / kThreads);
      // The mean, then the squared deviations from it.
      bn_partials_kernel<BnSum::kShifted, T><<<grid, kThreads, 0, stream>>>(
          ptr_or_null<M>(part), nullptr, ptr_or_null<const T>(x), nullptr, nullptr, c, s, count, chunk);
      KILN_CUDA_CHECK_LAUNCH(op);
      bn_stats_finalize_kernel<BnSum::kShifted, T><<<channel_blocks, kThreads, 0, stream>>>(
          ptr_or_null<M>(mean), ptr_or_null<const M>(part), ptr_or_null<const T>(x), c, s, count, chunks);
      KILN_CUDA_CHECK_LAUNCH(op);
      bn_partials_kernel<BnSum::kSquares, T><<<grid, kThreads, 0, stream>>>(
          ptr_or_null<M>(part), nullptr, ptr_or_null<const T>(x), nullptr, ptr_or_null<const M>(mean), c, s, count,
          chunk);
      KILN_CUDA_CHECK_LAUNCH(op);
      bn_stats_finalize_kernel<BnSum::kSquares, T><<<channel_blocks, kThreads, 0, stream>>>(
          ptr_or_null<M>(var), ptr_or_null<const M>(part), ptr_or_null<const T>(x), c, s, count, chunks);
      KILN_CUDA_CHECK_LAUNCH(op);
    }
    if (!y.defined()) return;  // the statistics alone (ops::batch_norm_stats)
    bn_apply_kernel<T><<<elementwise_blocks(n), kThreads, 0, stream>>>(
        ptr_or_null<T>(y), ptr_or_null<const T>(x), ptr_or_null<const M>(mean), ptr_or_null<const M>(var),
        ptr_or_null<const T>(weight), ptr_or_null<const T>(bias), n, c, s, static_cast<M>(eps));
    KILN_CUDA_CHECK_LAUNCH(op);
  });
}

void batch_norm_backward_cuda(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                              const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                              const Tensor& weight, double eps, bool training) {
  const char* op = "batch_norm_backward";
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t c = x.size(1), s = x.size(2), count = x.size(0) * s, n = x.numel();
  KILN_CHECK(c <= INT32_MAX, op, ": too many channels (", c, ") for one launch");
  visit_dtype<kFloatingSet>(x.dtype(), op, [&]<typename T>() {
    using M = opmath_t<T>;
    // The sums are needed for dw, db, and for dx when training; eval-mode dx alone needs none.
    Tensor sums;
    if (grad_weight.defined() || grad_bias.defined() || training) {
      const int64_t chunk = bn_chunk(count), chunks = (count + chunk - 1) / chunk;
      TensorOptions po = TensorOptions(mean.dtype()).device(x.device());
      Tensor part_a = empty({c, chunks}, po), part_b = empty({c, chunks}, po);
      sums = empty({2, c}, po);
      bn_partials_kernel<BnSum::kGrad, T><<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(chunks)), kThreads, 0,
                                     stream>>>(ptr_or_null<M>(part_a), ptr_or_null<M>(part_b), ptr_or_null<const T>(x),
                                               ptr_or_null<const T>(grad_y), ptr_or_null<const M>(mean), c, s, count,
                                               chunk);
      KILN_CUDA_CHECK_LAUNCH(op);
      bn_grad_finalize_kernel<T><<<static_cast<unsigned>((c + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
          ptr_or_null<M>(sums), ptr_or_null<T>(grad_weight), ptr_or_null<T>(grad_bias), ptr_or_null<const M>(part_a),
          ptr_or_null<const M>(part_b), ptr_or_null<const M>(var), c, chunks, static_cast<M>(eps));
      KILN_CUDA_CHECK_LAUNCH(op);
    }
    if (!grad_x.defined()) return;
    bn_backward_input_kernel<T><<<elementwise_blocks(n), kThreads, 0, stream>>>(
        ptr_or_null<T>(grad_x), ptr_or_null<const T>(grad_y), ptr_or_null<const T>(x), ptr_or_null<const M>(mean),
        ptr_or_null<const M>(var), ptr_or_null<const T>(weight), ptr_or_null<const M>(sums), n, c, s, count,
        static_cast<M>(eps), training);
    KILN_CUDA_CHECK_LAUNCH(op);
  });
}

// The training-mode dx with the sums (2, C) given: the rows of several processes (ops::batch_norm_backward_input).
void batch_norm_backward_input_cuda(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                    const Tensor& var, const Tensor& weight, const Tensor& sums, int64_t count,
                                    double eps) {
  const char* op = "batch_norm_backward_input";
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t c = x.size(1), s = x.size(2), n = x.numel();
  visit_dtype<kFloatingSet>(x.dtype(), op, [&]<typename T>() {
    using M = opmath_t<T>;
    bn_backward_input_kernel<T><<<elementwise_blocks(n), kThreads, 0, stream>>>(
        ptr_or_null<T>(grad_x), ptr_or_null<const T>(grad_y), ptr_or_null<const T>(x), ptr_or_null<const M>(mean),
        ptr_or_null<const M>(var), ptr_or_null<const T>(weight), ptr_or_null<const M>(sums), n, c, s, count,
        static_cast<M>(eps), true);
    KILN_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace

namespace detail {
void register_cuda_normalization_kernels() {
  register_kernel<Op::batch_norm>(DeviceType::CUDA, batch_norm_cuda);
  register_kernel<Op::batch_norm_backward>(DeviceType::CUDA, batch_norm_backward_cuda);
  register_kernel<Op::batch_norm_backward_input>(DeviceType::CUDA, batch_norm_backward_input_cuda);
  register_kernel<Op::layer_norm>(DeviceType::CUDA, layer_norm_cuda);
  register_kernel<Op::layer_norm_backward>(DeviceType::CUDA, layer_norm_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
