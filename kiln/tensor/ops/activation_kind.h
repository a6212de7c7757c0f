// The activations that have fused kernels for their value and for their gradient (ops::activation,
// ops::activation_backward): one op with a kind, rather than two ops each, so that adding one is a line in the
// list below and a pair of functors in elementwise_functors.h.
//
// Without them each was a composite of element-wise ops: elu was six passes forward and as many back, each
// with a temporary the size of the input; logsigmoid took 3.4 times LibTorch's time, softshrink 2.4, threshold
// (a comparison and a where) 1.06-1.38. torch.nn's other activations (softsign, tanhshrink) stay composites
// (activation.cpp in kiln/nn): a benchmark puts them at 0.7 to 0.9 times the time of LibTorch's kernels.
#pragma once

#include <cstdint>

namespace kiln {

// X(kind, forward functor, backward functor); the functors live in elementwise_functors.h and take the
// parameters below.
#define KILN_FORALL_ACTIVATIONS(X)                \
  X(elu, Elu, EluBackward)                        \
  X(hardtanh, Hardtanh, HardtanhBackward)         \
  X(hardsigmoid, Hardsigmoid, HardsigmoidBackward) \
  X(hardswish, Hardswish, HardswishBackward)      \
  X(mish, Mish, MishBackward)                     \
  X(softplus, Softplus, SoftplusBackward)         \
  X(logsigmoid, Logsigmoid, LogsigmoidBackward)   \
  X(softshrink, Softshrink, ShrinkBackward)       \
  X(hardshrink, Hardshrink, ShrinkBackward)       \
  X(threshold, Threshold, ThresholdBackward)

enum class Activation : uint8_t {
#define KILN_ACTIVATION_ENUM(kind, ...) kind,
  KILN_FORALL_ACTIVATIONS(KILN_ACTIVATION_ENUM)
#undef KILN_ACTIVATION_ENUM
};

// The parameters of a kind, by position:
//   elu:      a = alpha, b = scale, c = input_scale: scale x for x > 0, else scale alpha (e^(input_scale x) - 1)
//             (selu and celu are elus with particular parameters, as in PyTorch);
//   hardtanh: a = min_val, b = max_val;
//   softplus: a = beta, b = threshold: log(1 + e^(beta x)) / beta, x itself where beta x > threshold;
//   softshrink, hardshrink: a = lambd;
//   threshold: a = threshold, b = value: value where x <= threshold, else x (so NaN stays NaN, as in PyTorch);
//   the others take none.
struct ActivationParams {
  double a = 0, b = 0, c = 0;
};

inline const char* activation_name(Activation kind) {
  switch (kind) {
#define KILN_ACTIVATION_NAME(k, ...) \
  case Activation::k: return #k;
    KILN_FORALL_ACTIVATIONS(KILN_ACTIVATION_NAME)
#undef KILN_ACTIVATION_NAME
  }
  return "activation";
}

}  // namespace kiln
