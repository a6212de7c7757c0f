// Losses against their definitions written out in float64 scalar code (PyTorch's formulas, reductions and
// options), and gradchecked.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using nn::F::Reduction;
using test::expect_error;

using test::randn64;

// Cross-entropy of one row of logits against a class, with PyTorch's label smoothing: (1 - eps) of
// -w[t] logp[t] plus eps/C of -sum_c w[c] logp[c].
struct CeRef {
  std::vector<double> weight;  // empty: all 1
  double eps = 0;
  double row(const std::vector<double>& logits, int64_t t, double* w_t) const {
    size_t C = logits.size();
    double m = *std::max_element(logits.begin(), logits.end()), s = 0;
    for (double z : logits) s += std::exp(z - m);
    double lse = m + std::log(s);
    auto w = [&](size_t c) { return weight.empty() ? 1.0 : weight[c]; };
    double smooth = 0;
    for (size_t c = 0; c < C; ++c) smooth += -w(c) * (logits[c] - lse);
    *w_t = w(static_cast<size_t>(t));
    return (1 - eps) * (-w(static_cast<size_t>(t)) * (logits[t] - lse)) + eps / C * smooth;
  }
};

TEST(CrossEntropy, ClassIndicesWithWeightsIgnoreAndSmoothing) {
  const int64_t N = 6, C = 4;
  Tensor logits = randn64({N, C}, 1) * 3;
  std::vector<int64_t> targets = {0, 3, -100, 2, 1, 3};
  Tensor target = tensor(targets, {N});
  Tensor weight = tensor({0.5, 1.0, 2.0, 1.5}, kFloat64);
  std::vector<double> lv = logits.to_vector<double>();
  for (bool use_weight : {false, true})
    for (double eps : {0.0, 0.2}) {
      CeRef ref{use_weight ? std::vector<double>{0.5, 1.0, 2.0, 1.5} : std::vector<double>{}, eps};
      double total = 0, wsum = 0;
      std::vector<double> per;
      for (int64_t i = 0; i < N; ++i) {
        if (targets[i] == -100) {
          per.push_back(0);
          continue;
        }
        double wt;
        double l = ref.row(std::vector<double>(lv.begin() + i * C, lv.begin() + (i + 1) * C), targets[i], &wt);
        per.push_back(l);
        total += l;
        wsum += wt;
      }
      nn::F::CrossEntropyOptions opt;
      if (use_weight) opt.weight = weight;
      opt.label_smoothing = eps;
      SCOPED_TRACE(::testing::Message() << "weight " << use_weight << " eps " << eps);
      EXPECT_NEAR(nn::F::cross_entropy(logits, target, opt).item<double>(), total / wsum, 1e-12);
      opt.reduction = Reduction::Sum;
      EXPECT_NEAR(nn::F::cross_entropy(logits, target, opt).item<double>(), total, 1e-12);
      opt.reduction = Reduction::None;
      std::vector<double> got = nn::F::cross_entropy(logits, target, opt).to_vector<double>();
      for (int64_t i = 0; i < N; ++i) EXPECT_NEAR(got[i], per[i], 1e-12);
      opt.reduction = Reduction::Mean;
      Tensor z = logits.detach().requires_grad_();
      gradcheck([&](const std::vector<Tensor>& in) { return nn::F::cross_entropy(in[0], target, opt); }, {z});
    }
}

TEST(CrossEntropy, ProbabilityTargetsSpatialAndUnbatched) {
  Tensor logits = randn64({3, 5}, 2);
  Tensor probs = softmax(randn64({3, 5}, 3), 1);
  std::vector<double> lv = logits.to_vector<double>(), pv = probs.to_vector<double>();
  double total = 0;
  for (int i = 0; i < 3; ++i) {
    double m = -1e300, s = 0;
    for (int c = 0; c < 5; ++c) m = std::max(m, lv[i * 5 + c]);
    for (int c = 0; c < 5; ++c) s += std::exp(lv[i * 5 + c] - m);
    for (int c = 0; c < 5; ++c) total += -pv[i * 5 + c] * (lv[i * 5 + c] - m - std::log(s));
  }
  EXPECT_NEAR(nn::F::cross_entropy(logits, probs).item<double>(), total / 3, 1e-12);
  Tensor z = logits.detach().requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::cross_entropy(in[0], probs); }, {z});

  // (N, C, L) logits with (N, L) targets equal the (N*L, C) case.
  Tensor x = randn64({2, 3, 4}, 4);
  Tensor t = tensor(std::vector<int64_t>{0, 1, 2, 0, 2, 2, 1, 0}, {2, 4});
  Tensor flat = x.permute({0, 2, 1}).reshape({8, 3});
  EXPECT_NEAR(nn::F::cross_entropy(x, t).item<double>(), nn::F::cross_entropy(flat, t.reshape({8})).item<double>(),
              1e-12);
  // Unbatched: (C) logits, 0-dim target.
  EXPECT_NEAR(nn::F::cross_entropy(logits[0], scalar_tensor(2, kInt64)).item<double>(),
              nn::F::cross_entropy(logits.narrow(0, 0, 1), tensor(std::vector<int64_t>{2}, {1})).item<double>(), 1e-12);
}

// The fused kernel's backward and the differentiable form it switches to under create_graph give one gradient;
// (N, C, L) logits reach the kernel permuted, and their gradient comes back through the permutation.
TEST(CrossEntropy, FusedAndCreateGraphGradientsAgree) {
  Tensor x = randn64({3, 5, 4}, 7);
  Tensor t = tensor(std::vector<int64_t>{0, 4, -100, 2, 1, 1, 3, 0, 2, 4, 4, -100}, {3, 4});
  nn::F::CrossEntropyOptions opt;
  opt.weight = tensor({0.5, 1.0, 2.0, 1.5, 0.7}, kFloat64);
  opt.label_smoothing = 0.15;
  Tensor z = x.detach().requires_grad_();
  Tensor plain = autograd::grad({nn::F::cross_entropy(z, t, opt)}, {z})[0];
  Tensor recorded = autograd::grad({nn::F::cross_entropy(z, t, opt)}, {z}, {}, std::nullopt, /*create_graph=*/true)[0];
  EXPECT_TRUE(recorded.requires_grad());
  std::vector<double> a = plain.to_vector<double>(), b = recorded.detach().to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-14) << "element " << i;
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::cross_entropy(in[0], t, opt); }, {z});
  // An ignored position with NaN logits contributes nothing, in the loss and in both gradients.
  Tensor with_nan = x.clone();
  with_nan.select(0, 0).select(1, 2).fill_(std::numeric_limits<double>::quiet_NaN());  // t[0][2] is ignored
  Tensor zn = with_nan.detach().requires_grad_();
  EXPECT_FALSE(std::isnan(nn::F::cross_entropy(zn, t, opt).item<double>()));
  for (bool create_graph : {false, true}) {
    Tensor gn = autograd::grad({nn::F::cross_entropy(zn, t, opt)}, {zn}, {}, std::nullopt, create_graph)[0];
    for (double v : gn.detach().to_vector<double>()) EXPECT_FALSE(std::isnan(v)) << "create_graph " << create_graph;
  }
  // Every target ignored: the weighted mean is 0 / 0, NaN, as in PyTorch.
  Tensor all_ignored = full({3, 4}, -100, kInt64);
  EXPECT_TRUE(std::isnan(nn::F::cross_entropy(x, all_ignored).item<double>()));
}

TEST(CrossEntropy, BadTargetsAreClearErrors) {
  Tensor logits = zeros({2, 3});
  expect_error([&] { nn::F::cross_entropy(logits, tensor(std::vector<int64_t>{0, 3}, {2})); },
               {"cross_entropy", "target 3", "3 classes"});
  expect_error([&] { nn::F::cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2}, {3})); },
               {"cross_entropy", "(2, 3)", "(2)", "(3)"});
  expect_error([&] { nn::F::cross_entropy(logits, tensor(std::vector<int32_t>{0, 1}, {2})); }, {"int64", "int32"});
}

TEST(Losses, RegressionLossesMatchTheirFormulas) {
  Tensor a = randn64({4, 3}, 5), b = randn64({4, 3}, 6) * 2;
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  double mse = 0, l1 = 0, sl1 = 0, hub = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    double d = std::abs(av[i] - bv[i]);
    mse += d * d;
    l1 += d;
    sl1 += d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25;
    hub += d <= 1.5 ? 0.5 * d * d : 1.5 * (d - 0.75);
  }
  double n = static_cast<double>(av.size());
  EXPECT_NEAR(nn::F::mse_loss(a, b).item<double>(), mse / n, 1e-12);
  EXPECT_NEAR(nn::F::l1_loss(a, b, Reduction::Sum).item<double>(), l1, 1e-12);
  EXPECT_NEAR(nn::F::smooth_l1_loss(a, b, Reduction::Mean, 0.5).item<double>(), sl1 / n, 1e-12);
  EXPECT_NEAR(nn::F::huber_loss(a, b, Reduction::Mean, 1.5).item<double>(), hub / n, 1e-12);
  Tensor x = a.detach().requires_grad_(), y = b.detach().requires_grad_();
  for (auto f : std::vector<std::function<Tensor(const std::vector<Tensor>&)>>{
           [](auto& in) { return nn::F::mse_loss(in[0], in[1]); },
           [](auto& in) { return nn::F::l1_loss(in[0], in[1]); },
           [](auto& in) { return nn::F::smooth_l1_loss(in[0], in[1], Reduction::Sum, 0.5); },
           [](auto& in) { return nn::F::huber_loss(in[0], in[1], Reduction::None, 1.5); }})
    gradcheck(f, {x, y});
  expect_error([&] { nn::F::mse_loss(a, b.t()); }, {"mse_loss", "(4, 3)", "(3, 4)"});
}

TEST(Losses, BinaryCrossEntropyBothForms) {
  Tensor logits = randn64({5}, 7) * 4;
  Tensor target = tensor({0.0, 1.0, 0.3, 1.0, 0.0}, kFloat64);
  Tensor pos_weight = tensor({2.0}, kFloat64);
  std::vector<double> z = logits.to_vector<double>(), t = target.to_vector<double>();
  double bce = 0, bce_pw = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    double p = 1 / (1 + std::exp(-z[i]));
    bce += -(t[i] * std::log(p) + (1 - t[i]) * std::log(1 - p));
    bce_pw += -(2.0 * t[i] * std::log(p) + (1 - t[i]) * std::log(1 - p));
  }
  EXPECT_NEAR(nn::F::binary_cross_entropy(sigmoid(logits), target).item<double>(), bce / 5, 1e-12);
  EXPECT_NEAR(nn::F::binary_cross_entropy_with_logits(logits, target).item<double>(), bce / 5, 1e-12);
  EXPECT_NEAR(nn::F::binary_cross_entropy_with_logits(logits, target, {}, pos_weight).item<double>(), bce_pw / 5,
              1e-12);
  // Stable where sigmoid saturates: a logit of 800 against target 0 costs 800, not inf.
  EXPECT_NEAR(nn::F::binary_cross_entropy_with_logits(tensor({800.0}, kFloat64), tensor({0.0}, kFloat64)).item<double>(),
              800.0, 1e-9);
  // Probabilities of exactly 0 and 1 give the clamped -100, as PyTorch.
  EXPECT_NEAR(nn::F::binary_cross_entropy(tensor({0.0}, kFloat64), tensor({1.0}, kFloat64)).item<double>(), 100.0, 1e-12);
  Tensor x = logits.detach().requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::binary_cross_entropy_with_logits(in[0], target, {}, pos_weight); },
            {x});
  Tensor p = sigmoid(logits).detach().requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::binary_cross_entropy(in[0], target); }, {p});
  expect_error([&] { nn::F::binary_cross_entropy(logits, target); }, {"binary_cross_entropy", "[0, 1]", "with_logits"});
}

TEST(Losses, KlDivAndNll) {
  Tensor logq = log_softmax(randn64({2, 4}, 8), 1);
  Tensor p = softmax(randn64({2, 4}, 9), 1);
  p = where(ops::eq(arange(8, kInt64).reshape({2, 4}), 5), 0.0, p);  // a zero probability: contributes 0
  std::vector<double> lq = logq.to_vector<double>(), pv = p.to_vector<double>();
  double kl = 0;
  for (size_t i = 0; i < pv.size(); ++i)
    if (pv[i] > 0) kl += pv[i] * (std::log(pv[i]) - lq[i]);
  EXPECT_NEAR(nn::F::kl_div(logq, p, Reduction::Sum).item<double>(), kl, 1e-12);
  EXPECT_NEAR(nn::F::kl_div(logq, p, Reduction::Mean, false, /*batchmean=*/true).item<double>(), kl / 2, 1e-12);
  EXPECT_NEAR(nn::F::kl_div(logq, log(where(ops::gt(p, 0), p, 1e-300)), Reduction::Sum, true).item<double>(), kl, 1e-9);
  Tensor x = logq.detach().requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return nn::F::kl_div(in[0], p, Reduction::Sum); }, {x});

  Tensor target = tensor(std::vector<int64_t>{3, 1}, {2});
  nn::F::NllLossOptions opt;
  EXPECT_NEAR(nn::F::nll_loss(logq, target, opt).item<double>(), -(lq[3] + lq[5]) / 2, 1e-12);
}

}  // namespace
}  // namespace kiln
