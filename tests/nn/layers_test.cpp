// Each layer against its formula written out in float64 scalar code, and gradchecked; init against its bounds.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;

using test::randn64;

TEST(Linear, MatchesItsFormulaAndGradchecks) {
  auto lin = nn::Linear(5, 3);
  lin->to(kFloat64);
  Tensor x = randn64({4, 5}, 1);
  std::vector<double> y = lin(x).to_vector<double>(), xv = x.to_vector<double>(),
                      w = lin->weight.to_vector<double>(), b = lin->bias.to_vector<double>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      double ref = b[j];
      for (int k = 0; k < 5; ++k) ref += xv[i * 5 + k] * w[j * 5 + k];
      EXPECT_NEAR(y[i * 3 + j], ref, 1e-12);
    }
  x.requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::linear(in[0], in[1], in[2]); },
            {x, lin->weight, lin->bias});
  // 3-D input (a batch of sequences) and no bias
  Tensor x3 = randn64({2, 3, 5}, 2).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::linear(in[0], in[1]); }, {x3, lin->weight});
  expect_error([&] { lin(zeros({2, 4}, kFloat64)); }, {"linear", "(2, 4)", "in_features = 5"});
}

TEST(Linear, BatchedInputsAreOneProductEachWay) {
  // (batch, tokens, features) through Linear and matmul: the weight's gradient is one product over all the
  // rows, so backward holds no per-batch copies of it (32 of them, 16 MiB here, before the rows were folded).
  nn::Linear fc(256, 512);
  const Tensor x = randn({32, 16, 256}).requires_grad_();
  for (bool bias : {true, false}) {
    const Tensor y = bias ? fc(x) : matmul(x, fc->weight.t());
    EXPECT_EQ(y.sizes(), (Shape{32, 16, 512}));
    const Tensor g = randn({32, 16, 512});
    fc->zero_grad();
    x.set_grad(Tensor());
    const size_t before = cpu_memory_stats().allocated_bytes;
    cpu_reset_peak_memory_stats();
    y.backward(g);
    const size_t weight_bytes = 512 * 256 * sizeof(float);
    EXPECT_LT(cpu_memory_stats().peak_allocated_bytes - before, 8 * weight_bytes);
    // Against float64 products written per batch: dW = sum_b g_b^T x_b, dx = g W.
    const Tensor x64 = x.detach().to(kFloat64), g64 = g.to(kFloat64), w64 = fc->weight.detach().to(kFloat64);
    const Tensor dw = bmm(g64.transpose(1, 2), x64).sum(0);
    EXPECT_TRUE(fc->weight.grad().to(kFloat64).allclose(dw, 1e-4, 1e-3));
    EXPECT_TRUE(x.grad().to(kFloat64).allclose(matmul(g64, w64), 1e-4, 1e-4));
    if (bias) EXPECT_TRUE(fc->bias.grad().to(kFloat64).allclose(g64.sum({0, 1}), 1e-4, 1e-3));
  }
  // The folded result is a result, not a view: detach_ and in-place ops treat it as any op's.
  Tensor y = fc(x);
  y.relu_();
  y.detach_();
  EXPECT_FALSE(y.requires_grad());
  // A bias that is not 1-D still broadcasts as before (no folding), and a transposed input without a weight
  // gradient is not copied to be folded.
  const Tensor bias2 = randn({16, 512});
  EXPECT_TRUE(nn::F::linear(x.detach(), fc->weight.detach(), bias2)
                  .allclose(matmul(x.detach(), fc->weight.detach().t()) + bias2, 1e-5, 1e-5));
  const Tensor xt = randn({16, 32, 256}).transpose(0, 1);
  EXPECT_TRUE(matmul(xt, fc->weight.detach().t()).allclose(matmul(xt.contiguous(), fc->weight.detach().t()), 1e-5, 1e-5));
}

TEST(Linear, DefaultInitWithinPyTorchsBounds) {
  auto lin = nn::Linear(100, 50);
  double bound = 1.0 / std::sqrt(100.0);
  for (float v : lin->weight.to_vector<float>()) EXPECT_LE(std::abs(v), bound);
  for (float v : lin->bias.to_vector<float>()) EXPECT_LE(std::abs(v), bound);
  // and not degenerate: the spread of a uniform on [-b, b] has std b / sqrt(3)
  double std = kiln::std(lin->weight).item<double>();
  EXPECT_NEAR(std, bound / std::sqrt(3.0), 0.1 * bound);
}

TEST(Embedding, LooksUpRowsAndAccumulatesRepeats) {
  auto emb = nn::Embedding(6, 4);
  emb->to(kFloat64);
  Tensor idx = tensor(std::vector<int64_t>{1, 5, 1, 0, 2, 1}, {2, 3});
  Tensor out = emb(idx);
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(out[0][2].to_vector<double>(), emb->weight[1].to_vector<double>());
  out.sum().backward();
  EXPECT_EQ(emb->weight.grad()[1].to_vector<double>(), (std::vector<double>{3, 3, 3, 3}));  // used 3 times
  EXPECT_EQ(emb->weight.grad()[3].to_vector<double>(), (std::vector<double>{0, 0, 0, 0}));
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::embedding(idx, in[0]); }, {emb->weight});
  expect_error([&] { emb(tensor({0.5})); }, {"embedding", "int64"});
}

TEST(LayerNorm, MatchesItsFormulaAndGradchecks) {
  auto ln = nn::LayerNorm(Shape{4}, 1e-5);
  ln->to(kFloat64);
  {
    NoGradGuard g;
    ln->weight.copy_(tensor({1.0, 2.0, -1.0, 0.5}, kFloat64));
    ln->bias.copy_(tensor({0.0, 0.1, 0.2, 0.3}, kFloat64));
  }
  Tensor x = randn64({3, 4}, 3);
  std::vector<double> y = ln(x).to_vector<double>(), xv = x.to_vector<double>(), w = ln->weight.to_vector<double>(),
                      b = ln->bias.to_vector<double>();
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int k = 0; k < 4; ++k) mean += xv[r * 4 + k] / 4;
    for (int k = 0; k < 4; ++k) var += (xv[r * 4 + k] - mean) * (xv[r * 4 + k] - mean) / 4;
    for (int k = 0; k < 4; ++k)
      EXPECT_NEAR(y[r * 4 + k], (xv[r * 4 + k] - mean) / std::sqrt(var + 1e-5) * w[k] + b[k], 1e-12);
  }
  x.requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::layer_norm(in[0], {4}, in[1], in[2]); },
            {x, ln->weight, ln->bias});
  Tensor x3 = randn64({2, 3, 4}, 4).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::layer_norm(in[0], {3, 4}); }, {x3});
}

// The fused kernels' gradients and those of the differentiable form used under create_graph agree, over two
// normalized dims (flattened into one) of a non-contiguous input, with (3, 4) weight and bias.
TEST(LayerNorm, FusedAndCreateGraphGradientsAgree) {
  Tensor x = randn64({4, 2, 3}, 5).permute({1, 0, 2}).detach().requires_grad_();  // (2, 4, 3), not contiguous
  Tensor w = (randn64({4, 3}, 6) * 0.5 + 1.0).detach().requires_grad_();
  Tensor b = randn64({4, 3}, 7).requires_grad_();
  Tensor r = randn64({2, 4, 3}, 8);
  auto loss = [&] { return (nn::F::layer_norm(x, {4, 3}, w, b, 1e-5) * r).sum(); };
  std::vector<Tensor> plain = autograd::grad({loss()}, {x, w, b});
  std::vector<Tensor> recorded = autograd::grad({loss()}, {x, w, b}, {}, std::nullopt, /*create_graph=*/true);
  for (size_t i = 0; i < 3; ++i) {
    if (i < 2) EXPECT_TRUE(recorded[i].requires_grad()) << i;  // db = sum of r: a constant
    std::vector<double> a = plain[i].to_vector<double>(), c = recorded[i].detach().to_vector<double>();
    ASSERT_EQ(a.size(), c.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], c[k], 1e-12) << "gradient " << i << " element " << k;
  }
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::layer_norm(in[0], {4, 3}, in[1], in[2]); }, {x, w, b});
  expect_error([&] { nn::F::layer_norm(x, {4, 3}, ones({12}, kFloat64)); }, {"layer_norm", "(4, 3)", "(12)"});
}

TEST(Dropout, ZeroesAFractionAndScalesTheRest) {
  auto drop = nn::Dropout(0.25);
  Tensor x = ones({100000});
  std::vector<float> y = drop(x).to_vector<float>();
  int64_t zeros_seen = 0;
  for (float v : y) {
    if (v == 0) ++zeros_seen;
    else EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 100000, 0.25, 0.01);  // 7 sigma of a binomial
  drop->eval();
  EXPECT_EQ(drop(x).to_vector<float>(), x.to_vector<float>());
  expect_error([] { nn::Dropout(1.5); }, {"Dropout", "[0, 1]"});
}

TEST(Activations, ModulesCallTheirFunctions) {
  Tensor x = randn64({3, 4}, 5);
  EXPECT_EQ(nn::ReLU()(x).to_vector<double>(), relu(x).to_vector<double>());
  EXPECT_EQ(nn::GELU("tanh")(x).to_vector<double>(), gelu(x, "tanh").to_vector<double>());
  EXPECT_EQ(nn::LeakyReLU(0.2)(x).to_vector<double>(), leaky_relu(x, 0.2).to_vector<double>());
  EXPECT_EQ(nn::Softmax(1)(x).to_vector<double>(), softmax(x, 1).to_vector<double>());
  EXPECT_EQ(nn::LogSoftmax(0)(x).to_vector<double>(), log_softmax(x, 0).to_vector<double>());
  EXPECT_EQ(nn::Flatten()(zeros({2, 3, 4})).sizes(), (Shape{2, 12}));
}

TEST(Init, BoundsAndSpreads) {
  Tensor w = empty({256, 128});
  nn::init::kaiming_uniform_(w, 0.0, "fan_in", "relu");
  double bound = std::sqrt(2.0) * std::sqrt(3.0 / 128);
  EXPECT_LE(w.abs().max().item<double>(), bound);
  EXPECT_NEAR(kiln::std(w).item<double>(), std::sqrt(2.0 / 128), 0.05 * std::sqrt(2.0 / 128));
  nn::init::xavier_normal_(w);
  EXPECT_NEAR(kiln::std(w).item<double>(), std::sqrt(2.0 / (128 + 256)), 0.05 * std::sqrt(2.0 / 384));
  nn::init::trunc_normal_(w, 0.0, 1.0, -0.5, 1.0);
  EXPECT_GE(w.min().item<double>(), -0.5);
  EXPECT_LE(w.max().item<double>(), 1.0);
  // The mean of N(0, 1) truncated to [-0.5, 1]: (phi(-0.5) - phi(1)) / (Phi(1) - Phi(-0.5)) = 0.20663...
  EXPECT_NEAR(w.mean().item<double>(), 0.20663, 0.01);
  EXPECT_NEAR(nn::init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04), 1e-12);
  expect_error([] { nn::init::calculate_gain("swish"); }, {"calculate_gain", "swish"});
  expect_error([] { nn::init::fans(zeros({3})); }, {"fan", "(3)"});
}

}  // namespace
}  // namespace kiln
