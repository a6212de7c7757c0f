// CUDA kernels of the fused cross-entropy (the math is in ops/cross_entropy.h; ops/cross_entropy_cpu.cpp is the
// reference they match), forward then backward.
//
// Forward: a warp per row for rows of up to 1024 classes, a block per row beyond (as softmax_cuda.cu): the max,
// the sum of exp(z - max), and with label smoothing the weighted sum of log-probabilities, each reduced across
// the row's threads; the row's first thread then writes the loss, the row weight and the row's max and log-sum.
// Backward: one thread per element, reading its row's statistics, target and gradient (cached: a row's
// threads share them). Targets are checked where they are read: a bad one gives NaN and is reported through
// index_check.cuh, raised by the next cross_entropy call. float32 and the 16-bit floats compute in float,
// float64 in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/index_check.cuh"
#include "kiln/tensor/cuda/row_reduce.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/reduce.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr int kThreads = 256;
using cuda::kWarpSize;

using cuda::Add;
using cuda::MaxSkipNan;
using cuda::to_storage;

// z: (rows, c); target, loss, row_weight: (rows); stats: (rows, 2); w: (c) or null. lanes (32 or kThreads)
// threads a row. Every thread of the block takes part in every reduction (block_allreduce synchronizes),
// active or not.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(const T* __restrict__ z, const int64_t* __restrict__ target, const T* __restrict__ w,
                                 T* __restrict__ loss, T* __restrict__ row_weight, opmath_t<T>* __restrict__ stats,
                                 int64_t rows, int64_t c, int64_t ignore_index, opmath_t<T> e, int lanes,
                                 cuda::IndexCheck check) {
  using M = opmath_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / lanes) + threadIdx.x / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const bool active = row < rows;
  const T* p = z + (active ? row : 0) * c;
  M mx = -std::numeric_limits<M>::infinity();
  if (active)
    for (int64_t i = lane; i < c; i += lanes) mx = MaxSkipNan{}(mx, static_cast<M>(p[i]));
  mx = cuda::row_allreduce<kThreads>(mx, MaxSkipNan{}, lanes);
  M sum = 0;
  if (active && isfinite(mx))
    for (int64_t i = lane; i < c; i += lanes) sum += exp(static_cast<M>(p[i]) - mx);
  sum = cuda::row_allreduce<kThreads>(sum, Add{}, lanes);
  // NOTE: a row of -inf, or one holding +inf or NaN, has no finite log-sum-exp: NaN, as log_softmax gives.
  // logp_c = (z_c - mx) - log_sum: the shift first, so large logits keep their digits.
  const M log_sum = isfinite(mx) ? log(sum) : std::numeric_limits<M>::quiet_NaN();
  M smooth = 0;  // sum_c w_c logp_c, only with smoothing (e is the same for every thread: no divergence)
  if (e > M(0)) {
    if (active)
      for (int64_t i = lane; i < c; i += lanes)
        smooth += (w != nullptr ? static_cast<M>(w[i]) : M(1)) * ((static_cast<M>(p[i]) - mx) - log_sum);
    smooth = cuda::row_allreduce<kThreads>(smooth, Add{}, lanes);
  }
  if (!active || lane != 0) return;
  stats[2 * row] = mx;
  stats[2 * row + 1] = log_sum;
  const int64_t t = target[row];
  if (t == ignore_index) {
    loss[row] = to_storage<T>(M(0));
    row_weight[row] = to_storage<T>(M(0));
    return;
  }
  if (!check.ok(t)) {
    check.report(t);
    loss[row] = to_storage<T>(std::numeric_limits<M>::quiet_NaN());
    row_weight[row] = to_storage<T>(std::numeric_limits<M>::quiet_NaN());
    return;
  }
  const M wt = w != nullptr ? static_cast<M>(w[t]) : M(1);
  loss[row] = to_storage<T>(-(M(1) - e) * wt * ((static_cast<M>(p[t]) - mx) - log_sum) - e / static_cast<M>(c) * smooth);
  row_weight[row] = to_storage<T>(wt);
}

// grad, z: (rows, c); g, target: (rows); stats: (rows, 2); w: (c) or null; w_total: W (device, 0-dim) or null.
// grad_c = p_c (a + b W) - b w_c - a [c == t] with a = g (1 - e) w_t, b = g e / C, p_c = exp((z_c - m) - log_sum).
// The element position is int64 (a grid-stride step past INT32_MAX would wrap); Index, the narrowest type that
// holds n, does the division into row and column.
template <typename T, typename Index>
__global__ void cross_entropy_backward_kernel(T* __restrict__ grad, const T* __restrict__ g, const T* __restrict__ z,
                                              const opmath_t<T>* __restrict__ stats,
                                              const int64_t* __restrict__ target, const T* __restrict__ w,
                                              const opmath_t<T>* __restrict__ w_total, int64_t n, Index c,
                                              int64_t ignore_index, opmath_t<T> e, cuda::IndexCheck check) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const Index row = static_cast<Index>(i) / c, col = static_cast<Index>(i) - row * c;
    const int64_t t = target[row];
    if (t == ignore_index) {
      grad[i] = to_storage<T>(M(0));
      continue;
    }
    if (!check.ok(t)) {
      if (col == 0) check.report(t);
      grad[i] = to_storage<T>(std::numeric_limits<M>::quiet_NaN());
      continue;
    }
    const M gr = static_cast<M>(g[row]);
    const M wt = w != nullptr ? static_cast<M>(w[t]) : M(1);
    const M a = gr * (M(1) - e) * wt, b = gr * e / static_cast<M>(c);
    const M total = w_total != nullptr ? *w_total : static_cast<M>(c);
    const M wc = w != nullptr ? static_cast<M>(w[col]) : M(1);
    const int64_t srow = 2 * static_cast<int64_t>(row);  // in int64: (2^31 - 1, 1) logits fit an int32 index
    M v = exp((static_cast<M>(z[i]) - stats[srow]) - stats[srow + 1]) * (a + b * total) - b * wc;
    if (static_cast<int64_t>(col) == t) v -= a;
    grad[i] = to_storage<T>(v);
  }
}

void cross_entropy_cuda(const Tensor& loss, const Tensor& row_weight, const Tensor& stats, const Tensor& logits,
                        const Tensor& target, const Tensor& weight, const CrossEntropyParams& p) {
  const int device = logits.device().index;
  cuda::DeviceGuard guard(device);
  cuda::raise_pending_index_error();
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t rows = logits.size(0), c = logits.size(1);
  const cuda::IndexCheck check = cuda::make_index_check(cuda::kCrossEntropyId, 1, c);
  visit_dtype<kFloatingSet>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    using M = opmath_t<T>;
    const int lanes = c <= 1024 ? kWarpSize : kThreads;
    const int64_t blocks = (rows + kThreads / lanes - 1) / (kThreads / lanes);
    KILN_CHECK(blocks <= INT32_MAX, "cross_entropy: too many rows (", rows, ") for one launch");
    cross_entropy_forward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const T*>(logits.raw_data_ptr()), static_cast<const int64_t*>(target.raw_data_ptr()),
        weight.defined() ? static_cast<const T*>(weight.raw_data_ptr()) : nullptr,
        static_cast<T*>(loss.raw_data_ptr()), static_cast<T*>(row_weight.raw_data_ptr()),
        static_cast<M*>(stats.raw_data_ptr()), rows, c, p.ignore_index, static_cast<M>(p.label_smoothing), lanes, check);
    KILN_CUDA_CHECK_LAUNCH("cross_entropy");
  });
#ifdef KILN_CUDA_SYNC_DEBUG
  cuda::raise_pending_index_error();
#endif
}

void cross_entropy_backward_cuda(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                 const Tensor& stats, const Tensor& target, const Tensor& weight,
                                 const CrossEntropyParams& p) {
  const int device = logits.device().index;
  cuda::DeviceGuard guard(device);
  cuda::raise_pending_index_error();
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t n = logits.numel(), c = logits.size(1);
  const cuda::IndexCheck check = cuda::make_index_check(cuda::kCrossEntropyBackwardId, 1, c);
  // W, the sum of the class weights, stays on the device (a 0-dim tensor in op-math type): no sync.
  Tensor w_total;
  if (weight.defined() && p.label_smoothing > 0) w_total = ops::sum(weight, {}, false, stats.dtype());
  visit_dtype<kFloatingSet>(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using M = opmath_t<T>;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16);
    auto launch = [&]<typename Index>() {
      cross_entropy_backward_kernel<T, Index><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<T*>(grad_logits.raw_data_ptr()), static_cast<const T*>(grad_loss.raw_data_ptr()),
          static_cast<const T*>(logits.raw_data_ptr()), static_cast<const M*>(stats.raw_data_ptr()),
          static_cast<const int64_t*>(target.raw_data_ptr()),
          weight.defined() ? static_cast<const T*>(weight.raw_data_ptr()) : nullptr,
          w_total.defined() ? static_cast<const M*>(w_total.raw_data_ptr()) : nullptr, n, static_cast<Index>(c),
          p.ignore_index, static_cast<M>(p.label_smoothing), check);
    };
    if (n <= INT32_MAX) launch.template operator()<int32_t>();
    else launch.template operator()<int64_t>();
    KILN_CUDA_CHECK_LAUNCH("cross_entropy_backward");
  });
#ifdef KILN_CUDA_SYNC_DEBUG
  cuda::raise_pending_index_error();
#endif
}

}  // namespace

namespace detail {
void register_cuda_cross_entropy_kernels() {
  register_kernel<Op::cross_entropy>(DeviceType::CUDA, cross_entropy_cuda);
  register_kernel<Op::cross_entropy_backward>(DeviceType::CUDA, cross_entropy_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
