// Differentiable CTC loss (kernels and math: kiln/tensor/ops/ctc.h). The forward saves log_alpha for the
// backward kernel, which runs beta and the gradient. The gradient is not built from differentiable ops, so
// backward under create_graph stops with an error rather than give a second derivative that misses terms.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/record.h"
#include "kiln/tensor/ops/ctc.h"

namespace kiln {

using autograd::OpNode;
using autograd::record;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

Tensor ctc_loss_nll(const Tensor& log_probs, const Tensor& targets, IntArrayRef input_lengths,
                    IntArrayRef target_lengths, int64_t blank, bool zero_infinity) {
  KILN_CHECK(log_probs.defined(), "ctc_loss: log_probs is undefined");
  // 16-bit inputs (autocast's, or a user's) run in float32; the loss comes back in their dtype.
  if (autocast::wants_float32({&log_probs})) {
    return ctc_loss_nll(autocast::float32(log_probs), targets, input_lengths, target_lengths, blank, zero_infinity);
  }
  if (log_probs.dtype() == kFloat16 || log_probs.dtype() == kBFloat16) {
    return ctc_loss_nll(log_probs.to(kFloat32), targets, input_lengths, target_lengths, blank, zero_infinity)
        .to(log_probs.dtype());
  }
  ops::CtcForward f = ops::ctc_loss_forward(log_probs, targets, input_lengths, target_lengths, blank);
  Tensor nll = zero_infinity ? ops::masked_fill(f.nll, ops::isinf(f.nll), 0.0) : f.nll;
  if (should_record(log_probs)) {
    // Without zero_infinity, f.nll is the output itself: kept as an output (its data, not its history), or the
    // output would own the node that owns it.
    SavedTensor saved_nll(f.nll, /*is_output=*/!zero_infinity);
    f.nll = Tensor();
    record("ctc_loss", nll, {log_probs},
           [slp = SavedTensor(log_probs, false), saved_nll, f, blank, zero_infinity](const Tensor& g,
                                                                                     const OpNode& n) {
             KILN_CHECK(!autograd::GradMode::is_enabled(), "ctc_loss: its gradient is not differentiable; backward "
                        "with create_graph through ctc_loss is not supported");
             ops::CtcForward forward = f;
             forward.nll = saved_nll.get(n);
             return TensorList{ops::ctc_loss_backward(g, slp.get(n), forward, blank, zero_infinity)};
           });
  }
  return nll;
}

}  // namespace kiln
