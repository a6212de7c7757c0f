// CUDA kernels of padding by copies (op_list.h: PadKernel, PadBackwardKernel), over (B, D, H, W) with the
// positions pad.h gives, as the CPU's (pad_cpu.cpp): one thread per output element copies its source; for the
// gradient, one thread per input element sums the outputs that read it (padding::readers along each dim), so there
// are no atomics and the result is the same on every run. 16-bit floats sum in float.
#include <algorithm>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/grid_stride.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/pad.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

using namespace cuda::grid_stride;  // kThreads, blocks_for, first_index, grid_step

struct Dims {
  int64_t D, H, W, OD, OH, OW;
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t total, Dims s, PadParams p) {
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t ow = i % s.OW, oh = i / s.OW % s.OH, od = i / (s.OW * s.OH) % s.OD, b = i / (s.OW * s.OH * s.OD);
    const int64_t d = padding::source(p.mode, od, s.D, p.before[0]), h = padding::source(p.mode, oh, s.H, p.before[1]),
                  w = padding::source(p.mode, ow, s.W, p.before[2]);
    out[i] = x[((b * s.D + d) * s.H + h) * s.W + w];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ grad_out, T* __restrict__ grad_x, int64_t total, Dims s, PadParams p) {
  using M = opmath_t<T>;
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t w = i % s.W, h = i / s.W % s.H, d = i / (s.W * s.H) % s.D, b = i / (s.W * s.H * s.D);
    int64_t dlo[3], dhi[3], hlo[3], hhi[3], wlo[3], whi[3];
    const int nd = padding::readers(p.mode, d, s.D, p.before[0], s.OD, dlo, dhi);
    const int nh = padding::readers(p.mode, h, s.H, p.before[1], s.OH, hlo, hhi);
    const int nw = padding::readers(p.mode, w, s.W, p.before[2], s.OW, wlo, whi);
    M sum = 0;
    for (int a = 0; a < nd; ++a)
      for (int64_t od = dlo[a]; od < dhi[a]; ++od)
        for (int c = 0; c < nh; ++c)
          for (int64_t oh = hlo[c]; oh < hhi[c]; ++oh) {
            const T* row = grad_out + ((b * s.OD + od) * s.OH + oh) * s.OW;
            for (int e = 0; e < nw; ++e)
              for (int64_t ow = wlo[e]; ow < whi[e]; ++ow) sum += static_cast<M>(row[ow]);
          }
    grad_x[i] = static_cast<T>(sum);
  }
}

// The frontend (ops::pad with a PadMode) guarantees all of this; a direct caller gets a clear error.
void check(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  KILN_CHECK(a.device() == b.device() && a.dtype() == b.dtype(), op, ": operands on ", a.device(), " and ",
             b.device(), " with dtypes ", a.dtype(), " and ", b.dtype(), "; expected one device and dtype");
  KILN_CHECK(a.dim() == 4 && b.dim() == 4 && a.size(0) == b.size(0) && a.is_contiguous() && b.is_contiguous(), op,
             " (CUDA): expected contiguous (B, D, H, W) operands of one B, got ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()));
}

void pad_cuda(const Tensor& out, const Tensor& x, const PadParams& p) {
  check("pad", out, x);
  const Dims s{x.size(1), x.size(2), x.size(3), out.size(1), out.size(2), out.size(3)};
  const int64_t total = out.numel();
  cudaStream_t stream = cuda::current_stream(out.device().index).handle;
  visit_dtype(out.dtype(), "pad (CUDA)", [&]<typename T>() {
    forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x.raw_data_ptr()),
                                                                   static_cast<T*>(out.raw_data_ptr()), total, s, p);
    KILN_CUDA_CHECK_LAUNCH("pad");
  });
}

void pad_backward_cuda(const Tensor& grad_x, const Tensor& grad_out, const PadParams& p) {
  check("pad_backward", grad_x, grad_out);
  const Dims s{grad_x.size(1), grad_x.size(2), grad_x.size(3), grad_out.size(1), grad_out.size(2), grad_out.size(3)};
  const int64_t total = grad_x.numel();
  cudaStream_t stream = cuda::current_stream(grad_x.device().index).handle;
  visit_dtype<kFloatingSet>(grad_x.dtype(), "pad_backward (CUDA)", [&]<typename T>() {
    backward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out.raw_data_ptr()), static_cast<T*>(grad_x.raw_data_ptr()), total, s, p);
    KILN_CUDA_CHECK_LAUNCH("pad_backward");
  });
}

}  // namespace

namespace detail {
void register_cuda_pad_kernels() {
  register_kernel<Op::pad>(DeviceType::CUDA, pad_cuda);
  register_kernel<Op::pad_backward>(DeviceType::CUDA, pad_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
