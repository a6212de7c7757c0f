// MultiheadAttention against its formula written out with float64 loops (tests/nn/attention_reference.h: per
// head softmax(q k^T / sqrt(d) + mask) v, then out_proj), gradchecked; PyTorch's parameter names;
// nn::init::orthogonal_ against Gram-Schmidt of the same draw. The Transformer layers: transformer_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/attention_reference.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::expect_near;
using test::kInf;
using test::kNoMask;
using test::MaskFn;
using test::mha_reference;
using test::MhaResult;
using test::MhaWeights;
using test::randn64;
using test::to_time_first;
using test::values;
using test::weights_of;

// A float64 module with random biases too (zero biases would hide a misplaced one).
nn::MultiheadAttention make_mha(int64_t E, int64_t H, nn::MultiheadAttentionOptions options = {}) {
  nn::MultiheadAttention m(E, H, options);
  m->to(kFloat64);
  NoGradGuard no_grad;
  if (m->in_proj_bias.defined()) m->in_proj_bias.copy_(randn64({3 * E}, 101));
  if (m->out_proj->bias.defined()) m->out_proj->bias.copy_(randn64({E}, 102));
  return m;
}

constexpr int64_t kE = 6, kH = 2, kL = 3, kS = 4, kN = 2;

// ---- MultiheadAttention ----

TEST(MultiheadAttention, MatchesLoopReferenceWithEveryMaskKind) {
  for (bool batch_first : {false, true}) {
    SCOPED_TRACE(batch_first ? "batch_first" : "time-first");
    nn::MultiheadAttentionOptions o;
    o.batch_first = batch_first;
    auto m = make_mha(kE, kH, o);
    MhaWeights w = weights_of(*m);
    // drawn in the module's layout
    Tensor q = batch_first ? randn64({kN, kL, kE}, 1) : randn64({kL, kN, kE}, 1);
    Tensor k = batch_first ? randn64({kN, kS, kE}, 2) : randn64({kS, kN, kE}, 2);
    Tensor v = batch_first ? randn64({kN, kS, kE}, 3) : randn64({kS, kN, kE}, 3);
    auto tf = [&](const Tensor& t, int64_t len) {
      return batch_first ? to_time_first(values(t), kN, len, kE) : values(t);
    };
    std::vector<double> qv = tf(q, kL), kv = tf(k, kS), vv = tf(v, kS);
    auto output_time_first = [&](const Tensor& out) { return tf(out, kL); };

    // key padding: batch 0 ignores key 3, batch 1 keys 0 and 2
    Tensor padding = tensor(std::vector<bool>{false, false, false, true, true, false, true, false}, {kN, kS});
    MaskFn padding_fn = [](int64_t n, int64_t, int64_t, int64_t j) {
      return (n == 0 && j == 3) || (n == 1 && (j == 0 || j == 2)) ? -kInf : 0.0;
    };
    // bool (L, S) mask: query i may not see key (i + 1) % S
    Tensor bool_mask = zeros({kL, kS}, kBool);
    for (int64_t i = 0; i < kL; ++i) bool_mask[i][(i + 1) % kS].fill_(true);
    MaskFn bool_fn = [](int64_t, int64_t, int64_t i, int64_t j) { return j == (i + 1) % kS ? -kInf : 0.0; };
    // float (N * H, L, S) mask: a different bias per batch and head
    Tensor float_mask = randn64({kN * kH, kL, kS}, 4);
    std::vector<double> fm = values(float_mask);
    MaskFn float_fn = [&](int64_t n, int64_t h, int64_t i, int64_t j) { return fm[((n * kH + h) * kL + i) * kS + j]; };

    struct Case {
      const char* name;
      Tensor padding, attn_mask;
      MaskFn fn;
    };
    Tensor float_padding = zeros({kN, kS}, kFloat64).masked_fill(padding, -kInf);
    std::vector<Case> cases = {
        {"no mask", {}, {}, kNoMask},
        {"key_padding_mask", padding, {}, padding_fn},
        {"float key_padding_mask", float_padding, {}, padding_fn},
        {"bool attn_mask", {}, bool_mask, bool_fn},
        {"float attn_mask", {}, float_mask, float_fn},
        {"padding and float attn_mask", padding, float_mask,
         [&](int64_t n, int64_t h, int64_t i, int64_t j) { return padding_fn(n, h, i, j) + float_fn(n, h, i, j); }},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      MhaResult ref = mha_reference(qv, kv, vv, kL, kS, kN, kE, kH, w, c.fn);
      auto [out, weights] = m->forward(q, k, v, c.padding, c.attn_mask);
      EXPECT_EQ(out.sizes(), q.sizes());
      EXPECT_EQ(weights.sizes(), (Shape{kN, kL, kS}));
      expect_near(output_time_first(out), ref.out, 1e-12, "output");
      expect_near(values(weights), ref.averaged(kN, kH, kL, kS), 1e-12, "averaged weights");
      auto per_head = m->forward(q, k, v, c.padding, c.attn_mask, true, /*average_attn_weights=*/false);
      EXPECT_EQ(per_head.weights.sizes(), (Shape{kN, kH, kL, kS}));
      expect_near(values(per_head.weights), ref.weights, 1e-12, "per-head weights");
      auto no_weights = m->forward(q, k, v, c.padding, c.attn_mask, /*need_weights=*/false);
      EXPECT_FALSE(no_weights.weights.defined());
      expect_near(output_time_first(no_weights.output), ref.out, 1e-12, "output without weights");
    }
  }
}

TEST(MultiheadAttention, CausalSelfAttentionEqualsTheExplicitMask) {
  auto m = make_mha(kE, kH);
  Tensor x = randn64({kL, kN, kE}, 5);
  std::vector<double> xv = values(x);
  MhaResult ref = mha_reference(xv, xv, xv, kL, kL, kN, kE, kH, weights_of(*m),
                                [](int64_t, int64_t, int64_t i, int64_t j) { return j > i ? -kInf : 0.0; });
  auto causal = m->forward(x, x, x, {}, {}, true, true, /*is_causal=*/true);
  expect_near(values(causal.output), ref.out, 1e-12, "is_causal output");
  expect_near(values(causal.weights), ref.averaged(kN, kH, kL, kL), 1e-12, "is_causal weights");
  // the same mask spelled out, bool and float, through the separate q/k/v projections (distinct tensors)
  Tensor bool_causal = zeros({kL, kL}, kBool), float_causal = zeros({kL, kL}, kFloat64);
  for (int64_t i = 0; i < kL; ++i)
    for (int64_t j = i + 1; j < kL; ++j) {
      bool_causal[i][j].fill_(true);
      float_causal[i][j].fill_(-kInf);
    }
  Tensor x2 = x.clone(), x3 = x.clone();
  expect_near(values(m->forward(x, x2, x3, {}, bool_causal).output), values(causal.output), 1e-12, "bool mask");
  expect_near(values(m->forward(x, x, x, {}, float_causal).output), values(causal.output), 1e-12, "float mask");
  // the module called as a layer: unmasked self-attention
  MhaResult plain = mha_reference(xv, xv, xv, kL, kL, kN, kE, kH, weights_of(*m), kNoMask);
  expect_near(values(m(x)), plain.out, 1e-12, "module(x)");
}

TEST(MultiheadAttention, UnbatchedInputIsABatchOfOne) {
  auto m = make_mha(kE, kH);
  Tensor q = randn64({kL, kE}, 6), kv = randn64({kS, kE}, 7);
  Tensor padding = tensor(std::vector<bool>{false, true, false, false}, {kS});
  auto un = m->forward(q, kv, kv, padding, {}, true, false);
  auto one = m->forward(q.unsqueeze(1), kv.unsqueeze(1), kv.unsqueeze(1), padding.unsqueeze(0), {}, true, false);
  EXPECT_EQ(un.output.sizes(), (Shape{kL, kE}));
  EXPECT_EQ(un.weights.sizes(), (Shape{kH, kL, kS}));
  expect_near(values(un.output), values(one.output), 1e-14, "output");
  expect_near(values(un.weights), values(one.weights), 1e-14, "weights");
}

TEST(MultiheadAttention, FullyMaskedRowGivesZeroWeightsAndFiniteGradients) {
  // PyTorch returns NaN here; kiln documents zero weights (attention.h). Batch 1 has every key padded.
  auto m = make_mha(kE, kH);
  Tensor q = randn64({kL, kN, kE}, 8).requires_grad_(), k = randn64({kS, kN, kE}, 9).requires_grad_();
  Tensor padding = tensor(std::vector<bool>{false, true, false, false, true, true, true, true}, {kN, kS});
  auto [out, weights] = m->forward(q, k, k, padding);
  std::vector<double> o = values(out), wv = values(weights), bias = values(m->out_proj->bias);
  for (int64_t i = 0; i < kL; ++i)
    for (int64_t e = 0; e < kE; ++e) {
      EXPECT_DOUBLE_EQ(o[(i * kN + 1) * kE + e], bias[e]) << "query " << i;  // attention output 0, then out_proj
      EXPECT_TRUE(std::isfinite(o[(i * kN + 0) * kE + e]));
    }
  for (int64_t i = 0; i < kL * kS; ++i) EXPECT_EQ(wv[kL * kS + i], 0.0);
  (out * randn64(out.sizes(), 10)).sum().backward();
  for (const Tensor& g : {q.grad(), k.grad(), m->in_proj_weight.grad(), m->out_proj->weight.grad()})
    for (double e : values(g)) EXPECT_TRUE(std::isfinite(e));
  // the dead batch's keys and queries get no gradient; the live batch's do
  std::vector<double> gk = values(k.grad()), gq = values(q.grad());
  double live = 0;
  for (int64_t t = 0; t < kS; ++t)
    for (int64_t e = 0; e < kE; ++e) {
      EXPECT_EQ(gk[(t * kN + 1) * kE + e], 0.0);
      live += std::abs(gk[(t * kN + 0) * kE + e]);
    }
  for (int64_t t = 0; t < kL; ++t)
    for (int64_t e = 0; e < kE; ++e) EXPECT_EQ(gq[(t * kN + 1) * kE + e], 0.0);
  EXPECT_GT(live, 0.0);
}

TEST(MultiheadAttention, Gradchecks) {
  auto m = make_mha(kE, kH);
  Tensor q = randn64({kL, kN, kE}, 11).requires_grad_(), k = randn64({kS, kN, kE}, 12).requires_grad_(),
         v = randn64({kS, kN, kE}, 13).requires_grad_();
  Tensor w_in = m->in_proj_weight, b_in = m->in_proj_bias, w_out = m->out_proj->weight, b_out = m->out_proj->bias;
  nn::F::MultiHeadAttentionArgs args;
  args.key_padding_mask = tensor(std::vector<bool>{false, false, true, false, true, false, false, false}, {kN, kS});
  args.attn_mask = randn64({kL, kS}, 14);
  gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto r = nn::F::multi_head_attention_forward(in[0], in[1], in[2], kH, in[3], in[4], in[5], in[6], args);
        return std::vector<Tensor>{r.output, r.weights};
      },
      {q, k, v, w_in, b_in, w_out, b_out});
  // self-attention (one packed projection), causal, per-head weights
  nn::F::MultiHeadAttentionArgs causal;
  causal.is_causal = true;
  causal.average_attn_weights = false;
  gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto r = nn::F::multi_head_attention_forward(in[0], in[0], in[0], kH, in[1], in[2], in[3], in[4], causal);
        return std::vector<Tensor>{r.output, r.weights};
      },
      {q, w_in, b_in, w_out, b_out});
}

TEST(MultiheadAttention, KeysAndValuesOfOtherSizesUseSeparateProjections) {
  nn::MultiheadAttentionOptions o;
  o.kdim = 4;
  o.vdim = 5;
  auto m = make_mha(kE, kH, o);
  std::vector<std::string> names;
  for (auto& [name, t] : m->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                             "out_proj.weight", "out_proj.bias"}));
  EXPECT_FALSE(m->in_proj_weight.defined());
  EXPECT_EQ(m->k_proj_weight.sizes(), (Shape{kE, 4}));
  EXPECT_EQ(m->v_proj_weight.sizes(), (Shape{kE, 5}));
  Tensor q = randn64({kL, kN, kE}, 23), k = randn64({kS, kN, 4}, 24).requires_grad_(),
         v = randn64({kS, kN, 5}, 25).requires_grad_();
  Tensor padding = tensor(std::vector<bool>{true, false, false, false, false, false, true, false}, {kN, kS});
  MhaResult ref = mha_reference(values(q), values(k), values(v), kL, kS, kN, kE, kH, weights_of(*m),
                                [](int64_t n, int64_t, int64_t, int64_t j) {
                                  return (n == 0 && j == 0) || (n == 1 && j == 2) ? -kInf : 0.0;
                                });
  auto r = m->forward(q, k, v, padding);
  expect_near(values(r.output), ref.out, 1e-12, "output");
  expect_near(values(r.weights), ref.averaged(kN, kH, kL, kS), 1e-12, "weights");
  gradcheck(
      [&](const std::vector<Tensor>& in) {
        nn::F::MultiHeadAttentionArgs args;
        args.key_padding_mask = padding;
        args.q_proj_weight = in[3];
        args.k_proj_weight = in[4];
        args.v_proj_weight = in[5];
        return nn::F::multi_head_attention_forward(in[0], in[1], in[2], kH, {}, in[6], in[7], in[8], args).output;
      },
      {q.requires_grad_(), k, v, m->q_proj_weight, m->k_proj_weight, m->v_proj_weight, m->in_proj_bias,
       m->out_proj->weight, m->out_proj->bias});
  expect_error([&] { m->forward(q, v, v); }, {"MultiheadAttention", "key", "(4, 2, 5)", "kdim = 4"});
}

TEST(MultiheadAttention, DropoutOnlyInTrainingAndOnTheWeights) {
  nn::MultiheadAttentionOptions o;
  o.dropout = 0.5;
  auto m = make_mha(kE, kH, o);
  Tensor q = randn64({kL, kN, kE}, 15), k = randn64({kS, kN, kE}, 16);
  m->eval();
  MhaResult ref = mha_reference(values(q), values(k), values(k), kL, kS, kN, kE, kH, weights_of(*m), kNoMask);
  auto eval_out = m->forward(q, k, k, {}, {}, true, false);
  expect_near(values(eval_out.output), ref.out, 1e-12, "eval output");
  m->train();
  std::vector<double> dropped = values(m->forward(q, k, k, {}, {}, true, false).weights);
  int zeros_seen = 0;
  for (size_t i = 0; i < dropped.size(); ++i) {
    // each weight is dropped or scaled by 1 / (1 - p)
    bool zeroed = dropped[i] == 0.0;
    zeros_seen += zeroed;
    if (!zeroed) EXPECT_NEAR(dropped[i], 2 * ref.weights[i], 1e-12) << i;
  }
  EXPECT_GT(zeros_seen, 0);
  EXPECT_LT(zeros_seen, static_cast<int>(dropped.size()));
}

TEST(MultiheadAttention, PyTorchNamesAndInit) {
  nn::MultiheadAttention m(16, 4);
  std::vector<std::string> names;
  for (auto& [name, t] : m->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m->in_proj_weight.sizes(), (Shape{48, 16}));
  EXPECT_EQ(m->state_dict().size(), 4u);
  // xavier uniform on (3E, E): bound sqrt(6 / (E + 3E)); out_proj.weight as a Linear: 1 / sqrt(E)
  double xavier = std::sqrt(6.0 / 64.0);
  std::vector<double> w = values(m->in_proj_weight);
  double widest = 0;
  for (double e : w) widest = std::max(widest, std::abs(e));
  EXPECT_LE(widest, xavier);
  EXPECT_GT(widest, 0.8 * xavier);  // 768 draws reach near the bound
  for (double e : values(m->out_proj->weight)) EXPECT_LE(std::abs(e), 0.25);
  for (const Tensor& b : {m->in_proj_bias, m->out_proj->bias})
    for (double e : values(b)) EXPECT_EQ(e, 0.0);

  nn::MultiheadAttentionOptions no_bias;
  no_bias.bias = false;
  nn::MultiheadAttention nb(8, 2, no_bias);
  names.clear();
  for (auto& [name, t] : nb->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
  // and it computes without biases
  nb->to(kFloat64);
  Tensor x = randn64({2, 1, 8}, 17);
  std::vector<double> xv = values(x);
  expect_near(values(nb->forward(x, x, x).output),
              mha_reference(xv, xv, xv, 2, 2, 1, 8, 2, weights_of(*nb), kNoMask).out, 1e-12, "no bias");
}

TEST(MultiheadAttention, Float32MatchesTheReference) {
  nn::MultiheadAttention m(kE, kH);  // default dtype
  Tensor q = randn64({kL, kN, kE}, 18), k = randn64({kS, kN, kE}, 19);
  MhaResult ref = mha_reference(values(q), values(k), values(k), kL, kS, kN, kE, kH, weights_of(*m), kNoMask);
  auto r = m->forward(q.to(kFloat32), k.to(kFloat32), k.to(kFloat32));
  EXPECT_EQ(r.output.dtype(), kFloat32);
  expect_near(values(r.output), ref.out, 1e-5, "float32 output");
}

TEST(MultiheadAttention, BadInputsNameWhatWasExpected) {
  expect_error([] { nn::MultiheadAttention(10, 3); }, {"MultiheadAttention", "embed_dim (10)", "num_heads (3)"});
  auto m = make_mha(kE, kH);
  Tensor q = randn64({kL, kN, kE}, 20), k = randn64({kS, kN, kE}, 21);
  expect_error([&] { m->forward(randn64({kL, kN, 5}, 22), k, k); },
               {"MultiheadAttention", "(3, 2, 5)", "embed_dim = 6"});
  expect_error([&] { m->forward(q, randn64({kS, kN, 5}, 22), k); }, {"key", "(4, 2, 5)", "kdim = 6"});
  expect_error([&] {
    nn::F::multi_head_attention_forward(q, k, randn64({kS, kN, 5}, 22), kH, m->in_proj_weight, {}, m->out_proj->weight,
                                        {});
  },
               {"multi_head_attention", "value (4, 2, 5)", "embed_dim = 6"});
  expect_error([&] { m->forward(q, k, k, {}, zeros({kL, kL}, kBool)); },
               {"attn_mask", "(L, S) = (3, 4)", "(N * num_heads, L, S) = (4, 3, 4)", "(3, 3)"});
  expect_error([&] { m->forward(q, k, k, zeros({kN, kS}, kInt64)); }, {"key_padding_mask", "bool", "int64"});
  expect_error([&] { m->forward(q, k, k, zeros({kS, kN}, kBool)); }, {"key_padding_mask", "(N, S) = (2, 4)", "(4, 2)"});
}

// ---- nn::init::orthogonal_ ----

// Q of the Gram-Schmidt factorization (positive diagonal R) of a (m, n) row-major matrix, m >= n.
std::vector<double> gram_schmidt(std::vector<double> a, int64_t m, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < j; ++p) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += a[i * n + p] * a[i * n + j];
      for (int64_t i = 0; i < m; ++i) a[i * n + j] -= dot * a[i * n + p];
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += a[i * n + j] * a[i * n + j];
    for (int64_t i = 0; i < m; ++i) a[i * n + j] /= std::sqrt(norm);
  }
  return a;
}

TEST(Orthogonal, RowsOrColumnsAreOrthonormal) {
  for (Shape shape : {Shape{3, 5}, Shape{5, 3}, Shape{4, 4}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor w = empty(shape, kFloat32);
    for (double gain : {1.0, 2.5}) {
      nn::init::orthogonal_(w, gain);
      Tensor m = w.reshape({shape[0], -1});
      bool wide = m.size(0) < m.size(1);
      // Q^T Q (tall or square) or Q Q^T (wide) is gain^2 I
      Tensor gram = wide ? matmul(m, m.t()) : matmul(m.t(), m);
      Tensor expected = eye(gram.size(0), -1, kFloat32) * (gain * gain);
      double err = amax(abs(gram - expected)).item<double>();
      EXPECT_LT(err, 1e-5 * gain * gain);
    }
  }
  expect_error([] { nn::init::orthogonal_(empty({5})); }, {"orthogonal_", "2 or more dims", "(5)"});
}

TEST(Orthogonal, IsTheSignFixedQOfANormalDraw) {
  for (Shape shape : {Shape{5, 3}, Shape{3, 5}, Shape{2, 2, 3}}) {
    SCOPED_TRACE(shape_str(shape));
    int64_t rows = shape[0], cols = 1;
    for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
    Generator g(77), g_same(77);
    Tensor w = empty(shape, kFloat64);
    nn::init::orthogonal_(w, 1.0, &g);
    // the same draw, orthonormalized by Gram-Schmidt: its R has a positive diagonal, the sign PyTorch fixes
    Tensor draw = randn({rows, cols}, kFloat64, &g_same);
    bool wide = rows < cols;
    std::vector<double> q = gram_schmidt(values(wide ? draw.t() : draw), wide ? cols : rows, wide ? rows : cols);
    Tensor qt = tensor(q, {wide ? cols : rows, wide ? rows : cols}, kFloat64);
    expect_near(values(w.reshape({rows, cols})), values(wide ? qt.t() : qt), 1e-12, "Q");
  }
  // different seeds, different matrices
  Tensor a = empty({4, 4}), b = empty({4, 4});
  Generator g1(1), g2(2);
  nn::init::orthogonal_(a, 1.0, &g1);
  nn::init::orthogonal_(b, 1.0, &g2);
  EXPECT_GT(amax(abs(a - b)).item<double>(), 0.1);
}

}  // namespace
}  // namespace kiln
