// Frontends of resize_taps (resize_taps.h): checks, the output allocated, and the device's kernel.
#include "kiln/tensor/ops/resize_taps.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

namespace {

// Checks the taps against a tensor `t` of the op (x, or grad_out) and the sizes along dim; returns the wrapped dim.
int64_t check(const char* op, const Tensor& t, int64_t dim, const Tensor& idx, const Tensor& w, int64_t in,
              int64_t out) {
  KILN_CHECK(t.defined() && idx.defined() && w.defined(), op, ": an input is undefined");
  KILN_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64, op, ": expected float32 or float64, got ", t.dtype());
  const int64_t d = wrap_dim(dim, t.dim(), op);
  KILN_CHECK(idx.dim() == 2 && idx.dtype() == kInt64 && idx.size(0) >= 1 && idx.size(1) == out, op,
             ": the tap positions must be (taps, ", out, ") int64, got ", shape_str(idx.sizes()), " ", idx.dtype());
  KILN_CHECK(w.sizes() == idx.sizes() && w.dtype() == t.dtype(), op, ": the tap weights must be ",
             shape_str(idx.sizes()), " ", t.dtype(), ", got ", shape_str(w.sizes()), " ", w.dtype());
  KILN_CHECK(idx.device() == t.device() && w.device() == t.device(), op, ": the taps must be on ", t.device(),
             ", got ", idx.device(), " and ", w.device());
  KILN_CHECK(in >= 1, op, ": the input must have positions along dim ", d, ", got ", in);
  KILN_CHECK(!any(logical_or(lt(idx, 0), ge(idx, in))).item<bool>(), op, ": a tap position is outside [0, ", in,
             ") (the input's size along dim ", d, ")");
  return d;
}

}  // namespace

Tensor resize_taps(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& w) {
  KILN_CHECK(x.defined() && idx.defined(), "resize_taps: an input is undefined");
  KILN_CHECK(x.dim() >= 1, "resize_taps: expected a tensor of at least one dim, got a 0-dim one");
  const int64_t d = wrap_dim(dim, x.dim(), "resize_taps");
  const int64_t out_size = idx.dim() == 2 ? idx.size(1) : -1;
  check("resize_taps", x, d, idx, w, x.size(d), out_size);
  Shape shape = x.sizes();
  shape[static_cast<size_t>(d)] = out_size;
  Tensor out = empty(shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() == 0) return out;
  call_kernel<Op::resize_taps>(x.device(), out, contiguous(x), d, contiguous(idx), contiguous(w));
  return out;
}

Tensor resize_taps_backward(const Tensor& grad_out, int64_t dim, const Tensor& idx, const Tensor& w, int64_t in) {
  KILN_CHECK(grad_out.defined(), "resize_taps backward: the output's gradient is undefined");
  KILN_CHECK(grad_out.dim() >= 1, "resize_taps backward: expected a gradient of at least one dim, got a 0-dim one");
  const int64_t d = wrap_dim(dim, grad_out.dim(), "resize_taps backward");
  check("resize_taps backward", grad_out, d, idx, w, in, grad_out.size(d));
  Shape shape = grad_out.sizes();
  shape[static_cast<size_t>(d)] = in;
  Tensor grad_x = empty(shape, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  if (grad_x.numel() == 0) return grad_x;
  if (grad_out.numel() == 0) return zeros(shape, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  call_kernel<Op::resize_taps_backward>(grad_out.device(), grad_x, contiguous(grad_out), d, contiguous(idx),
                                        contiguous(w));
  return grad_x;
}

}  // namespace kiln::ops
