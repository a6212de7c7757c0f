// L-BFGS against known minima: a strictly convex quadratic, whose minimizer A^-1 b is solved here in float64,
// and Rosenbrock's function, whose minimum (1, 1) is known in closed form; its closure and evaluation counts;
// exact resume through state_dict; and misuse. tests/parity/optim_parity_test.cpp follows it iterate by
// iterate against LibTorch's LBFGS.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/optim/optim.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

// A (n x n) symmetric positive definite and b, in float64: A = M M^T + n I for a fixed M.
struct Quadratic {
  int64_t n = 6;
  std::vector<double> a, b;
  Quadratic() : a(static_cast<size_t>(n * n)), b(static_cast<size_t>(n)) {
    std::vector<double> m(static_cast<size_t>(n * n));
    for (int64_t i = 0; i < n * n; ++i) m[i] = std::sin(1.3 * static_cast<double>(i) + 0.4);
    for (int64_t i = 0; i < n; ++i) {
      b[i] = std::cos(0.7 * static_cast<double>(i));
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? static_cast<double>(n) : 0.0;
        for (int64_t k = 0; k < n; ++k) s += m[i * n + k] * m[j * n + k];
        a[i * n + j] = s;
      }
    }
  }
  // A^-1 b by Gaussian elimination with partial pivoting.
  std::vector<double> solve() const {
    std::vector<double> m = a, x = b;
    for (int64_t c = 0; c < n; ++c) {
      int64_t piv = c;
      for (int64_t r = c + 1; r < n; ++r)
        if (std::abs(m[r * n + c]) > std::abs(m[piv * n + c])) piv = r;
      for (int64_t k = 0; k < n; ++k) std::swap(m[c * n + k], m[piv * n + k]);
      std::swap(x[c], x[piv]);
      for (int64_t r = c + 1; r < n; ++r) {
        const double f = m[r * n + c] / m[c * n + c];
        for (int64_t k = c; k < n; ++k) m[r * n + k] -= f * m[c * n + k];
        x[r] -= f * x[c];
      }
    }
    for (int64_t r = n - 1; r >= 0; --r) {
      for (int64_t k = r + 1; k < n; ++k) x[r] -= m[r * n + k] * x[k];
      x[r] /= m[r * n + r];
    }
    return x;
  }
  // 0.5 x^T A x - b^T x, through kiln's ops so that backward gives A x - b.
  Tensor loss(const Tensor& x) const {
    Tensor at = tensor(a, {n, n}), bt = tensor(b, {n, 1});
    return (0.5 * matmul(matmul(x.t(), at), x) - matmul(bt.t(), x)).sum();
  }
};

// The closure LBFGS needs for the quadratic at x, counting its calls in `calls`.
optim::LBFGS::Closure quadratic_closure(optim::LBFGS& opt, const Quadratic& q, const Tensor& x, int& calls) {
  return [&opt, &q, x, &calls] {
    ++calls;
    opt.zero_grad();
    Tensor l = q.loss(x);
    l.backward();
    return l;
  };
}

TEST(LBFGS, FindsTheMinimizerOfAQuadratic) {
  const Quadratic q;
  const std::vector<double> want = q.solve();
  for (const std::string line_search : {"", "strong_wolfe"}) {
    Tensor x = zeros({q.n, 1}, kFloat64).requires_grad_();
    optim::LBFGS opt({x}, {.max_iter = 200, .tolerance_grad = 1e-12, .tolerance_change = 1e-14,
                           .line_search_fn = line_search});
    int calls = 0;
    const auto closure = quadratic_closure(opt, q, x, calls);
    for (int s = 0; s < 5; ++s) opt.step(closure);
    const std::vector<double> got = x.detach().to_vector<double>();
    for (int64_t i = 0; i < q.n; ++i) EXPECT_NEAR(got[i], want[i], 1e-7) << "line search '" << line_search << "'";
    // The evaluations it counted are the closure's calls.
    EXPECT_EQ(opt.state(x).scalars.at("func_evals"), calls) << line_search;
  }
}

TEST(LBFGS, StrongWolfeFindsRosenbrocksMinimum) {
  Tensor xy = tensor({-1.5, 2.0}, kFloat64).requires_grad_();
  // Tolerances tightened: the defaults stop where the loss changes by less than 1e-9, about 1e-5 from (1, 1).
  optim::LBFGS opt({xy}, {.max_iter = 100, .tolerance_grad = 1e-12, .tolerance_change = 1e-15, .history_size = 10,
                          .line_search_fn = "strong_wolfe"});
  auto closure = [&] {
    opt.zero_grad();
    Tensor x = xy.select(0, 0), y = xy.select(0, 1);
    Tensor l = (1 - x).pow(2) + 100 * (y - x * x).pow(2);
    l.backward();
    return l;
  };
  const double first = opt.step(closure).item<double>();
  EXPECT_NEAR(first, 2.5 * 2.5 + 100 * 0.25 * 0.25, 1e-12) << "step returns the loss before any update";
  for (int s = 0; s < 4; ++s) opt.step(closure);
  const std::vector<double> got = xy.detach().to_vector<double>();
  EXPECT_NEAR(got[0], 1.0, 1e-6);
  EXPECT_NEAR(got[1], 1.0, 1e-6);
}

TEST(LBFGS, MaxIterAndMaxEvalBoundTheClosureCalls) {
  const Quadratic q;
  Tensor x = zeros({q.n, 1}, kFloat64).requires_grad_();
  // Without a line search every iteration but the last evaluates once more: max_iter calls in all.
  optim::LBFGS opt({x}, {.lr = 0.01, .max_iter = 7});
  int calls = 0;
  opt.step(quadratic_closure(opt, q, x, calls));
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(opt.state(x).scalars.at("n_iter"), 7);
  calls = 0;
  optim::LBFGS capped({x}, {.lr = 0.01, .max_iter = 7, .max_eval = 3});
  capped.step(quadratic_closure(capped, q, x, calls));
  EXPECT_EQ(calls, 3);
}

TEST(LBFGS, ResumeFromStateDictIsBitwiseIdentical) {
  const Quadratic q;
  auto run = [&](Tensor x, optim::LBFGS& opt, int steps) {
    for (int s = 0; s < steps; ++s) {
      opt.step([&] {
        opt.zero_grad();
        Tensor l = q.loss(x) + x.pow(4).sum();  // not quadratic: the history matters across steps
        l.backward();
        return l;
      });
    }
  };
  const optim::LBFGSOptions o{.lr = 0.5, .max_iter = 3, .history_size = 4};
  Tensor a = zeros({q.n, 1}, kFloat64).requires_grad_();
  optim::LBFGS straight({a}, o);
  run(a, straight, 6);

  Tensor b = zeros({q.n, 1}, kFloat64).requires_grad_();
  optim::LBFGS first({b}, o);
  run(b, first, 3);
  const optim::OptimizerState snapshot = first.state_dict();
  EXPECT_TRUE(snapshot.tensors.count("state.0.old_dirs.3")) << "a full history of 4 pairs after 9 iterations";
  Tensor c = b.detach().clone().requires_grad_();
  optim::LBFGS resumed({c}, o);
  resumed.load_state_dict(snapshot);
  run(c, resumed, 3);
  EXPECT_EQ(c.detach().to_vector<double>(), a.detach().to_vector<double>());
}

TEST(LBFGS, WorksOnSeveralParametersOfFloat32) {
  // A least-squares fit of y = W x + c over two parameters of different shapes, in float32.
  Generator gen(3);
  Tensor x = randn({32, 3}, {}, &gen), w_true = tensor(std::vector<double>{1.0, -2.0, 0.5}, {3, 1}).to(kFloat32);
  Tensor y = matmul(x, w_true) + 0.25;
  Tensor w = zeros({3, 1}).requires_grad_(), c = zeros({1}).requires_grad_();
  optim::LBFGS opt({w, c}, {.line_search_fn = "strong_wolfe"});
  for (int s = 0; s < 3; ++s) {
    opt.step([&] {
      opt.zero_grad();
      Tensor l = (matmul(x, w) + c - y).pow(2).mean();
      l.backward();
      return l;
    });
  }
  const std::vector<float> wv = w.detach().to_vector<float>();
  EXPECT_NEAR(wv[0], 1.0, 1e-4);
  EXPECT_NEAR(wv[1], -2.0, 1e-4);
  EXPECT_NEAR(wv[2], 0.5, 1e-4);
  EXPECT_NEAR(c.detach().item<double>(), 0.25, 1e-4);
}

TEST(LBFGS, MisuseIsAClearError) {
  Tensor p = zeros({2}, kFloat64).requires_grad_();
  optim::LBFGS opt({p});
  expect_error([&] { opt.step(); }, {"LBFGS", "needs a closure"});
  expect_error([&] { opt.step([] { return zeros({2}); }); }, {"LBFGS", "single value", "(2)"});
  opt.add_param_group({zeros({1}, kFloat64).requires_grad_()}, optim::LBFGS::to_map({}));
  expect_error([&] { opt.step([&] { return p.sum(); }); }, {"LBFGS", "one parameter group", "has 2"});
  expect_error([&] { optim::LBFGS({p}, {.line_search_fn = "backtracking"}); }, {"LBFGS", "backtracking", "strong_wolfe"});
  expect_error([&] { optim::LBFGS({p, zeros({1}).requires_grad_()}); }, {"LBFGS", "float64", "float32"});
  expect_error([&] { optim::LBFGS({p}, {.history_size = 0}); }, {"LBFGS", "history_size 0"});
}

}  // namespace
}  // namespace kiln
