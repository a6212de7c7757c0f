// The fused optimizer updates: SGD's and Adam's (AdamW's) step over a whole list of parameters as one kernel call
// per device and dtype, where the optimizers would otherwise run a chain of whole-tensor ops per parameter
// (Adam's is about ten passes over memory, each writing a temporary, and on the GPU ten launches per parameter).
// The CPU runs one parallel loop per parameter; CUDA runs one multi-tensor kernel over many parameters at a
// time. Both apply the per-element math of optim_functors.h, so they compute what the chain computes.
//
// kiln/optim's SGD and Adam call these for the parameters that qualify (fused_step_applies) and run the chain
// for the rest: 16-bit floats (which the chain rounds after every op), strided tensors, amsgrad.
#pragma once

#include <initializer_list>
#include <span>

#include "kiln/tensor/ops/op_list.h"
#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// Whether p, with `others` (its gradient and state), can take a fused update: float32 or float64, all
// contiguous, of p's dtype, device and sizes, on a device that has the fused kernels.
bool fused_step_applies(const Tensor& p, std::initializer_list<const Tensor*> others);

// SGD's step on every parameter of `params` with its gradient (and momentum buffer; bufs is empty when
// s.momentum == 0), in place; see SgdStepParams (op_list.h). Checks the lists (one length, one device and
// dtype, contiguous, matching sizes) and bumps the versions of what it writes, as the in-place ops of the
// chain do, so autograd still refuses a graph that saved a parameter the step changed.
void fused_sgd_step_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                     const SgdStepParams& s);

// Adam's (or, decoupled, AdamW's) step without amsgrad, in place; steps[i] counts parameter i's updates
// including this one. Checked and versioned as fused_sgd_step_.
void fused_adam_step_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                      std::span<const Tensor> exp_avg_sqs, std::span<const double> steps, const AdamStepParams& s);

}  // namespace kiln::ops
