// Deterministic algorithms: PyTorch's torch.use_deterministic_algorithms, and what the Trainer's
// `deterministic` option turns on for a run.
//
// kiln's CPU kernels give the same bits on every run for a fixed thread count, whatever this says. Some CUDA
// kernels do not: they add floating-point numbers with atomics, in whatever order the threads reach them, so
// sums of several terms may differ in the last bits from run to run. While deterministic algorithms are on:
//   - index_add (and so the gradient of index_select and embedding), scatter_add (the gradient of gather, and so
//     of nll_loss and adaptive max pooling) and max_pool2d's gradient run kernels that add each element's terms
//     in the CPU's order: the same bits on every run, and the CPU's bits;
//   - convolution takes only cuDNN algorithms that cuDNN reports as deterministic;
//   - grid_sample's gradient for its input, which has no such kernel, stops with an error naming the op rather
//     than silently vary (PyTorch does the same).
// Integer atomics are exact in any order, so integer index_add and scatter_add run as usual.
// The setting is one for the whole process (every thread), as in PyTorch.
#pragma once

#include "kiln/tensor/device.h"

namespace kiln {

void use_deterministic_algorithms(bool on);
bool are_deterministic_algorithms_enabled();

// Sets the mode for a scope and puts back what it was.
class DeterministicAlgorithmsGuard {
 public:
  explicit DeterministicAlgorithmsGuard(bool on) : prev_(are_deterministic_algorithms_enabled()) {
    use_deterministic_algorithms(on);
  }
  ~DeterministicAlgorithmsGuard() { use_deterministic_algorithms(prev_); }
  DeterministicAlgorithmsGuard(const DeterministicAlgorithmsGuard&) = delete;
  DeterministicAlgorithmsGuard& operator=(const DeterministicAlgorithmsGuard&) = delete;

 private:
  bool prev_;
};

namespace detail {
// For a kernel whose result can vary from run to run: while deterministic algorithms are on, an error that says
// `op` on `device` has no deterministic kernel and what to do; otherwise nothing.
void alert_not_deterministic(const char* op, Device device);
}  // namespace detail

}  // namespace kiln
