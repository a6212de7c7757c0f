// Frontends of the fused cross-entropy: shape, dtype and device checks that name the op, contiguous inputs in
// the logits' dtype, outputs allocated on the logits' device, then that device's kernel. The range of the
// target values is the kernels' to check (a GPU kernel checks them where it reads them, without a sync).
#include "kiln/tensor/ops/cross_entropy.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

namespace {

DType stats_dtype(DType logits) { return logits == kFloat64 ? kFloat64 : kFloat32; }

// Checks logits (N, C), target (N) and weight (C) for `op`; returns weight in the logits' dtype, contiguous.
Tensor check_inputs(const char* op, const Tensor& logits, const Tensor& target, const Tensor& weight,
                    const CrossEntropyParams& p) {
  KILN_CHECK(logits.defined() && target.defined(), op, ": an input tensor is undefined");
  KILN_CHECK(logits.dim() == 2, op, ": logits must be (N, C), got ", shape_str(logits.sizes()));
  KILN_CHECK(is_floating(logits.dtype()), op, ": logits must be floating point, got ", logits.dtype());
  KILN_CHECK(target.dtype() == kInt64, op, ": class-index targets must be int64, got ", target.dtype());
  KILN_CHECK(target.sizes() == Shape{logits.size(0)}, op, ": logits of shape ", shape_str(logits.sizes()),
             " need a target of shape (", logits.size(0), "), got ", shape_str(target.sizes()));
  KILN_CHECK(target.device() == logits.device(), op, ": target is on ", target.device(), ", logits on ",
             logits.device());
  KILN_CHECK(p.label_smoothing >= 0.0 && p.label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
             p.label_smoothing);
  if (!weight.defined()) return weight;
  KILN_CHECK(weight.sizes() == Shape{logits.size(1)}, op, ": weight must be (", logits.size(1), "), got ",
             shape_str(weight.sizes()));
  KILN_CHECK(weight.device() == logits.device(), op, ": weight is on ", weight.device(), ", logits on ",
             logits.device());
  return contiguous(to(weight, logits.dtype()));
}

}  // namespace

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                          const CrossEntropyParams& p) {
  Tensor w = check_inputs("cross_entropy", logits, target, weight, p);
  const int64_t n = logits.size(0);
  TensorOptions o = TensorOptions(logits.dtype()).device(logits.device());
  CrossEntropyForward r{empty({n}, o), empty({n}, o),
                        empty({n, 2}, TensorOptions(stats_dtype(logits.dtype())).device(logits.device()))};
  if (n == 0) return r;
  call_kernel<Op::cross_entropy>(logits.device(), r.loss, r.row_weight, r.stats, contiguous(logits), contiguous(target),
                                 w, p);
  return r;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& stats, const Tensor& target,
                              const Tensor& weight, const CrossEntropyParams& p) {
  Tensor w = check_inputs("cross_entropy_backward", logits, target, weight, p);
  const int64_t n = logits.size(0);
  KILN_CHECK(grad_loss.defined() && grad_loss.sizes() == Shape{n} && grad_loss.device() == logits.device(),
             "cross_entropy_backward: grad_loss must be (", n, ") on ", logits.device(), ", got ",
             grad_loss.defined() ? shape_str(grad_loss.sizes()) : std::string("an undefined tensor"));
  KILN_CHECK(stats.defined() && stats.sizes() == (Shape{n, 2}) && stats.dtype() == stats_dtype(logits.dtype()) &&
                 stats.device() == logits.device(),
             "cross_entropy_backward: stats must be the forward's (", n, ", 2) ", stats_dtype(logits.dtype()),
             " tensor");
  Tensor grad = empty(logits.sizes(), TensorOptions(logits.dtype()).device(logits.device()));
  if (grad.numel() == 0) return grad;
  call_kernel<Op::cross_entropy_backward>(logits.device(), grad, contiguous(to(grad_loss, logits.dtype())),
                                          contiguous(logits), contiguous(stats), contiguous(target), w, p);
  return grad;
}

}  // namespace kiln::ops
