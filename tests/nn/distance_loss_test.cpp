// Distances and the margin, embedding and likelihood losses of distance_losses.cpp against loops over float64
// elements written here from the formulas; their gradients by central differences; the modules against their
// functions. The parity suite compares them with LibTorch's as well.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

namespace F = nn::functional;
using F::Reduction;

double dl_mean(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s / static_cast<double>(v.size());
}

void dl_expect_scalar(const Tensor& t, double want, const std::string& what) {
  ASSERT_EQ(t.dim(), 0) << what;
  EXPECT_NEAR(t.item<double>(), want, 1e-13 * std::max(1.0, std::fabs(want))) << what;
}

// (rows, cols) float64 in [lo, hi).
Tensor dl_random(std::mt19937& rng, int64_t rows, int64_t cols, double lo = -2, double hi = 2) {
  return random_tensor({rows, cols}, kFloat64, rng, Layout::Contiguous, lo, hi);
}

Tensor dl_signs(const std::vector<double>& v) { return tensor(v, {static_cast<int64_t>(v.size())}, kFloat64); }

TEST(Distances, NormalizeCosineSimilarityAndPairwiseDistance) {
  std::mt19937 rng(41);
  Tensor a = dl_random(rng, 3, 4), b = dl_random(rng, 3, 4);
  a.narrow(0, 2, 1).zero_();  // a zero row: held at eps, not divided by 0
  const std::vector<double> av = values(a), bv = values(b);
  std::vector<double> normalized(12), cos(3), dist(3), dist1(3);
  for (int r = 0; r < 3; ++r) {
    double na = 0, nb = 0, dot = 0, d2 = 0, d1 = 0;
    for (int c = 0; c < 4; ++c) {
      const double x = av[r * 4 + c], y = bv[r * 4 + c];
      na += x * x, nb += y * y, dot += x * y;
      d2 += (x - y + 1e-6) * (x - y + 1e-6), d1 += std::fabs(x - y + 1e-6);
    }
    for (int c = 0; c < 4; ++c) normalized[r * 4 + c] = av[r * 4 + c] / std::max(std::sqrt(na), 1e-12);
    cos[r] = dot / (std::max(std::sqrt(na), 1e-8) * std::max(std::sqrt(nb), 1e-8));
    dist[r] = std::sqrt(d2), dist1[r] = d1;
  }
  expect_tensor_near(F::normalize(a), normalized, {3, 4}, 1e-14, 1e-14);
  expect_tensor_near(F::cosine_similarity(a, b), cos, {3}, 1e-14, 1e-14);
  expect_tensor_near(F::pairwise_distance(a, b), dist, {3}, 1e-14, 1e-14);
  expect_tensor_near(F::pairwise_distance(a, b, 1.0, 1e-6, true), dist1, {3, 1}, 1e-14, 1e-14);
  // Broadcasting: one vector against every row, along dim 1.
  expect_tensor_near(F::cosine_similarity(b, b[1]), values(F::cosine_similarity(b, b[1].expand({3, 4}))), {3}, 0, 0);
  EXPECT_NEAR(F::cosine_similarity(b, b[1])[1].item<double>(), 1.0, 1e-15);
  // Along dim 0, and the modules.
  expect_tensor_near(F::normalize(a.t(), 2.0, 0), values(F::normalize(a).t()), {4, 3}, 1e-15, 1e-15);
  EXPECT_TRUE(equal(nn::CosineSimilarity(0)(a.t(), b.t()), F::cosine_similarity(a, b)));
  EXPECT_TRUE(equal(nn::PairwiseDistance(1.0)(a, b), F::pairwise_distance(a, b, 1.0)));
}

TEST(MarginLosses, RankingHingeSoftMarginAndCosineEmbedding) {
  std::mt19937 rng(42);
  const Tensor x1 = dl_random(rng, 1, 6).reshape({6}), x2 = dl_random(rng, 1, 6).reshape({6});
  const Tensor y = dl_signs({1, -1, -1, 1, 1, -1});
  const std::vector<double> a = values(x1), b = values(x2), s = values(y);
  std::vector<double> ranking(6), hinge(6), soft(6);
  for (size_t i = 0; i < 6; ++i) {
    ranking[i] = std::max(0.0, -s[i] * (a[i] - b[i]) + 0.3);
    hinge[i] = s[i] == 1 ? a[i] : std::max(0.0, 0.7 - a[i]);
    soft[i] = std::log1p(std::exp(-s[i] * a[i]));
  }
  expect_tensor_near(F::margin_ranking_loss(x1, x2, y, 0.3, Reduction::None), ranking, {6}, 1e-15, 1e-15);
  dl_expect_scalar(F::margin_ranking_loss(x1, x2, y, 0.3), dl_mean(ranking), "margin_ranking mean");
  dl_expect_scalar(F::hinge_embedding_loss(x1, y, 0.7, Reduction::Sum), dl_mean(hinge) * 6, "hinge sum");
  dl_expect_scalar(F::soft_margin_loss(x1, y), dl_mean(soft), "soft margin");
  // No overflow where e^(-y x) would: log(1 + e^800) is 800.
  dl_expect_scalar(F::soft_margin_loss(tensor({-800.0}, kFloat64), dl_signs({1})), 800, "soft margin at -800");

  const Tensor e1 = dl_random(rng, 4, 5), e2 = dl_random(rng, 4, 5), ey = dl_signs({1, -1, 1, -1});
  const std::vector<double> p = values(e1), q = values(e2), ys = values(ey);
  std::vector<double> cosine_embedding(4);
  for (int r = 0; r < 4; ++r) {
    double dot = 0, n1 = 1e-12, n2 = 1e-12;
    for (int c = 0; c < 5; ++c) dot += p[r * 5 + c] * q[r * 5 + c], n1 += p[r * 5 + c] * p[r * 5 + c], n2 += q[r * 5 + c] * q[r * 5 + c];
    const double cos = dot / std::sqrt(n1 * n2);
    cosine_embedding[r] = ys[r] == 1 ? 1 - cos : std::max(0.0, cos - (-0.2));
  }
  expect_tensor_near(F::cosine_embedding_loss(e1, e2, ey, -0.2, Reduction::None), cosine_embedding, {4}, 1e-14, 1e-14);
  dl_expect_scalar(F::cosine_embedding_loss(e1[0], e2[0], ey[0], -0.2), cosine_embedding[0], "1-D inputs");
}

TEST(MarginLosses, TripletWithAndWithoutSwap) {
  std::mt19937 rng(43);
  const Tensor an = dl_random(rng, 5, 3), po = dl_random(rng, 5, 3), ne = dl_random(rng, 5, 3);
  auto dist = [](const std::vector<double>& u, const std::vector<double>& v, int r) {
    double s = 0;
    for (int c = 0; c < 3; ++c) s += std::pow(std::fabs(u[r * 3 + c] - v[r * 3 + c] + 1e-6), 3);
    return std::cbrt(s);
  };
  const std::vector<double> a = values(an), p = values(po), n = values(ne);
  for (bool swap : {false, true}) {
    std::vector<double> want(5);
    for (int r = 0; r < 5; ++r) {
      double to_negative = dist(a, n, r);
      if (swap) to_negative = std::min(to_negative, dist(p, n, r));
      want[static_cast<size_t>(r)] = std::max(0.0, dist(a, p, r) - to_negative + 1.5);
    }
    const F::TripletMarginOptions o{.margin = 1.5, .p = 3, .swap = swap, .reduction = Reduction::None};
    expect_tensor_near(F::triplet_margin_loss(an, po, ne, o), want, {5}, 1e-14, 1e-14);
  }
}

TEST(LikelihoodLosses, PoissonAndGaussian) {
  std::mt19937 rng(44);
  const Tensor rate = dl_random(rng, 2, 4, 0.1, 3), counts = tensor(std::vector<double>{0, 1, 2, 5, 3, 0, 7, 1}, {2, 4});
  const std::vector<double> x = values(rate), k = values(counts);
  std::vector<double> log_input(8), plain(8), full(8);
  for (size_t i = 0; i < 8; ++i) {
    log_input[i] = std::exp(x[i]) - k[i] * x[i];
    plain[i] = x[i] - k[i] * std::log(x[i] + 1e-8);
    full[i] = log_input[i] + (k[i] > 1 ? k[i] * std::log(k[i]) - k[i] + 0.5 * std::log(2 * std::numbers::pi * k[i]) : 0);
  }
  expect_tensor_near(F::poisson_nll_loss(rate, counts, {.reduction = Reduction::None}), log_input, {2, 4}, 1e-14, 1e-14);
  expect_tensor_near(F::poisson_nll_loss(rate, counts, {.log_input = false, .reduction = Reduction::None}), plain,
                     {2, 4}, 1e-14, 1e-14);
  dl_expect_scalar(F::poisson_nll_loss(rate, counts, {.full = true}), dl_mean(full), "poisson full");

  const Tensor mu = dl_random(rng, 3, 2), obs = dl_random(rng, 3, 2), var = dl_random(rng, 3, 2, 0.2, 2);
  const std::vector<double> m = values(mu), o = values(obs), v = values(var);
  std::vector<double> nll(6), shared(6);
  for (size_t i = 0; i < 6; ++i) {
    nll[i] = 0.5 * (std::log(v[i]) + (m[i] - o[i]) * (m[i] - o[i]) / v[i]);
    const double row_var = v[i / 2 * 2];  // one variance per row: column 0 of var
    shared[i] = 0.5 * (std::log(row_var) + (m[i] - o[i]) * (m[i] - o[i]) / row_var);
  }
  expect_tensor_near(F::gaussian_nll_loss(mu, obs, var, {.reduction = Reduction::None}), nll, {3, 2}, 1e-14, 1e-14);
  dl_expect_scalar(F::gaussian_nll_loss(mu, obs, var, {.full = true}), dl_mean(nll) + 0.5 * std::log(2 * std::numbers::pi),
                   "gaussian full");
  const Tensor column = var.narrow(1, 0, 1);  // (3, 1)
  expect_tensor_near(F::gaussian_nll_loss(mu, obs, column, {.reduction = Reduction::None}), shared, {3, 2}, 1e-14, 1e-14);
  expect_tensor_near(F::gaussian_nll_loss(mu, obs, column.reshape({3}), {.reduction = Reduction::None}), shared, {3, 2},
                     1e-14, 1e-14);
  // A variance below eps counts as eps.
  const Tensor tiny = kiln::full({3, 2}, 1e-9, kFloat64);
  std::vector<double> held(6);
  for (size_t i = 0; i < 6; ++i) held[i] = 0.5 * (std::log(1e-6) + (m[i] - o[i]) * (m[i] - o[i]) / 1e-6);
  expect_tensor_near(F::gaussian_nll_loss(mu, obs, tiny, {.reduction = Reduction::None}), held, {3, 2}, 1e-13, 1e-13);
  expect_error([&] { F::gaussian_nll_loss(mu, obs, var.narrow(0, 0, 2)); }, {"var of shape (2, 2) fits neither"});
  expect_error([&] { F::gaussian_nll_loss(mu, obs, -var); }, {"var has negative entries"});
}

TEST(MarginLosses, MultiLabelSoftMarginAndMultiMargin) {
  std::mt19937 rng(45);
  const Tensor x = dl_random(rng, 3, 4);
  const Tensor labels = tensor(std::vector<double>{1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0}, {3, 4});
  const Tensor w = tensor(std::vector<double>{0.5, 2, 1, 0.1});
  const std::vector<double> xv = values(x), lv = values(labels), wv = values(w);
  auto log_sig = [](double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); };
  std::vector<double> multilabel(3);
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int c = 0; c < 4; ++c) {
      const double z = xv[r * 4 + c], l = lv[r * 4 + c];
      s += -wv[c] * (l * log_sig(z) + (1 - l) * log_sig(-z));
    }
    multilabel[static_cast<size_t>(r)] = s / 4;
  }
  expect_tensor_near(F::multilabel_soft_margin_loss(x, labels, w, Reduction::None), multilabel, {3}, 1e-14, 1e-14);

  const Tensor classes = tensor(std::vector<int64_t>{2, 0, 3});
  for (int64_t p : {1, 2}) {
    std::vector<double> want(3);
    for (int r = 0; r < 3; ++r) {
      const auto y = static_cast<int64_t>(values(classes)[static_cast<size_t>(r)]);
      double s = 0;
      for (int c = 0; c < 4; ++c) {
        if (c == y) continue;
        const double z = std::max(0.0, 0.8 - xv[r * 4 + y] + xv[r * 4 + c]);
        s += wv[static_cast<size_t>(y)] * (p == 1 ? z : z * z);
      }
      want[static_cast<size_t>(r)] = s / 4;
    }
    const F::MultiMarginOptions o{.p = p, .margin = 0.8, .weight = w, .reduction = Reduction::None};
    expect_tensor_near(F::multi_margin_loss(x, classes, o), want, {3}, 1e-14, 1e-14);
    dl_expect_scalar(F::multi_margin_loss(x[1], classes[1], o), want[1], "one sample");
  }
  expect_error([&] { F::multi_margin_loss(x, tensor(std::vector<int64_t>{0, 4, 1})); }, {"outside [0, 4)"});
  expect_error([&] { F::multi_margin_loss(x, classes, {.p = 3}); }, {"p = 3: expected 1 or 2"});
}

TEST(MarginLosses, GradientsMatchCentralDifferences) {
  std::mt19937 rng(46);
  auto leaf = [&](int64_t r, int64_t c, double lo = -2, double hi = 2) { return dl_random(rng, r, c, lo, hi).requires_grad_(); };
  const Tensor y6 = dl_signs({1, -1, -1, 1, 1, -1}).view({2, 3}), y2 = dl_signs({1, -1});
  const Tensor classes = tensor(std::vector<int64_t>{2, 0});
  const Tensor labels = tensor(std::vector<double>{1, 0, 1, 0, 1, 1}, {2, 3});
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  const std::vector<std::pair<std::string, std::pair<Fn, std::vector<Tensor>>>> cases = {
      {"normalize", {[](auto& in) { return F::normalize(in[0], 3.0); }, {leaf(2, 3)}}},
      {"cosine_similarity", {[](auto& in) { return F::cosine_similarity(in[0], in[1]); }, {leaf(2, 3), leaf(2, 3)}}},
      {"pairwise_distance", {[](auto& in) { return F::pairwise_distance(in[0], in[1]); }, {leaf(2, 3), leaf(2, 3)}}},
      {"margin_ranking", {[&](auto& in) { return F::margin_ranking_loss(in[0], in[1], y6, 0.5); }, {leaf(2, 3), leaf(2, 3)}}},
      {"hinge_embedding", {[&](auto& in) { return F::hinge_embedding_loss(in[0], y6, 0.3); }, {leaf(2, 3)}}},
      {"soft_margin", {[&](auto& in) { return F::soft_margin_loss(in[0], y6); }, {leaf(2, 3)}}},
      {"cosine_embedding", {[&](auto& in) { return F::cosine_embedding_loss(in[0], in[1], y2, -0.9); }, {leaf(2, 3), leaf(2, 3)}}},
      {"triplet_swap", {[](auto& in) { return F::triplet_margin_loss(in[0], in[1], in[2], {.swap = true}); },
                        {leaf(2, 3), leaf(2, 3), leaf(2, 3)}}},
      {"poisson", {[&](auto& in) { return F::poisson_nll_loss(in[0], labels * 3.0, {.log_input = false, .full = true}); },
                   {leaf(2, 3, 0.2, 2)}}},
      {"gaussian", {[](auto& in) { return F::gaussian_nll_loss(in[0], in[1], in[2]); }, {leaf(2, 3), leaf(2, 3), leaf(2, 1, 0.3, 2)}}},
      {"multilabel_soft_margin", {[&](auto& in) { return F::multilabel_soft_margin_loss(in[0], labels); }, {leaf(2, 3)}}},
      {"multi_margin_p2", {[&](auto& in) { return F::multi_margin_loss(in[0], classes, {.p = 2, .margin = 2.5}); }, {leaf(2, 3)}}},
  };
  for (const auto& [name, c] : cases) {
    const auto r = autograd::gradcheck(c.first, c.second);
    EXPECT_TRUE(r.ok) << name << ": " << r.report;
  }
}

TEST(MarginLosses, ModulesCallTheirFunctions) {
  std::mt19937 rng(47);
  const Tensor a = dl_random(rng, 4, 3), b = dl_random(rng, 4, 3), c = dl_random(rng, 4, 3);
  const Tensor y = dl_signs({1, -1, 1, 1});
  EXPECT_TRUE(equal(nn::MarginRankingLoss({.margin = 0.2})(a.select(1, 0), b.select(1, 0), y),
                    F::margin_ranking_loss(a.select(1, 0), b.select(1, 0), y, 0.2)));
  EXPECT_TRUE(equal(nn::HingeEmbeddingLoss({.margin = 2})(a.select(1, 0), y), F::hinge_embedding_loss(a.select(1, 0), y, 2)));
  EXPECT_TRUE(equal(nn::SoftMarginLoss()(a.select(1, 0), y), F::soft_margin_loss(a.select(1, 0), y)));
  EXPECT_TRUE(equal(nn::CosineEmbeddingLoss({.margin = 0.1})(a, b, y), F::cosine_embedding_loss(a, b, y, 0.1)));
  EXPECT_TRUE(equal(nn::TripletMarginLoss({.margin = 0.4, .p = 1})(a, b, c),
                    F::triplet_margin_loss(a, b, c, {.margin = 0.4, .p = 1})));
  EXPECT_TRUE(equal(nn::PoissonNLLLoss({.log_input = true})(a, c.abs()), F::poisson_nll_loss(a, c.abs())));
  EXPECT_TRUE(equal(nn::GaussianNLLLoss()(a, b, c.abs()), F::gaussian_nll_loss(a, b, c.abs())));
  const Tensor w = tensor(std::vector<double>{1, 2, 3});
  nn::MultiLabelSoftMarginLoss multilabel({.weight = w});
  EXPECT_TRUE(equal(multilabel(a, (b > 0).to(kFloat64)), F::multilabel_soft_margin_loss(a, (b > 0).to(kFloat64), w)));
  nn::MultiMarginLoss multi({.p = 2, .weight = w});
  const Tensor classes = tensor(std::vector<int64_t>{0, 2, 1, 1});
  EXPECT_TRUE(equal(multi(a, classes), F::multi_margin_loss(a, classes, {.p = 2, .weight = w})));
  EXPECT_EQ(multi->named_buffers().at(0).first, "weight");
  EXPECT_EQ(multi->extra_repr(), "p=2, margin=1, reduction=mean");
  EXPECT_EQ(nn::TripletMarginLoss()->extra_repr(), "margin=1, p=2, eps=1e-06, swap=false, reduction=mean");
  expect_error([] { nn::TripletMarginLoss({.margin = 0}); }, {"TripletMarginLoss: margin = 0: expected > 0"});
  expect_error([] { nn::CosineEmbeddingLoss({.margin = 2}); }, {"CosineEmbeddingLoss: margin = 2"});
  expect_error([] { nn::MultiMarginLoss({.p = 0}); }, {"MultiMarginLoss: p = 0"});
  expect_error([&] { F::margin_ranking_loss(a, b.t(), a); }, {"margin_ranking_loss: x1 of shape (4, 3) and x2 of shape (3, 4)"});
}

}  // namespace
}  // namespace kiln::test
