// grid_sample over images (N, C, H, W), bilinear or nearest, every padding mode and align_corners: the math
// each output position needs, shared by the CPU's kernels (grid_sample_cpu.cpp) and the GPU's
// (cuda/grid_sample_cuda.cu), and the frontends. nn::functional::grid_sample runs these for float32 and float64
// images, and a composite of differentiable ops for everything else (volumes, bicubic, 16-bit types).
//
// A grid value g in [-1, 1] names a pixel coordinate along a dim of n pixels: with align_corners -1 and 1 are
// the corner pixels' centres, c = (g + 1) (n - 1) / 2; without, the image's outer edges, c = ((g + 1) n - 1) / 2.
// Padding then moves coordinates outside: zeros leaves them (they read 0), border clamps them to [0, n - 1],
// reflection mirrors them about the edges (the corner centres with align_corners, else the outer edges) and
// then clamps. Where border or reflection clamp, the edges themselves included, the coordinate does not move
// with the grid: its derivative there is 0 (PyTorch's rule).
#pragma once

#include <cmath>
#include <cstdint>

#include "kiln/tensor/macros.h"
#include "kiln/tensor/ops/op_list.h"
#include "kiln/tensor/tensor.h"

// corners_at is not inlined on the CPU: forced into the backward loop over the channels, it made that loop
// 25-30% slower in a standalone build of it (GCC 12, -march=native, the tensor layer's flags). On the GPU, the
// compiler's choice.
#if defined(__CUDACC__)
#define KILN_GRID_CORNERS __host__ __device__ inline
#else
#define KILN_GRID_CORNERS __attribute__((noinline))
#endif

namespace kiln::grid_sample {

// The padded pixel coordinate along a dim of `size` that the normalized g names, and through *d its derivative
// by g: the unnormalization's scale, flipped by each reflection, and zero where the padding clamps.
template <typename T>
KILN_HOST_DEVICE inline T source(T g, int64_t size, GridPadding padding, bool align_corners, T* d) {
  const T n = static_cast<T>(size);
  T dc = align_corners ? (n - 1) / 2 : n / 2;
  T c = align_corners ? (g + 1) * dc : ((g + 1) * n - 1) / 2;
  if (padding == GridPadding::Reflection) {
    // Reflect about [lo, lo + span]: the distance from lo, folded back and forth over spans.
    const T lo = align_corners ? T(0) : T(-0.5), span = align_corners ? n - 1 : n;
    if (span <= 0) {
      *d = 0;
      return 0;
    }
    const T distance = std::abs(c - lo);
    const T flips = std::floor(distance / span);
    const T extra = distance - flips * span;
    const bool even = std::fmod(flips, T(2)) == 0;
    const T sign = c > lo ? T(1) : c < lo ? T(-1) : T(0);  // the distance's derivative (abs' at 0 is 0)
    dc *= even ? sign : -sign;
    c = even ? extra + lo : span + lo - extra;
  }
  if (padding != GridPadding::Zeros && !(c > 0 && c < n - 1)) c = c <= 0 ? T(0) : n - 1, dc = 0;
  *d = dc;
  return c;
}

// One output position's reads: up to four pixels of the plane (their offsets, -1 outside the image), each
// with its weight; for bilinear also the shares along x and y, and the coordinates' derivatives by the grid.
template <typename T>
struct Corners {
  int64_t at[4] = {-1, -1, -1, -1};  // nw, ne, sw, se (bilinear); the one pixel (nearest)
  T weight[4] = {0, 0, 0, 0};
  T tx = 0, ty = 0, dx = 0, dy = 0;
  int count = 0;
};

// The offset of pixel (y, x) in an H x W plane, -1 outside. (Coordinates are compared as T before becoming
// integers: a far-off or NaN one is outside, never converted.)
template <typename T>
KILN_INLINE int64_t offset(T y, T x, int64_t H, int64_t W) {
  if (!(x >= 0 && x <= static_cast<T>(W - 1) && y >= 0 && y <= static_cast<T>(H - 1))) return -1;
  return static_cast<int64_t>(y) * W + static_cast<int64_t>(x);
}

template <typename T>
KILN_GRID_CORNERS Corners<T> corners_at(T gx, T gy, int64_t H, int64_t W, const GridSampleParams& p) {
  Corners<T> t;
  const T ix = source(gx, W, p.padding, p.align_corners, &t.dx), iy = source(gy, H, p.padding, p.align_corners, &t.dy);
  if (!p.bilinear) {  // nearest: halves round to even (nearbyint in the default rounding mode)
    t.count = 1;
    t.at[0] = offset(std::nearbyint(iy), std::nearbyint(ix), H, W);
    t.weight[0] = 1;
    return t;
  }
  const T x0 = std::floor(ix), y0 = std::floor(iy);
  t.tx = ix - x0, t.ty = iy - y0;
  t.count = 4;
  t.at[0] = offset(y0, x0, H, W), t.at[1] = offset(y0, x0 + 1, H, W);
  t.at[2] = offset(y0 + 1, x0, H, W), t.at[3] = offset(y0 + 1, x0 + 1, H, W);
  t.weight[0] = (1 - t.tx) * (1 - t.ty), t.weight[1] = t.tx * (1 - t.ty);
  t.weight[2] = (1 - t.tx) * t.ty, t.weight[3] = t.tx * t.ty;
  return t;
}

// The output at one position of one plane.
template <typename T>
KILN_INLINE T sample(const Corners<T>& t, const T* plane) {
  T v = 0;
  for (int k = 0; k < t.count; ++k)
    if (t.at[k] >= 0) v += t.weight[k] * plane[t.at[k]];
  return v;
}

// Bilinear: d out / d ix and d out / d iy at one position of one plane (to be scaled by the output's gradient
// there, summed over the channels, then scaled by the corners' dx and dy).
template <typename T>
struct CoordinateGradient {
  T x, y;
};
template <typename T>
KILN_INLINE CoordinateGradient<T> coordinate_gradient(const Corners<T>& t, const T* plane) {
  T v[4];
  for (int k = 0; k < 4; ++k) v[k] = t.at[k] >= 0 ? plane[t.at[k]] : T(0);
  return {(v[1] - v[0]) * (1 - t.ty) + (v[3] - v[2]) * t.ty, (v[2] - v[0]) * (1 - t.tx) + (v[3] - v[1]) * t.tx};
}

}  // namespace kiln::grid_sample

namespace kiln::ops {

// x (N, C, H, W) and grid (N, Ho, Wo, 2), float32 or float64, one dtype, one device -> (N, C, Ho, Wo).
Tensor grid_sample_2d(const Tensor& x, const Tensor& grid, const GridSampleParams& p);
// The gradients by x and by grid (each undefined where not wanted; nearest's grid gradient is zero) from
// grad_out (the output's shape).
struct GridSample2dGrads {
  Tensor x, grid;
};
GridSample2dGrads grid_sample_2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& grid,
                                          const GridSampleParams& p, bool want_x, bool want_grid);

}  // namespace kiln::ops
