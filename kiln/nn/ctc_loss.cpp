// functional::ctc_loss: shapes, the unbatched form and the reduction around the fused op
// (kiln::ctc_loss_nll; the math is in kiln/tensor/ops/ctc.h).
#include <algorithm>
#include <vector>

#include "kiln/nn/functional.h"

namespace kiln::nn::functional {

namespace {

// Lengths given as a tensor: integers, one per batch element (0-dim or one element when unbatched).
std::vector<int64_t> host_lengths(const Tensor& lengths, const char* which) {
  KILN_CHECK(lengths.defined(), "ctc_loss: ", which, " is undefined");
  KILN_CHECK(lengths.dtype() == kInt64 || lengths.dtype() == kInt32, "ctc_loss: ", which,
             " must be an int64 or int32 tensor, got ", lengths.dtype());
  KILN_CHECK(lengths.dim() <= 1, "ctc_loss: ", which, " must be 1-D (N) or 0-dim, got shape ",
             shape_str(lengths.sizes()));
  return lengths.to(Device::cpu(), kInt64).contiguous().to_vector<int64_t>();
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, IntArrayRef input_lengths, IntArrayRef target_lengths,
                const CTCLossOptions& options) {
  KILN_CHECK(log_probs.defined() && targets.defined(), "ctc_loss: log_probs or targets is undefined");
  const bool single = log_probs.dim() == 2;
  KILN_CHECK(single || log_probs.dim() == 3, "ctc_loss: log_probs must be (T, N, C) or unbatched (T, C), got shape ",
             shape_str(log_probs.sizes()));
  KILN_CHECK(!single || targets.dim() == 1, "ctc_loss: unbatched log_probs (T, C) take 1-D targets (S), got shape ",
             shape_str(targets.sizes()));
  const Tensor nll = ctc_loss_nll(single ? log_probs.unsqueeze(1) : log_probs, single ? targets.unsqueeze(0) : targets,
                                  input_lengths, target_lengths, options.blank, options.zero_infinity);
  switch (options.reduction) {
    case Reduction::None:
      return single ? nll.squeeze(0) : nll;
    case Reduction::Sum:
      return nll.sum();
    case Reduction::Mean:
      break;
  }
  std::vector<double> per_label(target_lengths.size());
  for (size_t n = 0; n < per_label.size(); ++n)
    per_label[n] = 1.0 / static_cast<double>(std::max<int64_t>(1, target_lengths[n]));
  const Tensor scale = tensor(per_label, {static_cast<int64_t>(per_label.size())},
                              TensorOptions(nll.dtype()).device(nll.device()));
  return (nll * scale).mean();
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CTCLossOptions& options) {
  return ctc_loss(log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                  host_lengths(target_lengths, "target_lengths"), options);
}

}  // namespace kiln::nn::functional
