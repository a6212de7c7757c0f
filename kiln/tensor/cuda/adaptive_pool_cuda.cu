// CUDA kernels of adaptive average pooling (op_list.h: AdaptiveAvgPoolKernel) and of adaptive max pooling's
// argmax, over (B, D, H, W) with the bins of adaptive_pool.h, as the CPU's (adaptive_pool_cpu.cpp) compute them:
// one thread per output element sums its bin (or finds its max); for the gradient, one thread per input element
// gathers from the outputs whose bins hold it, so there are no atomics and the result is the same on every run.
// 16-bit floats sum in float.
#include <algorithm>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/grid_stride.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/adaptive_pool.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

using namespace adaptive_pool;  // bin_start, bin_end, first_output, end_output

using namespace cuda::grid_stride;  // kThreads, blocks_for, first_index, grid_step

struct Dims {
  int64_t D, H, W, OD, OH, OW;
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t total, Dims s) {
  using M = opmath_t<T>;
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t ow = i % s.OW, oh = i / s.OW % s.OH, od = i / (s.OW * s.OH) % s.OD, b = i / (s.OW * s.OH * s.OD);
    const int64_t d0 = bin_start(od, s.D, s.OD), d1 = bin_end(od, s.D, s.OD);
    const int64_t h0 = bin_start(oh, s.H, s.OH), h1 = bin_end(oh, s.H, s.OH);
    const int64_t w0 = bin_start(ow, s.W, s.OW), w1 = bin_end(ow, s.W, s.OW);
    M sum = 0;
    for (int64_t d = d0; d < d1; ++d)
      for (int64_t h = h0; h < h1; ++h) {
        const T* line = x + ((b * s.D + d) * s.H + h) * s.W;
        for (int64_t w = w0; w < w1; ++w) sum += static_cast<M>(line[w]);
      }
    out[i] = static_cast<T>(sum / static_cast<M>((d1 - d0) * (h1 - h0) * (w1 - w0)));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ grad_out, T* __restrict__ grad_x, int64_t total, Dims s) {
  using M = opmath_t<T>;
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t w = i % s.W, h = i / s.W % s.H, d = i / (s.W * s.H) % s.D, b = i / (s.W * s.H * s.D);
    M sum = 0;
    for (int64_t od = first_output(d, s.D, s.OD); od < end_output(d, s.D, s.OD); ++od)
      for (int64_t oh = first_output(h, s.H, s.OH); oh < end_output(h, s.H, s.OH); ++oh) {
        const T* line = grad_out + ((b * s.OD + od) * s.OH + oh) * s.OW;
        const int64_t rows = (bin_end(od, s.D, s.OD) - bin_start(od, s.D, s.OD)) *
                             (bin_end(oh, s.H, s.OH) - bin_start(oh, s.H, s.OH));
        for (int64_t ow = first_output(w, s.W, s.OW); ow < end_output(w, s.W, s.OW); ++ow)
          sum += static_cast<M>(line[ow]) / static_cast<M>(rows * (bin_end(ow, s.W, s.OW) - bin_start(ow, s.W, s.OW)));
      }
    grad_x[i] = static_cast<T>(sum);
  }
}

// One thread per output scans its bin in (d, h, w) order for the max, as the CPU kernel: the first of ties, the
// first NaN.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const T* __restrict__ x, int64_t* __restrict__ indices, int64_t total, Dims s) {
  using M = opmath_t<T>;
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t ow = i % s.OW, oh = i / s.OW % s.OH, od = i / (s.OW * s.OH) % s.OD, b = i / (s.OW * s.OH * s.OD);
    const int64_t d0 = bin_start(od, s.D, s.OD), d1 = bin_end(od, s.D, s.OD);
    const int64_t h0 = bin_start(oh, s.H, s.OH), h1 = bin_end(oh, s.H, s.OH);
    const int64_t w0 = bin_start(ow, s.W, s.OW), w1 = bin_end(ow, s.W, s.OW);
    const T* volume = x + b * s.D * s.H * s.W;
    int64_t arg = (d0 * s.H + h0) * s.W + w0;
    M best = static_cast<M>(volume[arg]);
    for (int64_t d = d0; d < d1; ++d)
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t at = (d * s.H + h) * s.W + w;
          const M v = static_cast<M>(volume[at]);
          const bool take = (v > best) || (v != v && best == best);
          best = take ? v : best;
          arg = take ? at : arg;
        }
    indices[i] = arg;
  }
}

// The frontend (ops::adaptive_avg_pool) guarantees all of this; a direct caller gets a clear error.
void check(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  KILN_CHECK(a.device() == b.device() && a.dtype() == b.dtype(), op, ": operands on ", a.device(), " and ",
             b.device(), " with dtypes ", a.dtype(), " and ", b.dtype(), "; expected one device and dtype");
  KILN_CHECK(a.dim() == 4 && b.dim() == 4 && a.size(0) == b.size(0) && a.is_contiguous() && b.is_contiguous(), op,
             " (CUDA): expected contiguous (B, D, H, W) operands of one B, got ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()));
}

void adaptive_avg_pool_cuda(const Tensor& out, const Tensor& x) {
  check("adaptive_avg_pool", out, x);
  const Dims s{x.size(1), x.size(2), x.size(3), out.size(1), out.size(2), out.size(3)};
  const int64_t total = out.numel();
  cudaStream_t stream = cuda::current_stream(out.device().index).handle;
  visit_dtype<kFloatingSet>(out.dtype(), "adaptive_avg_pool (CUDA)", [&]<typename T>() {
    forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x.raw_data_ptr()),
                                                                   static_cast<T*>(out.raw_data_ptr()), total, s);
    KILN_CUDA_CHECK_LAUNCH("adaptive_avg_pool");
  });
}

void adaptive_max_pool_cuda(const Tensor& indices, const Tensor& x) {
  KILN_CHECK(indices.defined() && x.defined() && indices.device() == x.device() && indices.dtype() == kInt64,
             "adaptive_max_pool (CUDA): expected int64 indices on the input's device");
  KILN_CHECK(indices.dim() == 4 && x.dim() == 4 && indices.size(0) == x.size(0) && indices.is_contiguous() &&
                 x.is_contiguous(),
             "adaptive_max_pool (CUDA): expected contiguous (B, D, H, W) operands of one B, got ",
             shape_str(indices.sizes()), " and ", shape_str(x.sizes()));
  const Dims s{x.size(1), x.size(2), x.size(3), indices.size(1), indices.size(2), indices.size(3)};
  const int64_t total = indices.numel();
  cudaStream_t stream = cuda::current_stream(x.device().index).handle;
  visit_dtype<kFloatingSet>(x.dtype(), "adaptive_max_pool (CUDA)", [&]<typename T>() {
    argmax_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x.raw_data_ptr()), static_cast<int64_t*>(indices.raw_data_ptr()), total, s);
    KILN_CUDA_CHECK_LAUNCH("adaptive_max_pool");
  });
}

void adaptive_avg_pool_backward_cuda(const Tensor& grad_x, const Tensor& grad_out) {
  check("adaptive_avg_pool_backward", grad_x, grad_out);
  const Dims s{grad_x.size(1), grad_x.size(2), grad_x.size(3), grad_out.size(1), grad_out.size(2), grad_out.size(3)};
  const int64_t total = grad_x.numel();
  cudaStream_t stream = cuda::current_stream(grad_x.device().index).handle;
  visit_dtype<kFloatingSet>(grad_x.dtype(), "adaptive_avg_pool_backward (CUDA)", [&]<typename T>() {
    backward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out.raw_data_ptr()), static_cast<T*>(grad_x.raw_data_ptr()), total, s);
    KILN_CUDA_CHECK_LAUNCH("adaptive_avg_pool_backward");
  });
}

}  // namespace

namespace detail {
void register_cuda_adaptive_pool_kernels() {
  register_kernel<Op::adaptive_avg_pool>(DeviceType::CUDA, adaptive_avg_pool_cuda);
  register_kernel<Op::adaptive_avg_pool_backward>(DeviceType::CUDA, adaptive_avg_pool_backward_cuda);
  register_kernel<Op::adaptive_max_pool>(DeviceType::CUDA, adaptive_max_pool_cuda);
}
}  // namespace detail
}  // namespace kiln
