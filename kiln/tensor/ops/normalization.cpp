// Frontends of the fused layer and batch norms: checks that name the op, contiguous inputs in x's dtype,
// outputs on x's device, then that device's kernel.
#include "kiln/tensor/ops/normalization.h"

#include <limits>
#include <string>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

namespace {

DType stats_dtype(DType x) { return x == kFloat64 ? kFloat64 : kFloat32; }

// A per-feature tensor (dim 1 of x: D for layer norm, C for batch norm) on x's device, in `dtype` and
// contiguous; undefined stays undefined.
Tensor check_param(const char* op, const char* name, const Tensor& t, const Tensor& x, DType dtype) {
  if (!t.defined()) return t;
  KILN_CHECK(t.sizes() == Shape{x.size(1)}, op, ": ", name, " must be (", x.size(1), ") for input of shape ",
             shape_str(x.sizes()), ", got ", shape_str(t.sizes()));
  KILN_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device(), ", input on ", x.device());
  return contiguous(to(t, dtype));
}
Tensor check_param(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  return check_param(op, name, t, x, x.dtype());
}

void check_x(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined(), op, ": the input tensor is undefined");
  KILN_CHECK(x.dim() == 2, op, ": input must be (M, D), got ", shape_str(x.sizes()));
  KILN_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", x.dtype());
}

}  // namespace

LayerNormForward layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_x("layer_norm", x);
  KILN_CHECK(eps >= 0.0, "layer_norm: eps must be non-negative, got ", eps);
  Tensor w = check_param("layer_norm", "weight", weight, x);
  Tensor b = check_param("layer_norm", "bias", bias, x);
  const int64_t m = x.size(0);
  TensorOptions so = TensorOptions(stats_dtype(x.dtype())).device(x.device());
  LayerNormForward r{empty(x.sizes(), TensorOptions(x.dtype()).device(x.device())), empty({m}, so), empty({m}, so)};
  if (x.numel() == 0) {
    // D == 0: the mean of nothing is NaN, as in PyTorch; there is nothing to write in y.
    if (m > 0) {
      fill_(r.mean, std::numeric_limits<double>::quiet_NaN());
      fill_(r.rstd, std::numeric_limits<double>::quiet_NaN());
    }
    return r;
  }
  call_kernel<Op::layer_norm>(x.device(), r.y, r.mean, r.rstd, contiguous(x), w, b, eps);
  return r;
}

LayerNormBackward layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& weight, bool want_x, bool want_weight, bool want_bias) {
  const char* op = "layer_norm_backward";
  check_x(op, x);
  KILN_CHECK(grad_y.defined() && grad_y.sizes() == x.sizes() && grad_y.device() == x.device(), op,
             ": grad_y must have the input's shape ", shape_str(x.sizes()), " on ", x.device());
  const Shape rows{x.size(0)};
  const DType sd = stats_dtype(x.dtype());
  KILN_CHECK(mean.defined() && rstd.defined() && mean.sizes() == rows && rstd.sizes() == rows &&
                 mean.dtype() == sd && rstd.dtype() == sd && mean.device() == x.device() &&
                 rstd.device() == x.device(),
             op, ": mean and rstd must be the forward's (", x.size(0), ") ", sd, " tensors");
  Tensor w = check_param(op, "weight", weight, x);
  TensorOptions o = TensorOptions(x.dtype()).device(x.device());
  LayerNormBackward r;
  if (want_x) r.grad_x = empty(x.sizes(), o);
  if (want_weight) r.grad_weight = empty({x.size(1)}, o);
  if (want_bias) r.grad_bias = empty({x.size(1)}, o);
  if (!want_x && !want_weight && !want_bias) return r;
  if (x.numel() == 0) {  // no rows: the parameter gradients are empty sums
    if (want_weight) fill_(r.grad_weight, 0);
    if (want_bias) fill_(r.grad_bias, 0);
    return r;
  }
  call_kernel<Op::layer_norm_backward>(x.device(), r.grad_x, r.grad_weight, r.grad_bias,
                                       contiguous(to(grad_y, x.dtype())), contiguous(x), contiguous(mean),
                                       contiguous(rstd), w);
  return r;
}

namespace {

void check_channels_input(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined(), op, ": the input tensor is undefined");
  KILN_CHECK(x.dim() == 3, op, ": input must be (N, C, S), got ", shape_str(x.sizes()));
  KILN_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", x.dtype());
}

}  // namespace

BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, double eps, bool training) {
  const char* op = "batch_norm";
  check_channels_input(op, x);
  KILN_CHECK(eps >= 0.0, op, ": eps must be non-negative, got ", eps);
  const int64_t c = x.size(1), count = x.size(0) * x.size(2);
  const DType sd = stats_dtype(x.dtype());
  Tensor w = check_param(op, "weight", weight, x), b = check_param(op, "bias", bias, x);
  TensorOptions so = TensorOptions(sd).device(x.device());
  BatchNormForward r{empty(x.sizes(), TensorOptions(x.dtype()).device(x.device())), Tensor(), Tensor()};
  if (training) {
    KILN_CHECK(count > 1, op, ": training needs more than one value per channel, got input of shape ",
               shape_str(x.sizes()));
    r.mean = empty({c}, so);
    r.var = empty({c}, so);
  } else {
    KILN_CHECK(running_mean.defined() && running_var.defined(), op, ": eval mode needs running statistics");
    r.mean = check_param(op, "running_mean", running_mean, x, sd);
    r.var = check_param(op, "running_var", running_var, x, sd);
  }
  if (x.numel() == 0) return r;
  call_kernel<Op::batch_norm>(x.device(), r.y, r.mean, r.var, contiguous(x), w, b, eps, training);
  return r;
}

BatchNormBackward batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                      const Tensor& weight, double eps, bool training, bool want_x, bool want_weight,
                                      bool want_bias) {
  const char* op = "batch_norm_backward";
  check_channels_input(op, x);
  KILN_CHECK(grad_y.defined() && grad_y.sizes() == x.sizes() && grad_y.device() == x.device(), op,
             ": grad_y must have the input's shape ", shape_str(x.sizes()), " on ", x.device());
  const DType sd = stats_dtype(x.dtype());
  KILN_CHECK(mean.defined() && var.defined() && mean.dtype() == sd && var.dtype() == sd, op,
             ": mean and var must be the forward's (", x.size(1), ") ", sd, " tensors");
  Tensor m = check_param(op, "mean", mean, x, sd), v = check_param(op, "var", var, x, sd);
  Tensor w = check_param(op, "weight", weight, x);
  TensorOptions o = TensorOptions(x.dtype()).device(x.device());
  BatchNormBackward r;
  if (want_x) r.grad_x = empty(x.sizes(), o);
  if (want_weight) r.grad_weight = empty({x.size(1)}, o);
  if (want_bias) r.grad_bias = empty({x.size(1)}, o);
  if (!want_x && !want_weight && !want_bias) return r;
  if (x.numel() == 0) {  // no values: the parameter gradients are empty sums
    if (want_weight) fill_(r.grad_weight, 0);
    if (want_bias) fill_(r.grad_bias, 0);
    return r;
  }
  call_kernel<Op::batch_norm_backward>(x.device(), r.grad_x, r.grad_weight, r.grad_bias,
                                       contiguous(to(grad_y, x.dtype())), contiguous(x), m, v, w, eps, training);
  return r;
}

BatchNormStats batch_norm_stats(const Tensor& x) {
  check_channels_input("batch_norm_stats", x);
  TensorOptions so = TensorOptions(stats_dtype(x.dtype())).device(x.device());
  if (x.numel() == 0) return {zeros({x.size(1)}, so), zeros({x.size(1)}, so)};
  BatchNormStats r{empty({x.size(1)}, so), empty({x.size(1)}, so)};
  call_kernel<Op::batch_norm>(x.device(), Tensor(), r.mean, r.var, contiguous(x), Tensor(), Tensor(), 0.0, true);
  return r;
}

Tensor batch_norm_backward_input(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                 const Tensor& weight, const Tensor& sums, int64_t count, double eps) {
  const char* op = "batch_norm_backward_input";
  check_channels_input(op, x);
  KILN_CHECK(grad_y.defined() && grad_y.sizes() == x.sizes() && grad_y.device() == x.device(), op,
             ": grad_y must have the input's shape ", shape_str(x.sizes()), " on ", x.device());
  const DType sd = stats_dtype(x.dtype());
  const int64_t c = x.size(1);
  Tensor m = check_param(op, "mean", mean, x, sd), v = check_param(op, "var", var, x, sd);
  Tensor w = check_param(op, "weight", weight, x);
  KILN_CHECK(sums.defined() && sums.sizes() == (Shape{2, c}) && sums.device() == x.device(), op, ": sums must be (2, ",
             c, ") on ", x.device(), " ([sum g, sum g xhat] per channel), got ",
             sums.defined() ? shape_str(sums.sizes()) + " on " + sums.device().str() : std::string("an undefined tensor"));
  KILN_CHECK(count >= x.size(0) * x.size(2) && count > 0, op, ": the sums' count (", count,
             ") must be positive and cover this input's ", x.size(0) * x.size(2), " values per channel");
  Tensor grad_x = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  if (x.numel() == 0) return grad_x;
  call_kernel<Op::batch_norm_backward_input>(x.device(), grad_x, contiguous(to(grad_y, x.dtype())), contiguous(x), m,
                                             v, w, contiguous(to(sums, sd)), count, eps);
  return grad_x;
}

}  // namespace kiln::ops
