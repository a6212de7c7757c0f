// Helpers for the optim tests: float64 parameters, fixed per-step gradients, and a driver that steps a kiln
// optimizer beside a scalar float64 reference of the same update and compares them after every step.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "kiln/optim/optim.h"
#include "tensor/test_util.h"

namespace kiln::test {

// p: (2, 3) float64 leaf that requires grad.
inline Tensor make_param(const std::vector<double>& vals, IntArrayRef shape = {2, 3}) {
  Tensor p = tensor(vals, shape);
  p.requires_grad_();
  return p;
}

inline std::vector<double> initial_values() { return {0.5, -1.25, 2.0, 0.0, 3.5, -0.75}; }

// The gradient of step t (mixed signs and sizes; one element is 0 on some steps).
inline std::vector<double> fixed_grad(int t, size_t n = 6) {
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.9 * i + 1.7 * t) * (1.0 + 0.3 * i);
  if (t % 3 == 0) g[1] = 0.0;
  return g;
}

// One reference update of all elements: p and g are flat, the reference keeps its own state.
using ReferenceStep = std::function<void(std::vector<double>& p, const std::vector<double>& g)>;

// Steps `opt` (over `p`) and `ref` `steps` times with fixed_grad and compares p after each step.
inline void expect_matches_reference(optim::Optimizer& opt, const Tensor& p, ReferenceStep ref, int steps,
                                     const std::string& what, double rtol = 1e-11) {
  std::vector<double> want = values(p);
  for (int t = 0; t < steps; ++t) {
    std::vector<double> g = fixed_grad(t, want.size());
    p.set_grad(tensor(g, p.sizes()));
    opt.step();
    ref(want, g);
    expect_tensor_near(p, want, p.sizes(), rtol, 1e-14, what + ", step " + std::to_string(t + 1));
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace kiln::test
