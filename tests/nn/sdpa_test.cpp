// functional::scaled_dot_product_attention against a float64 loop over every (batch, head, query) row, with
// each kind of mask, and gradcheck.
#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

namespace F = nn::functional;
constexpr double kInf = std::numeric_limits<double>::infinity();

// q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev); mask(b, h, i, j) additive. Rows whose mask is -inf
// everywhere give zeros (kiln's rule for a query with nothing to attend to).
std::vector<double> sdpa_reference(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                   const std::function<double(int64_t, int64_t, int64_t, int64_t)>& mask) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3), S = k.size(2), Ev = v.size(3);
  const auto qv = values(q), kv = values(k), vv = values(v);
  std::vector<double> out(static_cast<size_t>(B * H * L * Ev), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> w(static_cast<size_t>(S));
        double top = -kInf;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += qv[((b * H + h) * L + i) * E + e] * kv[((b * H + h) * S + j) * E + e];
          w[j] = dot * scale + mask(b, h, i, j);
          top = std::max(top, w[j]);
        }
        if (top == -kInf) continue;  // nothing to attend to
        double total = 0;
        for (double& x : w) total += (x = std::exp(x - top));
        for (int64_t j = 0; j < S; ++j)
          for (int64_t e = 0; e < Ev; ++e)
            out[((b * H + h) * L + i) * Ev + e] += w[j] / total * vv[((b * H + h) * S + j) * Ev + e];
      }
  return out;
}

struct Inputs {
  Tensor q, k, v;
  Inputs() {
    Generator gen(3);
    q = randn({2, 3, 4, 5}, kFloat64, &gen);
    k = randn({2, 3, 6, 5}, kFloat64, &gen);
    v = randn({2, 3, 6, 7}, kFloat64, &gen);
  }
};

TEST(ScaledDotProductAttention, MatchesTheLoopWithEveryMaskKind) {
  Inputs in;
  const Shape out_shape{2, 3, 4, 7};
  const double d = 1 / std::sqrt(5.0);
  expect_tensor_near(F::scaled_dot_product_attention(in.q, in.k, in.v),
                     sdpa_reference(in.q, in.k, in.v, d, [](auto...) { return 0.0; }), out_shape, 1e-12, 1e-12, "plain");
  expect_tensor_near(F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.0, false, 0.3),
                     sdpa_reference(in.q, in.k, in.v, 0.3, [](auto...) { return 0.0; }), out_shape, 1e-12, 1e-12,
                     "scale 0.3");
  // Causal with L = 4 < S = 6: query i sees keys 0..i.
  expect_tensor_near(F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.0, true),
                     sdpa_reference(in.q, in.k, in.v, d,
                                    [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i ? 0.0 : -kInf; }),
                     out_shape, 1e-12, 1e-12, "causal");
  // Bool (L, S), true = attend; row 2 attends nothing.
  auto allowed = [](int64_t i, int64_t j) { return i != 2 && (i + 2 * j) % 3 != 0; };
  std::vector<double> bits;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) bits.push_back(allowed(i, j) ? 1.0 : 0.0);
  const Tensor bool_mask = tensor(bits, {4, 6}).to(kBool);
  expect_tensor_near(F::scaled_dot_product_attention(in.q, in.k, in.v, bool_mask),
                     sdpa_reference(in.q, in.k, in.v, d,
                                    [&](int64_t, int64_t, int64_t i, int64_t j) { return allowed(i, j) ? 0.0 : -kInf; }),
                     out_shape, 1e-12, 1e-12, "bool mask");
  // Float (B, 1, L, S), broadcast over heads.
  Generator gen(4);
  const Tensor float_mask = randn({2, 1, 4, 6}, kFloat64, &gen);
  const auto fm = values(float_mask);
  expect_tensor_near(F::scaled_dot_product_attention(in.q, in.k, in.v, float_mask),
                     sdpa_reference(in.q, in.k, in.v, d,
                                    [&](int64_t b, int64_t, int64_t i, int64_t j) { return fm[(b * 4 + i) * 6 + j]; }),
                     out_shape, 1e-12, 1e-12, "float mask");
}

TEST(ScaledDotProductAttention, GradcheckAndDropout) {
  Generator gen(5);
  Tensor q = randn({2, 3, 4}, kFloat64, &gen).requires_grad_(true), k = randn({2, 5, 4}, kFloat64, &gen).requires_grad_(true),
         v = randn({2, 5, 3}, kFloat64, &gen).requires_grad_(true);
  const Tensor mask = randn({3, 5}, kFloat64, &gen);
  EXPECT_TRUE(autograd::gradcheck(
                  [&](const std::vector<Tensor>& t) { return F::scaled_dot_product_attention(t[0], t[1], t[2], mask); },
                  {q, k, v})
                  .ok);
  EXPECT_TRUE(autograd::gradcheck(
                  [&](const std::vector<Tensor>& t) {
                    return F::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, true);
                  },
                  {q, k, v})
                  .ok);
  // dropout_p = 1 drops every weight; a smaller one changes the output (applied even outside training).
  EXPECT_EQ(F::scaled_dot_product_attention(q, k, v, {}, 1.0).abs().max().item<double>(), 0.0);
  EXPECT_FALSE(F::scaled_dot_product_attention(q, k, v, {}, 0.5).equal(F::scaled_dot_product_attention(q, k, v)));
}

TEST(ScaledDotProductAttention, BadInputsNameWhatWasExpected) {
  Inputs in;
  expect_error([&] { F::scaled_dot_product_attention(in.q, in.q.narrow(3, 0, 4), in.v); }, {"must end in the query's E = 5"});
  expect_error([&] { F::scaled_dot_product_attention(in.q, in.k, in.v.narrow(2, 0, 5)); }, {"as many rows S as key"});
  expect_error([&] { F::scaled_dot_product_attention(in.q, in.k, in.v, ones({4, 6}, kBool), 0.0, true); },
               {"attn_mask or is_causal, not both"});
  expect_error([&] { F::scaled_dot_product_attention(in.q, in.k, in.v, ones({4, 5}, kBool)); },
               {"must broadcast to (..., L, S) = (..., 4, 6)"});
  expect_error([&] { F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 1.5); }, {"dropout_p must be in [0, 1]"});
}

}  // namespace
}  // namespace kiln::test
