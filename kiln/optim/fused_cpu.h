// Fused CPU updates for SGD and Adam/AdamW: one pass over a parameter, its gradient and its state, in place of
// the chain of whole-tensor ops the optimizers otherwise run (Adam's is about ten passes, each writing a
// temporary). Each element goes through the same float operations, in the same order, as in that chain. The
// bits can still differ in the last place: the compiler may fuse a multiply and an add (C++ allows it, and
// kiln's kernels build with FMA) where the chain has them in two kernels. tests/optim/optimizers_test.cpp
// holds the two together. Used for float32 and float64 tensors on the CPU that are all contiguous; anything
// else (other devices, 16-bit floats, which the chain rounds after every op, strided tensors) takes the chain.
#pragma once

#include <initializer_list>

#include "kiln/tensor/tensor.h"

namespace kiln::optim::fused {

// Whether p and the other tensors (its gradient, its state) can take the fused loop.
bool applies(const Tensor& p, std::initializer_list<const Tensor*> others);

struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
  bool first = false;  // the momentum buffer is filled (with the gradient), not updated
};
// p -= lr * d, with d the gradient after weight decay, momentum and nesterov as SGD::step defines them.
// buf (the momentum buffer) is read only when momentum != 0.
void sgd(const Tensor& p, const Tensor& grad, const Tensor& buf, const SgdStep& s);

struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = false, maximize = false;
  double step = 1;  // this update's count, from 1
};
// Adam's (or, decoupled, AdamW's) update of p, exp_avg and exp_avg_sq, without amsgrad.
void adam(const Tensor& p, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamStep& s);

}  // namespace kiln::optim::fused
