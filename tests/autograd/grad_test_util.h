// Helpers for gradient tests: seeded float64 inputs that require grad (anywhere, away from zero, positive),
// index tensors, a table row type for gradcheck cases whose name becomes the test's name, and the
// second-order twin of a case.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "error_of.h"
#include "kiln/autograd/engine.h"
#include "kiln/autograd/functions.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/autograd/grad_mode.h"
#include "kiln/tensor/ops.h"

namespace kiln::test {

using autograd::GradcheckFn;
using autograd::GradcheckOptions;
using TensorVec = std::vector<Tensor>;

// The generator the input makers draw from; each gradcheck case reseeds it from its name.
inline std::mt19937& grad_rng() {
  static std::mt19937 rng;
  return rng;
}

// FNV-1a of the name, not std::hash: the same inputs under every standard library.
inline void seed_from(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  grad_rng().seed(h);
}

// A contiguous float64 tensor holding `vals` (row-major); shape {} makes a 0-dim tensor.
inline Tensor f64(const std::vector<double>& vals, IntArrayRef shape) {
  Tensor t = empty(shape, kFloat64);
  EXPECT_EQ(static_cast<size_t>(t.numel()), vals.size());
  double* p = t.data_ptr<double>();
  for (size_t i = 0; i < vals.size(); ++i) p[i] = vals[i];
  return t;
}

// A float64 leaf that requires grad, uniform in [lo, hi).
inline Tensor leaf(IntArrayRef shape, double lo = -2.0, double hi = 2.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = u(grad_rng());
  Tensor t = f64(v, shape);
  t.requires_grad_();
  return t;
}

// Like leaf, with |x| in [lo, hi) and a random sign: for ops with a kink or a pole at 0 (abs, relu, 1/x).
inline Tensor leaf_away(IntArrayRef shape, double lo = 0.3, double hi = 2.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = sign(grad_rng()) ? u(grad_rng()) : -u(grad_rng());
  Tensor t = f64(v, shape);
  t.requires_grad_();
  return t;
}

// A leaf with the given values (for inputs that must avoid specific points).
inline Tensor leaf_of(const std::vector<double>& vals, IntArrayRef shape) {
  Tensor t = f64(vals, shape);
  t.requires_grad_();
  return t;
}

// An empty shape makes a 0-dim tensor (tensor() alone would read it as 1-D).
inline Tensor int64s(const std::vector<int64_t>& vals, IntArrayRef shape) {
  return tensor(vals, shape, kInt64).reshape(shape);
}

inline Tensor bools(const std::vector<int64_t>& vals, IntArrayRef shape) {
  return ops::ne(int64s(vals, shape), Scalar(int64_t{0}));
}

// The op tests' tolerances: float64 central differences agree with correct rules to ~1e-9 here, so these
// are 100 times tighter than gradcheck's defaults and still leave a wide margin; a wrong constant in a rule
// (0.0447 for 0.044715) fails them.
inline constexpr GradcheckOptions kTight{.atol = 1e-7, .rtol = 1e-5};

using Maker = std::function<TensorVec()>;

// Where an op's inputs are drawn from.
enum class Domain { Any, AwayFromZero, Positive, AboveMinusOne, InsideUnit };

inline Tensor sample(Domain d, IntArrayRef shape) {
  switch (d) {
    case Domain::AwayFromZero: return leaf_away(shape);
    case Domain::Positive: return leaf(shape, 0.3, 2.0);
    case Domain::AboveMinusOne: return leaf(shape, -0.7, 2.0);
    case Domain::InsideUnit: return leaf(shape, -0.9, 0.9);
    default: return leaf(shape);
  }
}

inline Maker leaves(std::vector<Shape> shapes, Domain d = Domain::Any) {
  return [shapes, d] {
    TensorVec v;
    for (const Shape& s : shapes) v.push_back(sample(d, s));
    return v;
  };
}

// A constant that depends on nothing random: weights for sums whose plain gradient would be trivial.
inline Tensor ramp(IntArrayRef shape) { return linspace(-1.0, 1.5, shape_numel(shape), kFloat64).view(shape); }

// One gradcheck case: `inputs` is called (after seeding from the name) when the test runs, not when the
// table is built, so no tensor is made during static initialization.
struct GradCase {
  std::string name;
  std::function<TensorVec()> inputs;
  GradcheckFn fn;
  GradcheckOptions opts = kTight;
  bool twice = true;  // false: no second-order twin (the second derivative is infinite at these inputs)
};

// gtest prints a case as its name.
inline void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

inline GradCase single(std::string name, std::function<TensorVec()> inputs,
                       std::function<Tensor(const TensorVec&)> fn, GradcheckOptions opts = kTight) {
  return {std::move(name), std::move(inputs),
          [fn = std::move(fn)](const TensorVec& in) { return TensorVec{fn(in)}; }, opts};
}

inline GradCase once(GradCase c) {
  c.twice = false;
  return c;
}

inline GradCase multi(std::string name, std::function<TensorVec()> inputs, GradcheckFn fn,
                      GradcheckOptions opts = kTight) {
  return {std::move(name), std::move(inputs), std::move(fn), opts};
}

// The gradient of sum(f(inputs)) with respect to every input, recorded (create_graph) so that gradcheck of
// this function checks f's second derivatives. Inputs that do not require grad (gradcheck's perturbed copies)
// are made into fresh leaves first.
inline GradcheckFn first_grad(std::function<Tensor(const TensorVec&)> f) {
  return [f = std::move(f)](const TensorVec& in) {
    EnableGradGuard grad_on;
    TensorVec xs;
    for (const Tensor& t : in) {
      if (t.requires_grad()) {
        xs.push_back(t);
      } else {
        Tensor x = t.detach();
        x.requires_grad_();
        xs.push_back(x);
      }
    }
    return autograd::grad({sum(f(xs))}, xs, {}, std::nullopt, /*create_graph=*/true);
  };
}

// The second-order twin of a case: gradcheck of the recorded (create_graph) gradient of the sum of squares of
// its floating outputs, which checks that every backward rule is itself differentiable and right. Squaring
// keeps the second derivatives of linear ops (views, gathers, sums) from being trivially zero.
inline GradCase gradgrad(const GradCase& c) {
  GradcheckFn fn = [f = c.fn](const TensorVec& in) {
    EnableGradGuard grad_on;
    TensorVec xs = in, diff;
    for (Tensor& x : xs) {
      if (!x.is_floating_point()) continue;
      if (!x.requires_grad()) {
        x = x.detach();
        x.requires_grad_();
      }
      diff.push_back(x);
    }
    Tensor total;
    for (const Tensor& out : f(xs)) {
      if (!out.is_floating_point()) continue;
      Tensor s = sum(out * out);
      total = total.defined() ? total + s : s;
    }
    TensorVec grads = autograd::grad({total}, diff, {}, std::nullopt, /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = zeros_like(diff[i]);
    return grads;
  };
  return {c.name + "_gradgrad", c.inputs, std::move(fn), c.opts};
}

inline std::vector<GradCase> gradgrad(const std::vector<GradCase>& cases) {
  std::vector<GradCase> out;
  for (const GradCase& c : cases)
    if (c.twice) out.push_back(gradgrad(c));
  return out;
}

// Test names: letters, digits and underscores only.
inline std::string test_name(const std::string& name) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

inline void run_grad_case(const GradCase& c) {
  seed_from(c.name);
  TensorVec inputs = c.inputs();
  GradcheckOptions opts = c.opts;
  opts.raise = false;
  autograd::GradcheckResult r = autograd::gradcheck(c.fn, inputs, opts);
  EXPECT_TRUE(r.ok) << c.name << ":\n" << r.report;
  EXPECT_GT(r.entries, 0) << c.name << ": no Jacobian entry was compared";
}

// The parameterized suite every table of cases instantiates (ops_grad_test.cpp runs each case through
// run_grad_case; second_order_test.cpp adds its own tables): one fixture for all, named by case_name.
class OpGrad : public ::testing::TestWithParam<GradCase> {};
inline std::string case_name(const ::testing::TestParamInfo<GradCase>& info) { return test_name(info.param.name); }

}  // namespace kiln::test
