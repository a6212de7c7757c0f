// CUDA kernels of grid_sample over images (ops/grid_sample.h has the math, shared with grid_sample_cpu.cpp):
// one thread per output position, which works out its coordinates and corner weights once and loops over the
// channels. Backward: the same thread sums the grid's gradient over the channels and adds its share of each
// channel's output gradient to the input's gradient with atomics, as PyTorch's CUDA kernel does.
// NOTE: where several positions read one pixel, those atomic adds land in no fixed order, so the input's
// gradient may differ in the last bits from run to run (the CPU's, one image per thread, does not); the
// grid's gradient and the output are the same on every run. Under deterministic algorithms (determinism.h)
// asking for the input's gradient is an error, as in PyTorch.
#include <algorithm>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/grid_stride.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/determinism.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/grid_sample.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

using grid_sample::Corners;
using grid_sample::corners_at;

using namespace cuda::grid_stride;  // kThreads, blocks_for, first_index, grid_step

struct Dims {
  int64_t N, C, H, W, P;  // P = Ho Wo
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ x, const T* __restrict__ grid, T* __restrict__ out, Dims s,
                   GridSampleParams p) {
  for (int64_t i = first_index(); i < s.N * s.P;
       i += grid_step()) {
    const int64_t n = i / s.P, q = i % s.P;
    const Corners<T> t = corners_at(grid[2 * i], grid[2 * i + 1], s.H, s.W, p);
    for (int64_t c = 0; c < s.C; ++c)
      out[(n * s.C + c) * s.P + q] = grid_sample::sample(t, x + (n * s.C + c) * s.H * s.W);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ grid, T* grad_x,
                    T* __restrict__ grad_grid, Dims s, GridSampleParams p) {
  for (int64_t i = first_index(); i < s.N * s.P;
       i += grid_step()) {
    const int64_t n = i / s.P, q = i % s.P;
    const Corners<T> t = corners_at(grid[2 * i], grid[2 * i + 1], s.H, s.W, p);
    T by_x = 0, by_y = 0;
    for (int64_t c = 0; c < s.C; ++c) {
      const T u = g[(n * s.C + c) * s.P + q];
      if (grad_x != nullptr) {
        T* plane = grad_x + (n * s.C + c) * s.H * s.W;
        for (int k = 0; k < t.count; ++k)
          if (t.at[k] >= 0) atomicAdd(plane + t.at[k], t.weight[k] * u);
      }
      if (grad_grid != nullptr && p.bilinear) {
        const grid_sample::CoordinateGradient<T> d = grid_sample::coordinate_gradient(t, x + (n * s.C + c) * s.H * s.W);
        by_x += u * d.x, by_y += u * d.y;
      }
    }
    if (grad_grid != nullptr) grad_grid[2 * i] = by_x * t.dx, grad_grid[2 * i + 1] = by_y * t.dy;
  }
}

template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data_ptr()) : nullptr;
}

Dims dims(const Tensor& x, const Tensor& grid) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), grid.size(1) * grid.size(2)};
}

void grid_sample_2d_cuda(const Tensor& out, const Tensor& x, const Tensor& grid, const GridSampleParams& p) {
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const Dims s = dims(x, grid);
  visit_dtype<kFloat32Set | kFloat64Set>(x.dtype(), "grid_sample (CUDA)", [&]<typename T>() {
    forward_kernel<T><<<blocks_for(s.N * s.P), kThreads, 0, stream>>>(
        static_cast<const T*>(x.raw_data_ptr()), static_cast<const T*>(grid.raw_data_ptr()),
        static_cast<T*>(out.raw_data_ptr()), s, p);
    KILN_CUDA_CHECK_LAUNCH("grid_sample");
  });
}

void grid_sample_2d_backward_cuda(const Tensor& grad_x, const Tensor& grad_grid, const Tensor& grad_out,
                                  const Tensor& x, const Tensor& grid, const GridSampleParams& p) {
  // Only the input's gradient is added with atomics; the grid's alone is the same on every run.
  if (grad_x.defined()) detail::alert_not_deterministic("grid_sample's gradient for the input", x.device());
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const Dims s = dims(x, grid);
  visit_dtype<kFloat32Set | kFloat64Set>(x.dtype(), "grid_sample backward (CUDA)", [&]<typename T>() {
    backward_kernel<T><<<blocks_for(s.N * s.P), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out.raw_data_ptr()), static_cast<const T*>(x.raw_data_ptr()),
        static_cast<const T*>(grid.raw_data_ptr()), data_or_null<T>(grad_x), data_or_null<T>(grad_grid), s, p);
    KILN_CUDA_CHECK_LAUNCH("grid_sample backward");
  });
}

}  // namespace

namespace detail {
void register_cuda_grid_sample_kernels() {
  register_kernel<Op::grid_sample_2d>(DeviceType::CUDA, grid_sample_2d_cuda);
  register_kernel<Op::grid_sample_2d_backward>(DeviceType::CUDA, grid_sample_2d_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
