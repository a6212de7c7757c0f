// Frontends of the CTC loss: every check on the host, where the lengths already are and the targets are copied
// (as PyTorch's, which takes the lengths as host integers), so that a bad label or length names its position
// before any kernel runs; then the targets padded to (N, S), the lengths as tensors, all on log_probs' device,
// and that device's kernel.
#include "kiln/tensor/ops/ctc.h"

#include <algorithm>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

namespace {

Tensor lengths_tensor(IntArrayRef lengths, Device device) {
  return to(tensor(lengths.vec(), {static_cast<int64_t>(lengths.size())}, kInt64), device);
}

}  // namespace

CtcForward ctc_loss_forward(const Tensor& log_probs, const Tensor& targets, IntArrayRef input_lengths,
                            IntArrayRef target_lengths, int64_t blank) {
  constexpr const char* kOp = "ctc_loss";
  KILN_CHECK(log_probs.defined() && targets.defined(), kOp, ": an input tensor is undefined");
  KILN_CHECK(log_probs.dim() == 3, kOp, ": log_probs must be (T, N, C), got shape ", shape_str(log_probs.sizes()));
  KILN_CHECK(log_probs.dtype() == kFloat32 || log_probs.dtype() == kFloat64, kOp,
             ": log_probs must be float32 or float64, got ", log_probs.dtype());
  const int64_t T = log_probs.size(0), N = log_probs.size(1), C = log_probs.size(2);
  KILN_CHECK(static_cast<int64_t>(input_lengths.size()) == N && static_cast<int64_t>(target_lengths.size()) == N,
             kOp, ": log_probs of shape ", shape_str(log_probs.sizes()), " need ", N,
             " input and target lengths, got ", input_lengths.size(), " and ", target_lengths.size());
  KILN_CHECK(blank >= 0 && blank < C, kOp, ": blank must be a class in [0, ", C, "), got ", blank);
  KILN_CHECK(targets.dtype() == kInt64 || targets.dtype() == kInt32, kOp,
             ": targets must be int64 or int32, got ", targets.dtype());
  KILN_CHECK(targets.dim() == 1 || (targets.dim() == 2 && targets.size(0) == N), kOp,
             ": targets must be (N, S) = (", N, ", S) or 1-D (the labels one after another), got shape ",
             shape_str(targets.sizes()));
  int64_t total = 0, longest = 0;
  for (int64_t n = 0; n < N; ++n) {
    KILN_CHECK(input_lengths[n] >= 0 && input_lengths[n] <= T, kOp, ": input_lengths[", n, "] = ", input_lengths[n],
               " is outside [0, ", T, "] (T, log_probs' first dim)");
    KILN_CHECK(target_lengths[n] >= 0, kOp, ": target_lengths[", n, "] = ", target_lengths[n], " is negative");
    KILN_CHECK(targets.dim() == 1 || target_lengths[n] <= targets.size(1), kOp, ": target_lengths[", n, "] = ",
               target_lengths[n], " is longer than targets' rows (", targets.size(1), ")");
    total += target_lengths[n];
    longest = std::max(longest, target_lengths[n]);
  }
  KILN_CHECK(targets.dim() == 2 || targets.numel() == total, kOp, ": 1-D targets must hold the ", total,
             " labels that target_lengths add up to, got ", targets.numel());

  // The labels on the host, checked, then padded to (N, S) with blanks.
  const Tensor host = contiguous(to(targets, Device::cpu(), kInt64));
  const int64_t* t = host.data_ptr<int64_t>();
  const int64_t S = targets.dim() == 2 ? targets.size(1) : longest;
  std::vector<int64_t> padded(static_cast<size_t>(N * S), blank);
  for (int64_t n = 0, offset = 0; n < N; ++n) {
    const int64_t* row = targets.dim() == 2 ? t + n * S : t + offset;
    for (int64_t j = 0; j < target_lengths[n]; ++j) {
      KILN_CHECK(row[j] >= 0 && row[j] < C && row[j] != blank, kOp, ": target ", row[j], " (row ", n, ", label ", j,
                 ") must be a class in [0, ", C, ") other than blank (", blank, ")");
      padded[n * S + j] = row[j];
    }
    offset += target_lengths[n];
  }

  const Device device = log_probs.device();
  const TensorOptions o = TensorOptions(log_probs.dtype()).device(device);
  CtcForward f;
  f.nll = empty({N}, o);
  f.log_alpha = empty({N, T, 2 * S + 1}, o);
  f.targets = to(tensor(padded, {N, S}, kInt64), device);
  f.input_lengths = lengths_tensor(input_lengths, device);
  f.target_lengths = lengths_tensor(target_lengths, device);
  if (N == 0) return f;
  call_kernel<Op::ctc_loss>(device, f.nll, f.log_alpha, contiguous(log_probs), f.targets, f.input_lengths,
                            f.target_lengths, blank);
  return f;
}

Tensor ctc_loss_backward(const Tensor& grad_nll, const Tensor& log_probs, const CtcForward& f, int64_t blank,
                         bool zero_infinity) {
  const int64_t N = log_probs.size(1);
  KILN_CHECK(grad_nll.defined() && grad_nll.sizes() == Shape{N} && grad_nll.device() == log_probs.device(),
             "ctc_loss_backward: grad_nll must be (", N, ") on ", log_probs.device(), ", got ",
             grad_nll.defined() ? shape_str(grad_nll.sizes()) : std::string("an undefined tensor"));
  KILN_CHECK(f.log_alpha.defined() && f.log_alpha.size(0) == N && f.log_alpha.size(1) == log_probs.size(0),
             "ctc_loss_backward: expected the forward's result for log_probs of shape ",
             shape_str(log_probs.sizes()));
  Tensor grad = empty(log_probs.sizes(), TensorOptions(log_probs.dtype()).device(log_probs.device()));
  if (grad.numel() == 0) return grad;
  call_kernel<Op::ctc_loss_backward>(log_probs.device(), grad, contiguous(to(grad_nll, log_probs.dtype())),
                                     contiguous(log_probs), f.targets, f.input_lengths, f.target_lengths, f.nll,
                                     f.log_alpha, blank, zero_infinity);
  return grad;
}

}  // namespace kiln::ops
