// Connectionist temporal classification (Graves et al., 2006) as two ops: the negative log-likelihood of each
// target sequence under per-frame log-probabilities, and its gradient. No autograd here: the differentiable
// version is kiln::ctc_loss_nll (kiln/autograd/functions.h), which nn::functional::ctc_loss uses.
//
// For batch element n with T_n frames of log-probabilities lp[t][c] and labels l_1..l_L (none of them blank),
// the extended sequence l' = (blank, l_1, blank, l_2, ..., l_L, blank) has 2L + 1 positions, and an alignment
// is a path through them, one position per frame, that starts at position 0 or 1, ends at 2L or 2L - 1, and
// each frame stays, moves one on, or skips a blank between two different labels (s - 2 -> s when l'_s is not
// blank and l'_s != l'_{s-2}). In log space:
//   alpha_0(s) = lp[0][l'_s] for s < 2, else -inf
//   alpha_t(s) = lp[t][l'_s] + logsumexp(alpha_{t-1}(s), alpha_{t-1}(s - 1), [alpha_{t-1}(s - 2) if a skip])
//   nll        = -logsumexp(alpha_{T_n-1}(2L), alpha_{T_n-1}(2L - 1))     (+inf when no alignment fits)
// and beta, the same recursion run from the last frame backwards, also counting the frame's own lp:
//   beta_{T_n-1}(s) = lp[T_n-1][l'_s] for s > 2L - 2, else -inf
//   beta_t(s)       = lp[t][l'_s] + logsumexp(beta_{t+1}(s), beta_{t+1}(s + 1), [beta_{t+1}(s + 2) if a skip])
// so that alpha_t(s) + beta_t(s) - lp[t][l'_s] is the log-probability of the alignments through (t, s). With
// lcab(t, c) = logsumexp over the positions s whose label is c of alpha_t(s) + beta_t(s):
//   d nll / d lp[t][c] = -exp(lcab(t, c) + nll - lp[t][c])   for t < T_n, and 0 for t >= T_n.
// NOTE: this is the gradient with respect to log_probs themselves. PyTorch's ctc_loss returns
// exp(lp) - exp(lcab + nll - lp), which is what the logits receive once it passes through a log_softmax (the
// added exp(lp) sums to one over c, and log_softmax's backward removes it), but is not the gradient of the
// loss when log_probs are used directly. Through a log_softmax, both give the same gradient.
//
// An empty target (L = 0) has the one position 0; an input of no frames has nll 0 for an empty target and
// +inf otherwise. An infinite nll has NaN gradients, or zeros with zero_infinity.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/tensor/macros.h"
#include "kiln/tensor/shape.h"
#include "kiln/tensor/tensor.h"

namespace kiln::ctc {

// The label of position s of the extended sequence of `labels`.
KILN_INLINE int64_t label_at(const int64_t* labels, int64_t s, int64_t blank) {
  return s % 2 == 0 ? blank : labels[s / 2];
}

// Whether a path may reach position s from s - 2, skipping the blank between two different labels.
KILN_INLINE bool can_skip(const int64_t* labels, int64_t s) {
  return s % 2 == 1 && s >= 3 && labels[s / 2] != labels[s / 2 - 1];
}

// log(e^a + e^b + e^c), -inf when all three are -inf (pass -inf for a term that is absent).
template <typename M>
KILN_INLINE M log_add3(M a, M b, M c) {
  M m = a > b ? a : b;
  m = m > c ? m : c;
  if (m == -std::numeric_limits<M>::infinity()) return m;
  return m + std::log(std::exp(a - m) + std::exp(b - m) + std::exp(c - m));
}

// log(e^a + e^b), -inf when both are -inf.
template <typename M>
KILN_INLINE M log_add(M a, M b) {
  M m = a > b ? a : b;
  if (m == -std::numeric_limits<M>::infinity()) return m;
  return m + std::log1p(std::exp((a > b ? b : a) - m));
}

}  // namespace kiln::ctc

namespace kiln::ops {

struct CtcForward {
  Tensor nll;        // (N), log_probs' dtype
  Tensor log_alpha;  // (N, T, 2S + 1)
  // The inputs as the kernels take them, on log_probs' device, for the backward: targets (N, S) padded, and the
  // lengths (N), all int64.
  Tensor targets, input_lengths, target_lengths;
};

// log_probs: (T, N, C) float32 or float64 (16-bit inputs: the caller converts); targets: (N, S) padded, or 1-D
// with every row's labels one after another (the sum of target_lengths entries), int64 or int32, on any device;
// input_lengths and target_lengths: N each. Checks everything, naming the position and the expected range.
CtcForward ctc_loss_forward(const Tensor& log_probs, const Tensor& targets, IntArrayRef input_lengths,
                            IntArrayRef target_lengths, int64_t blank);
// grad_nll: (N) -> grad_log_probs (T, N, C), from the forward's log_probs and result.
Tensor ctc_loss_backward(const Tensor& grad_nll, const Tensor& log_probs, const CtcForward& f, int64_t blank,
                         bool zero_infinity);

}  // namespace kiln::ops
