// gradcheck: compares the gradients backward computes for a function with central differences.
//
// For every output element it runs backward with a one-hot gradient (one row of the analytic Jacobian), and
// for every element of every input that requires grad it evaluates the function at x + eps and x - eps (one
// column of the numerical Jacobian). Entries must agree within atol + rtol * |numeric|. This is the test to
// write for a new op, a custom backward built with record(...), or a CUDA kernel's backward:
//
//   Tensor a = randn({3, 4}, kFloat64).requires_grad_();
//   Tensor b = randn({4}, kFloat64).requires_grad_();
//   autograd::gradcheck([](const std::vector<Tensor>& in) { return my_op(in[0], in[1]); }, {a, b});
//
// Inputs live on the CPU (gradcheck perturbs them there); to check a GPU kernel, fn moves them to the device
// and may return its outputs from there.
//
// On a mismatch it throws kiln::Error whose message names the worst entry: which input element, which output
// element, the analytic and numerical values and their error. With `raise = false` it returns the same report
// in the result instead.
//
// NOTE: inputs that require grad must be float64: with float32 the rounding error of f(x + eps) - f(x - eps)
// divided by 2 * eps swamps the derivative. Keep inputs away from points where the function is not
// differentiable (relu at 0, max with ties, clamp at its bounds): there the two sides disagree by design.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/tensor/tensor.h"

namespace kiln::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // the step of the central differences
  double atol = 1e-5;  // an entry passes when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  bool raise = true;   // throw kiln::Error with the report on a mismatch (else only return it)
};

struct GradcheckResult {
  bool ok = true;
  // A few readable lines: on failure the worst entry and how many entries failed; on success the largest error.
  std::string report;
  // The worst Jacobian entry: d(outputs[output] at output_index) / d(inputs[input] at input_index), the one
  // whose error is largest compared with its tolerance. Meaningless when no entry was compared.
  size_t input = 0;
  Shape input_index;
  size_t output = 0;
  Shape output_index;
  double analytic = 0.0;
  double numeric = 0.0;
  double abs_err = 0.0;
  int64_t entries = 0;     // Jacobian entries compared
  int64_t mismatches = 0;  // entries outside the tolerance
};

using GradcheckFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using GradcheckSingleFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks fn's gradients with respect to the inputs that require grad (the others, like index tensors, are
// passed through untouched). fn must compute its outputs from `inputs` alone and leave them unchanged; its
// floating outputs must be float64, and outputs of other dtypes (argmax indices, masks) are not checked.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});
GradcheckResult gradcheck(const GradcheckSingleFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace kiln::autograd
