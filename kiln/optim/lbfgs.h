// L-BFGS, as torch.optim.LBFGS: a quasi-Newton method that keeps the last history_size steps s and gradient
// changes y, and turns the gradient into a direction with the two-loop recursion (an approximation of the
// inverse Hessian applied to it, scaled by y.s / y.y). It needs the loss more than once per step, so step()
// takes a closure that clears the gradients, computes the loss, runs backward and returns the loss:
//
//   optim::LBFGS opt(model->parameters(), {.line_search_fn = "strong_wolfe"});
//   for (int i = 0; i < 10; ++i) {
//     opt.step([&] {
//       opt.zero_grad();
//       Tensor loss = nn::F::mse_loss(model(x), y);
//       loss.backward();
//       return loss;
//     });
//   }
//
// One step() runs up to max_iter iterations and max_eval closure calls, stopping early when the largest
// gradient element falls to tolerance_grad, or a step or the loss change falls below tolerance_change. Without
// a line search each iteration moves lr along the direction (the first one lr * min(1, 1 / |g|_1)); with
// "strong_wolfe" the step length satisfies the strong Wolfe conditions (c1 = 1e-4, c2 = 0.9), found by
// bracketing and cubic interpolation, at most 25 evaluations per iteration.
//
// Its state is one set for all the parameters, flat vectors over all of them: it lives under the first
// parameter (state.0.d, state.0.old_dirs.3, ...), and a state_dict resumes a run exactly. One parameter group
// only, as in PyTorch; it cannot run on a parameter server (whose servers step without a closure), nor under
// the Trainer's automatic optimization (use manual optimization and call step with a closure).
#pragma once

#include <functional>
#include <string>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct LBFGSOptions {
  double lr = 1;
  int64_t max_iter = 20;          // iterations per step()
  int64_t max_eval = 0;           // closure calls per step(); 0: max_iter * 5 / 4
  double tolerance_grad = 1e-7;   // stop when max |g| <= this
  double tolerance_change = 1e-9; // stop when max |step| or |loss change| < this
  int64_t history_size = 100;     // (s, y) pairs kept
  std::string line_search_fn;     // "" (fixed step lr) or "strong_wolfe"
};

class LBFGS : public Optimizer {
 public:
  using Closure = std::function<Tensor()>;

  explicit LBFGS(std::vector<Tensor> params, LBFGSOptions options = {});
  // Runs the iterations described above; returns the loss of the closure's first call (before any update).
  Tensor step(const Closure& closure);
  // An error: L-BFGS needs a closure.
  void step() override;
  const char* name() const override { return "LBFGS"; }

  static std::map<std::string, double> to_map(const LBFGSOptions& o);
  static LBFGSOptions from_map(const std::map<std::string, double>& m);

 protected:
  void validate_options(const std::map<std::string, double>& options) const override;
  // Its state tensors are flat vectors over every parameter.
  Shape state_shape(const std::string& key, const Tensor& param) const override;

 private:
  int64_t numel_ = 0;  // of all the parameters together
};

}  // namespace kiln::optim
