// Second derivatives: gradcheck of create_graph gradients (their Jacobian is the function's Hessian), gelu's
// gradient where it saturates, and a few second derivatives against formulas written out by hand. The
// gradgrad twin of every first-order case is in ops_grad_test.cpp.
#include <cmath>

#include "grad_test_util.h"

namespace kiln {
namespace {

using namespace test;
using In = const TensorVec&;

// gradcheck of the create_graph gradient of sum(f): its Jacobian is f's Hessian (for each input pair).
std::vector<GradCase> second_order_cases() {
  auto one = leaves({{2, 3}});
  auto positive = leaves({{2, 3}}, Domain::Positive);
  auto two = leaves({{2, 3}, {2, 3}});
  return {
      multi("exp", one, first_grad([](In in) { return exp(in[0]); })),
      multi("tanh", one, first_grad([](In in) { return tanh(in[0]); })),
      multi("sigmoid", one, first_grad([](In in) { return sigmoid(in[0]); })),
      multi("log", positive, first_grad([](In in) { return log(in[0]); })),
      multi("sqrt", positive, first_grad([](In in) { return sqrt(in[0]); })),
      multi("pow_3", one, first_grad([](In in) { return pow(in[0], 3); })),
      multi("sin", one, first_grad([](In in) { return sin(in[0]); })),
      multi("gelu", one, first_grad([](In in) { return gelu(in[0]); })),
      multi("gelu_tanh", one, first_grad([](In in) { return gelu(in[0], "tanh"); })),
      multi("silu", one, first_grad([](In in) { return silu(in[0]); })),
      multi("softplus", one, first_grad([](In in) { return softplus(in[0]); })),
      multi("erf", one, first_grad([](In in) { return erf(in[0]); })),
      // relu's backward is an op of its own (relu_backward): its gradient in g must flow.
      multi("relu_times_square", leaves({{2, 3}}, Domain::AwayFromZero),
            first_grad([](In in) { return relu(in[0]) * in[0] * in[0]; })),
      multi("mul", two, first_grad([](In in) { return in[0] * in[0] * in[1]; })),
      multi("div", [] { return TensorVec{leaf({2, 3}), leaf_away({2, 3})}; },
            first_grad([](In in) { return in[0] / in[1]; })),
      multi("matmul", leaves({{2, 3}, {3, 4}}), first_grad([](In in) { return pow(matmul(in[0], in[1]), 2); })),
      multi("softmax", one, first_grad([](In in) { return softmax(in[0], 1) * ramp({2, 3}); })),
      multi("log_softmax", one, first_grad([](In in) { return log_softmax(in[0], 0) * ramp({2, 3}); })),
      multi("logsumexp", one, first_grad([](In in) { return logsumexp(in[0], {1}) * ramp({2}); })),
      multi("var", one, first_grad([](In in) { return var(in[0], {1}) * ramp({2}); })),
      multi("norm", one, first_grad([](In in) { return norm(in[0], 2.0, {0}) * ramp({3}); })),
      multi("prod", leaves({{2, 3}}, Domain::AwayFromZero), first_grad([](In in) { return prod(in[0], {1}); })),
      // d2 prod / dx_i dx_z at a zero x_z is the product of the others: backward must stay differentiable there.
      multi("prod_one_zero", [] { return TensorVec{leaf_of({0.9, -1.2, 0.0, 1.1, -0.8, 1.3}, {2, 3})}; },
            first_grad([](In in) { return prod(in[0], {1}); })),
      multi("prod_two_zeros", [] { return TensorVec{leaf_of({0.9, 0.0, 1.2, 0.0, -0.8, 1.3}, {2, 3})}; },
            first_grad([](In in) { return prod(in[0]); })),
      multi("mean_broadcast", leaves({{2, 3}, {3}}), first_grad([](In in) { return mean(in[0] * in[1] * in[1]); })),
  };
}

INSTANTIATE_TEST_SUITE_P(SecondOrder, OpGrad, ::testing::ValuesIn(second_order_cases()), case_name);

// The same, against formulas written out by hand.
std::vector<double> vals(const Tensor& t) { return ops::contiguous(t.detach()).to_vector<double>(); }

void expect_values_near(const Tensor& got, const std::vector<double>& want, const char* what) {
  std::vector<double> g = vals(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-10) << what << " element " << i;
}

// Far out, gelu's derivative is its limit, 0 or 1, in both forms and both precisions, from the fused pass and
// from the differentiable one (create_graph): the tanh form's x (1 - t^2) (1 + 0.134 x^2) term once was
// 0 * inf = NaN where x^2 overflows.
TEST(GeluGradient, SaturatedInputsGiveTheLimit) {
  const std::vector<double> xs{-1e30, -1e20, -40.0, 40.0, 1e20, 1e30};
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const char* form : {"none", "tanh"}) {
      for (bool create_graph : {false, true}) {
        Tensor x = tensor(xs, {}, dtype).requires_grad_();
        Tensor g = autograd::grad({sum(gelu(x, form))}, {x}, {}, std::nullopt, create_graph)[0].detach().to(kFloat64);
        for (size_t i = 0; i < xs.size(); ++i)
          EXPECT_EQ(g.data_ptr<double>()[i], xs[i] > 0 ? 1.0 : 0.0)
              << form << ", " << dtype << (create_graph ? ", create_graph" : "") << ", x = " << xs[i];
      }
    }
  }
}

TEST(SecondOrderByHand, Exp) {
  Tensor x = leaf({2, 3});
  Tensor g = autograd::grad({sum(exp(x))}, {x}, {}, std::nullopt, true)[0];
  Tensor gg = autograd::grad({sum(g)}, {x})[0];
  std::vector<double> want;
  for (double v : vals(x)) want.push_back(std::exp(v));
  expect_values_near(g, want, "d exp");
  expect_values_near(gg, want, "d2 exp");
}

TEST(SecondOrderByHand, Tanh) {
  Tensor x = leaf({5});
  Tensor g = autograd::grad({sum(tanh(x))}, {x}, {}, std::nullopt, true)[0];
  Tensor gg = autograd::grad({sum(g)}, {x})[0];
  std::vector<double> want;
  for (double v : vals(x)) want.push_back(-2 * std::tanh(v) * (1 - std::tanh(v) * std::tanh(v)));
  expect_values_near(gg, want, "d2 tanh");
}

TEST(SecondOrderByHand, Mul) {
  // f = sum(a * a * b): df/da = 2ab; d(sum 2ab)/da = 2b, d(sum 2ab)/db = 2a.
  Tensor a = leaf({2, 3}), b = leaf({2, 3});
  Tensor ga = autograd::grad({sum(a * a * b)}, {a}, {}, std::nullopt, true)[0];
  std::vector<Tensor> gg = autograd::grad({sum(ga)}, {a, b});
  std::vector<double> va = vals(a), vb = vals(b), want_a, want_b;
  for (size_t i = 0; i < va.size(); ++i) {
    want_a.push_back(2 * vb[i]);
    want_b.push_back(2 * va[i]);
  }
  expect_values_near(gg[0], want_a, "d2 mul / da");
  expect_values_near(gg[1], want_b, "d2 mul / db");
}

TEST(SecondOrderByHand, Matmul) {
  // f = sum((A B)^2) / 2 with A: (M, K), B: (K, N): df/dA = A B B^T. h = sum(df/dA), u = column sums of A:
  //   dh/dA[m][j] = sum_k (B B^T)[j][k],   dh/dB[p][n] = u[p] * sum_j B[j][n] + sum_k u[k] B[k][n].
  const int64_t M = 2, K = 3, N = 4;
  Tensor A = leaf({M, K}), B = leaf({K, N});
  Tensor C = matmul(A, B);
  Tensor gA = autograd::grad({sum(C * C) * 0.5}, {A}, {}, std::nullopt, true)[0];
  std::vector<Tensor> gg = autograd::grad({sum(gA)}, {A, B});
  std::vector<double> a = vals(A), b = vals(B);
  auto at = [&](int64_t m, int64_t k) { return a[m * K + k]; };
  auto bt = [&](int64_t k, int64_t n) { return b[k * N + n]; };
  std::vector<double> want_a, want_b;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < K; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) s += bt(j, n) * bt(k, n);
      want_a.push_back(s);
    }
  std::vector<double> u(K, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) u[k] += at(m, k);
  for (int64_t p = 0; p < K; ++p)
    for (int64_t n = 0; n < N; ++n) {
      double col = 0, ub = 0;
      for (int64_t j = 0; j < K; ++j) col += bt(j, n);
      for (int64_t k = 0; k < K; ++k) ub += u[k] * bt(k, n);
      want_b.push_back(u[p] * col + ub);
    }
  expect_values_near(gg[0], want_a, "d2 matmul / dA");
  expect_values_near(gg[1], want_b, "d2 matmul / dB");
}

}  // namespace
}  // namespace kiln
