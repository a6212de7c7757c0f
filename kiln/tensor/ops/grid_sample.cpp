// Frontends of grid_sample's kernels over images: checks, the outputs allocated, and the input's device's
// kernel. nn::functional::grid_sample checks the user's options and picks these or its composite.
#include "kiln/tensor/ops/grid_sample.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

namespace {

void check(const char* op, const Tensor& x, const Tensor& grid) {
  KILN_CHECK(x.defined() && grid.defined() && x.dim() == 4 && grid.dim() == 4 && grid.size(0) == x.size(0) &&
                 grid.size(3) == 2,
             op, ": expected x (N, C, H, W) and grid (N, Ho, Wo, 2) of one N, got ",
             x.defined() ? shape_str(x.sizes()) : std::string("undefined"), " and ",
             grid.defined() ? shape_str(grid.sizes()) : std::string("undefined"));
  KILN_CHECK((x.dtype() == kFloat32 || x.dtype() == kFloat64) && grid.dtype() == x.dtype(), op,
             ": x and grid must share float32 or float64, got ", x.dtype(), " and ", grid.dtype());
  KILN_CHECK(grid.device() == x.device(), op, ": x and grid must be on one device, got ", x.device(), " and ",
             grid.device());
}

}  // namespace

Tensor grid_sample_2d(const Tensor& x, const Tensor& grid, const GridSampleParams& p) {
  check("grid_sample", x, grid);
  Tensor out = empty({x.size(0), x.size(1), grid.size(1), grid.size(2)},
                     TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  call_kernel<Op::grid_sample_2d>(x.device(), out, contiguous(x), contiguous(grid), p);
  return out;
}

GridSample2dGrads grid_sample_2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& grid,
                                          const GridSampleParams& p, bool want_x, bool want_grid) {
  constexpr const char* kOp = "grid_sample backward";
  check(kOp, x, grid);
  const Shape out_shape{x.size(0), x.size(1), grid.size(1), grid.size(2)};
  KILN_CHECK(grad_out.defined() && grad_out.sizes() == out_shape && grad_out.dtype() == x.dtype() &&
                 grad_out.device() == x.device(),
             kOp, ": the output's gradient must be ", shape_str(out_shape), " ", x.dtype(), " on ", x.device());
  const Tensor g_out = contiguous(grad_out);
  const TensorOptions o = TensorOptions(x.dtype()).device(x.device());
  GridSample2dGrads g;
  if (want_x) g.x = zeros(x.sizes(), o);  // the kernels add into it
  if (want_grid) g.grid = empty(grid.sizes(), o);
  if (!want_x && !want_grid) return g;
  if (grad_out.numel() == 0) {  // nothing flows back: zero gradients (of whatever size the inputs have)
    if (want_grid) g.grid = zeros(grid.sizes(), o);
    return g;
  }
  call_kernel<Op::grid_sample_2d_backward>(x.device(), g.x, g.grid, g_out, contiguous(x),
                                           contiguous(grid), p);
  return g;
}

}  // namespace kiln::ops
