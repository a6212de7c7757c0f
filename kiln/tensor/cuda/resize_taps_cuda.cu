// CUDA kernels of resize_taps (resize_taps.h), the twins of resize_taps_cpu.cpp: x contiguous, seen as
// (outer, in, inner) around the resized dim, the output as (outer, out, inner).
//
// Forward: one thread per output element sums its taps in tap order. Backward: one thread per input element
// gathers the outputs whose taps read it, in output order, then tap order: the order the CPU adds them in, from
// the same inverted taps (resize_taps_layout.h, built on the host: a copy of the small tap tables there, which
// waits for the stream, and the inversion copied back). No atomics, so every element has one writer and the same bits on every run.
//
// Compiled with --fmad=false (kiln/tensor/CMakeLists.txt), as the CPU file is with -ffp-contract=off: each
// product is rounded before it is added, so the results have the CPU kernels' bits, the forward the composite's.
#include <algorithm>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/grid_stride.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/resize_taps_layout.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

namespace kiln {
namespace {

using namespace cuda::grid_stride;  // kThreads, blocks_for, first_index, grid_step

using ops::detail::TapGeometry;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ x, T* __restrict__ y, const int64_t* __restrict__ idx,
                   const T* __restrict__ w, TapGeometry g, int64_t total) {
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t j = i % g.inner, d = i / g.inner % g.out, o = i / (g.inner * g.out);
    const T* line = x + o * g.in * g.inner + j;
    T acc = line[idx[d] * g.inner] * w[d];
    for (int64_t k = 1; k < g.taps; ++k) acc = acc + line[idx[k * g.out + d] * g.inner] * w[k * g.out + d];
    y[i] = acc;
  }
}

// The (output, weight) pairs that read input position p are entries [start[p], start[p + 1]) of from and weight.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ gy, T* __restrict__ gx, const int64_t* __restrict__ start,
                    const int64_t* __restrict__ from, const T* __restrict__ weight, TapGeometry g, int64_t total) {
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t j = i % g.inner, p = i / g.inner % g.in, o = i / (g.inner * g.in);
    const T* line = gy + o * g.out * g.inner + j;
    T acc = T(0);
    for (int64_t e = start[p]; e < start[p + 1]; ++e) acc = acc + line[from[e] * g.inner] * weight[e];
    gx[i] = acc;
  }
}

void resize_taps_cuda(const Tensor& y, const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& w) {
  const TapGeometry g = ops::detail::tap_geometry(x, dim, y.size(dim), idx.size(0));
  const int64_t total = y.numel();
  cuda::DeviceGuard guard(y.device().index);
  cudaStream_t stream = cuda::current_stream(y.device().index).handle;
  visit_dtype<kFloat32Set | kFloat64Set>(x.dtype(), "resize_taps (CUDA)", [&]<typename T>() {
    forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x.raw_data_ptr()), static_cast<T*>(y.raw_data_ptr()),
        static_cast<const int64_t*>(idx.raw_data_ptr()), static_cast<const T*>(w.raw_data_ptr()), g, total);
    KILN_CUDA_CHECK_LAUNCH("resize_taps");
  });
}

void resize_taps_backward_cuda(const Tensor& grad_x, const Tensor& grad_y, int64_t dim, const Tensor& idx,
                               const Tensor& w) {
  const TapGeometry g = ops::detail::tap_geometry(grad_x, dim, grad_y.size(dim), idx.size(0));
  const Device device = grad_x.device();
  cuda::DeviceGuard guard(device.index);
  cudaStream_t stream = cuda::current_stream(device.index).handle;
  // The taps inverted on the host, as resize_taps_cpu.cpp does (resize_taps_layout.h), then copied over.
  const Tensor host_idx = ops::to(idx, Device::cpu()), host_w = ops::to(w, Device::cpu());
  Tensor start_d, from_d, weight_d;
  visit_dtype<kFloat32Set | kFloat64Set>(w.dtype(), "resize_taps backward (CUDA)", [&]<typename T>() {
    const ops::detail::InvertedTaps<T> inv =
        ops::detail::invert_taps(host_idx.data_ptr<int64_t>(), host_w.data_ptr<T>(), g);
    start_d = ops::to(tensor(inv.start), device);
    from_d = ops::to(tensor(inv.from), device);
    weight_d = ops::to(tensor(inv.weight), device);
  });
  const int64_t total = grad_x.numel();
  visit_dtype<kFloat32Set | kFloat64Set>(grad_y.dtype(), "resize_taps backward (CUDA)", [&]<typename T>() {
    backward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_y.raw_data_ptr()), static_cast<T*>(grad_x.raw_data_ptr()),
        static_cast<const int64_t*>(start_d.raw_data_ptr()), static_cast<const int64_t*>(from_d.raw_data_ptr()),
        static_cast<const T*>(weight_d.raw_data_ptr()), g, total);
    KILN_CUDA_CHECK_LAUNCH("resize_taps backward");
  });
}

}  // namespace

namespace detail {
void register_cuda_resize_taps_kernels() {
  register_kernel<Op::resize_taps>(DeviceType::CUDA, resize_taps_cuda);
  register_kernel<Op::resize_taps_backward>(DeviceType::CUDA, resize_taps_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
