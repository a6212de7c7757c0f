// CPU kernels of grid_sample over images (ops/grid_sample.h has the math): each output position's coordinates,
// padding and corner weights are worked out once and used for every channel. Backward scatters into the
// input's gradient and sums the grid's gradient over the channels in the same pass, one image per thread (so
// no two threads write one pixel, and the result does not depend on the thread count), as PyTorch's CPU kernel
// splits the work. The reference is nn::functional::grid_sample's composite of differentiable ops
// (tests/nn/grid_sample_test.cpp holds the two against each other, and both against float64 definitions).
#include <algorithm>
#include <cstdint>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/grid_sample.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"

namespace kiln {
namespace {

using grid_sample::Corners;
using grid_sample::corners_at;

// out (N, C, Ho, Wo) from x (N, C, H, W) at grid (N, Ho, Wo, 2); P = Ho Wo.
template <typename T>
void forward(const T* x, const T* grid, T* out, int64_t N, int64_t C, int64_t H, int64_t W, int64_t P,
             const GridSampleParams& p) {
  parallel_for(0, N * P, std::max<int64_t>(1, kDefaultGrain / (4 * C + 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t n = i / P, q = i % P;
      const Corners<T> t = corners_at(grid[2 * i], grid[2 * i + 1], H, W, p);
      for (int64_t c = 0; c < C; ++c) out[(n * C + c) * P + q] = grid_sample::sample(t, x + (n * C + c) * H * W);
    }
  });
}

// From g (N, C, Ho, Wo): grad_x (N, C, H, W, zeroed) and grad_grid (N, Ho, Wo, 2), either null when not wanted.
template <typename T>
void backward(const T* g, const T* x, const T* grid, T* grad_x, T* grad_grid, int64_t N, int64_t C, int64_t H,
              int64_t W, int64_t P, const GridSampleParams& p) {
  const bool want_grid = grad_grid != nullptr && p.bilinear;  // nearest's is zero
  parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t q = 0; q < P; ++q) {
        const int64_t i = n * P + q;
        const Corners<T> t = corners_at(grid[2 * i], grid[2 * i + 1], H, W, p);
        T by_x = 0, by_y = 0;  // d out / d ix and d out / d iy, summed over the channels
        for (int64_t c = 0; c < C; ++c) {
          const T u = g[(n * C + c) * P + q];
          if (grad_x != nullptr) {
            T* plane = grad_x + (n * C + c) * H * W;
            for (int k = 0; k < t.count; ++k)
              if (t.at[k] >= 0) plane[t.at[k]] += t.weight[k] * u;
          }
          if (want_grid) {
            const grid_sample::CoordinateGradient<T> d = grid_sample::coordinate_gradient(t, x + (n * C + c) * H * W);
            by_x += u * d.x, by_y += u * d.y;
          }
        }
        if (grad_grid != nullptr) grad_grid[2 * i] = by_x * t.dx, grad_grid[2 * i + 1] = by_y * t.dy;
      }
  });
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void grid_sample_2d_cpu(const Tensor& out, const Tensor& x, const Tensor& grid, const GridSampleParams& p) {
  visit_dtype<kFloat32Set | kFloat64Set>(x.dtype(), "grid_sample", [&]<typename T>() {
    forward<T>(x.data_ptr<T>(), grid.data_ptr<T>(), out.data_ptr<T>(), x.size(0), x.size(1), x.size(2), x.size(3),
               grid.size(1) * grid.size(2), p);
  });
}

void grid_sample_2d_backward_cpu(const Tensor& grad_x, const Tensor& grad_grid, const Tensor& grad_out,
                                 const Tensor& x, const Tensor& grid, const GridSampleParams& p) {
  visit_dtype<kFloat32Set | kFloat64Set>(x.dtype(), "grid_sample backward", [&]<typename T>() {
    backward<T>(grad_out.data_ptr<T>(), x.data_ptr<T>(), grid.data_ptr<T>(), ptr_or_null<T>(grad_x),
                ptr_or_null<T>(grad_grid), x.size(0), x.size(1), x.size(2), x.size(3), grid.size(1) * grid.size(2),
                p);
  });
}

}  // namespace

namespace detail {
void register_grid_sample_cpu_kernels() {
  register_kernel<Op::grid_sample_2d>(DeviceType::CPU, grid_sample_2d_cpu);
  register_kernel<Op::grid_sample_2d_backward>(DeviceType::CPU, grid_sample_2d_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
