// Convolution, pooling and batch/instance/group normalization against direct loops in float64, and gradchecked.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using nn::F::Pair;
using test::expect_error;

using test::randn64;

// The definition: out[n][o][i][j] = b[o] + sum over c in o's group, u, v of
// x[n][c][i sh - ph + u dh][j sw - pw + v dw] w[o][c - group start][u][v], out-of-range x being 0.
std::vector<double> conv2d_reference(const Tensor& x, const Tensor& w, const Tensor& b, Pair s, Pair p, Pair d,
                                     int64_t groups, int64_t* oh_out, int64_t* ow_out) {
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), kh = w.size(2), kw = w.size(3);
  int64_t oh = (H + 2 * p.h - d.h * (kh - 1) - 1) / s.h + 1, ow = (W + 2 * p.w - d.w * (kw - 1) - 1) / s.w + 1;
  *oh_out = oh;
  *ow_out = ow;
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(),
                      bv = b.defined() ? b.to_vector<double>() : std::vector<double>(O, 0.0);
  int64_t cg = C / groups, og = O / groups;
  std::vector<double> out(N * O * oh * ow);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bv[o];
          int64_t g = o / og;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                int64_t y = i * s.h - p.h + u * d.h, z = j * s.w - p.w + v * d.w;
                if (y < 0 || y >= H || z < 0 || z >= W) continue;
                acc += xv[((n * C + g * cg + c) * H + y) * W + z] * wv[((o * cg + c) * kh + u) * kw + v];
              }
          out[((n * O + o) * oh + i) * ow + j] = acc;
        }
  return out;
}

struct ConvCase {
  const char* name;
  Shape x, w;
  Pair stride, padding, dilation;
  int64_t groups;
  bool bias;
};

TEST(Conv2d, MatchesTheDefinitionAndGradchecks) {
  std::vector<ConvCase> cases = {
      {"plain", {2, 3, 6, 5}, {4, 3, 3, 3}, 1, 0, 1, 1, true},
      {"padded", {1, 2, 5, 5}, {3, 2, 3, 3}, 1, 1, 1, 1, true},
      {"strided", {1, 2, 7, 6}, {2, 2, 3, 2}, {2, 3}, {1, 0}, 1, 1, false},
      {"dilated", {1, 1, 7, 7}, {2, 1, 3, 3}, 1, 2, 2, 1, true},
      {"grouped", {2, 4, 5, 5}, {6, 2, 3, 3}, 1, 1, 1, 2, true},
      {"depthwise", {1, 3, 4, 4}, {3, 1, 2, 2}, 1, 0, 1, 3, true},
      {"1x1", {2, 3, 3, 3}, {5, 3, 1, 1}, 1, 0, 1, 1, true},
  };
  uint64_t seed = 10;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = randn64(c.x, seed++), w = randn64(c.w, seed++), b = c.bias ? randn64({c.w[0]}, seed++) : Tensor();
    int64_t oh, ow;
    std::vector<double> ref = conv2d_reference(x, w, b, c.stride, c.padding, c.dilation, c.groups, &oh, &ow);
    Tensor y = nn::F::conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    EXPECT_EQ(y.sizes(), (Shape{c.x[0], c.w[0], oh, ow}));
    std::vector<double> got = y.to_vector<double>();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-12);
    x.requires_grad_();
    w.requires_grad_();
    std::vector<Tensor> in = {x, w};
    if (b.defined()) in.push_back(b.requires_grad_());
    gradcheck([&](const std::vector<Tensor>& t) {
      return nn::F::conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), c.stride, c.padding, c.dilation, c.groups);
    }, in);
  }
}

TEST(Conv2d, ModuleShapesInitAndErrors) {
  auto conv = nn::Conv2d(3, 8, 3, nn::Conv2dOptions{.padding = 1});
  EXPECT_EQ(conv->weight.sizes(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(conv(zeros({2, 3, 10, 10})).sizes(), (Shape{2, 8, 10, 10}));
  double bound = 1.0 / std::sqrt(27.0);
  EXPECT_LE(conv->weight.abs().max().item<double>(), bound);
  expect_error([&] { conv(zeros({2, 4, 10, 10})); }, {"conv2d", "(2, 4, 10, 10)", "3 channels"});
  expect_error([&] { nn::Conv2d(3, 8, 3, nn::Conv2dOptions{.groups = 2}); }, {"Conv2d", "divisible by groups 2"});
  // a non-square kernel as a braced list, with and without options
  EXPECT_EQ(nn::Conv2d(3, 8, {3, 5})->weight.sizes(), (Shape{8, 3, 3, 5}));
  EXPECT_EQ(nn::Conv2d(3, 8, {1, 3}, {.stride = 2, .padding = {0, 1}})(zeros({1, 3, 6, 6})).sizes(),
            (Shape{1, 8, 3, 3}));
  auto c1 = nn::Conv1d(2, 3, 3, nn::Conv1dOptions{.padding = 1});
  Tensor x1 = randn64({2, 2, 7}, 30);
  c1->to(kFloat64);
  // Conv1d is conv2d over a height of 1.
  Tensor y1 = c1(x1);
  Tensor y2 = nn::F::conv2d(x1.unsqueeze(2), c1->weight.unsqueeze(2), c1->bias, 1, {0, 1}).squeeze(2);
  EXPECT_EQ(y1.to_vector<double>(), y2.to_vector<double>());
}

TEST(Pooling, MaxAvgAdaptiveMatchTheirDefinitions) {
  Tensor x = randn64({2, 3, 6, 7}, 40);
  std::vector<double> xv = x.to_vector<double>();
  auto at = [&](int64_t n, int64_t c, int64_t i, int64_t j) { return xv[((n * 3 + c) * 6 + i) * 7 + j]; };
  // max_pool2d 3x3, stride 2, padding 1 (padding is -inf)
  Tensor mp = nn::F::max_pool2d(x, 3, 2, 1);
  EXPECT_EQ(mp.sizes(), (Shape{2, 3, 3, 4}));
  std::vector<double> mv = mp.to_vector<double>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          double best = -std::numeric_limits<double>::infinity();
          for (int64_t u = 0; u < 3; ++u)
            for (int64_t v = 0; v < 3; ++v) {
              int64_t y = i * 2 - 1 + u, z = j * 2 - 1 + v;
              if (y >= 0 && y < 6 && z >= 0 && z < 7) best = std::max(best, at(n, c, y, z));
            }
          EXPECT_EQ(mv[((n * 3 + c) * 3 + i) * 4 + j], best);
        }
  // avg_pool2d 2x2 (stride 2): (6, 7) -> (3, 3)
  std::vector<double> av = nn::F::avg_pool2d(x, 2).to_vector<double>();
  EXPECT_NEAR(av[0], (at(0, 0, 0, 0) + at(0, 0, 0, 1) + at(0, 0, 1, 0) + at(0, 0, 1, 1)) / 4, 1e-12);
  // adaptive to (4, 3): bins of uneven size; bin (1, 2) covers rows [1, 3) and columns [4, 7)
  std::vector<double> ad = nn::F::adaptive_avg_pool2d(x, {4, 3}).to_vector<double>();
  double s = 0;
  for (int64_t y = 1; y < 3; ++y)
    for (int64_t z = 4; z < 7; ++z) s += at(0, 0, y, z);
  EXPECT_NEAR(ad[1 * 3 + 2], s / 6, 1e-12);
  EXPECT_EQ(nn::F::adaptive_avg_pool2d(x, 1).sizes(), (Shape{2, 3, 1, 1}));

  Tensor xs = randn64({1, 2, 5, 5}, 41).requires_grad_();
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::max_pool2d(t[0], 2, 1); }, {xs});
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::avg_pool2d(t[0], 3, 2, 1, false); }, {xs});
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::adaptive_avg_pool2d(t[0], {2, 3}); }, {xs});
  // A window of equal values gives its whole gradient to the first one, as PyTorch's max_pool2d does.
  Tensor flat = zeros({1, 1, 2, 2}, kFloat64).requires_grad_();
  nn::F::max_pool2d(flat, 2).sum().backward();
  EXPECT_EQ(flat.grad().to_vector<double>(), (std::vector<double>{1, 0, 0, 0}));
}

TEST(BatchNorm, TrainingEvalAndRunningStatistics) {
  auto bn = nn::BatchNorm2d(3);
  bn->to(kFloat64);
  Tensor x = randn64({4, 3, 2, 5}, 50) * 2 + 1;
  Tensor y = bn(x);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    const int count = 4 * 10;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t k = 0; k < 10; ++k) mean += xv[(n * 3 + c) * 10 + k] / count;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t k = 0; k < 10; ++k) var += std::pow(xv[(n * 3 + c) * 10 + k] - mean, 2) / count;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t k = 0; k < 10; ++k)
        EXPECT_NEAR(yv[(n * 3 + c) * 10 + k], (xv[(n * 3 + c) * 10 + k] - mean) / std::sqrt(var + 1e-5), 1e-12);
    EXPECT_NEAR(bn->running_mean.to_vector<double>()[c], 0.1 * mean, 1e-12);
    EXPECT_NEAR(bn->running_var.to_vector<double>()[c], 0.9 + 0.1 * var * count / (count - 1), 1e-12);
  }
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  bn->eval();
  std::vector<double> rm = bn->running_mean.to_vector<double>(), rv = bn->running_var.to_vector<double>();
  std::vector<double> ye = bn(x).to_vector<double>();
  EXPECT_NEAR(ye[7], (xv[7] - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-12);
  EXPECT_TRUE(bn->state_dict().count("running_var"));
  Tensor xs = randn64({3, 2, 2, 2}, 51).requires_grad_();
  Tensor w = randn64({2}, 52).requires_grad_(), b = randn64({2}, 53).requires_grad_();
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::batch_norm(t[0], {}, {}, t[1], t[2], true); }, {xs, w, b});
  expect_error([&] { bn(zeros({2, 3, 4})); }, {"BatchNorm2d", "4-D", "(2, 3, 4)"});
  expect_error([&] { nn::BatchNorm1d(3)(zeros({1, 3})); }, {"batch_norm", "more than one value"});
}

TEST(GroupNorm, MatchesItsDefinition) {
  Tensor x = randn64({2, 4, 3}, 60);
  Tensor y = nn::F::group_norm(x, 2);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t g = 0; g < 2; ++g) {
      double mean = 0, var = 0;
      for (int64_t k = 0; k < 6; ++k) mean += xv[n * 12 + g * 6 + k] / 6;
      for (int64_t k = 0; k < 6; ++k) var += std::pow(xv[n * 12 + g * 6 + k] - mean, 2) / 6;
      for (int64_t k = 0; k < 6; ++k)
        EXPECT_NEAR(yv[n * 12 + g * 6 + k], (xv[n * 12 + g * 6 + k] - mean) / std::sqrt(var + 1e-5), 1e-12);
    }
  Tensor xs = x.detach().requires_grad_();
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::group_norm(t[0], 2); }, {xs});
  expect_error([] { nn::GroupNorm(3, 4); }, {"GroupNorm", "4 channels", "3 groups"});
}

// Each (sample, channel) normalized over its positions; running statistics, when tracked, move by momentum
// towards the mean over samples of each one's mean and unbiased variance; eval uses them.
TEST(InstanceNorm, MatchesItsDefinitionTracksStatisticsAndGradchecks) {
  const Tensor x = randn64({3, 2, 5}, 61) * 2.0 + 1.0;  // (N, C, L)
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> want(xv.size()), batch_mean(2, 0.0), batch_var(2, 0.0);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t c = 0; c < 2; ++c) {
      const double* v = &xv[static_cast<size_t>((n * 2 + c) * 5)];
      double mean = 0, ss = 0;
      for (int k = 0; k < 5; ++k) mean += v[k] / 5;
      for (int k = 0; k < 5; ++k) ss += (v[k] - mean) * (v[k] - mean);
      for (int k = 0; k < 5; ++k) {
        want[static_cast<size_t>((n * 2 + c) * 5 + k)] = (v[k] - mean) / std::sqrt(ss / 5 + 1e-5);
      }
      batch_mean[c] += mean / 3;
      batch_var[c] += ss / 4 / 3;
    }
  auto norm = nn::InstanceNorm1d(2, nn::InstanceNormOptions{.momentum = 0.25, .track_running_stats = true});
  norm->to(kFloat64);
  test::expect_tensor_near(norm(x), want, {3, 2, 5}, 1e-12, 1e-12, "InstanceNorm1d");
  for (int64_t c = 0; c < 2; ++c) {
    EXPECT_NEAR(norm->running_mean[c].item<double>(), 0.25 * batch_mean[c], 1e-12);
    EXPECT_NEAR(norm->running_var[c].item<double>(), 0.75 + 0.25 * batch_var[c], 1e-12);
  }
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 0);  // as PyTorch: instance norm does not count
  norm->eval();  // now the running statistics normalize
  const Tensor rm = norm->running_mean.view({1, 2, 1}), rv = norm->running_var.view({1, 2, 1});
  test::expect_tensor_near(norm(x), test::values((x - rm) / sqrt(rv + 1e-5)), {3, 2, 5}, 1e-12, 1e-12, "eval");
  // Without tracking, eval still uses the input's statistics; an unbatched (C, L) input is one sample.
  auto plain = nn::InstanceNorm1d(2);
  plain->eval();
  test::expect_tensor_near(plain(x.select(0, 1)), std::vector<double>(want.begin() + 10, want.begin() + 20), {2, 5},
                           1e-12, 1e-12, "unbatched");
  EXPECT_EQ(plain->named_parameters().size(), 0u);  // affine is off by default
  auto affine = nn::InstanceNorm2d(2, nn::InstanceNormOptions{.affine = true});
  EXPECT_EQ(affine->named_parameters().size(), 2u);
  Tensor xs = randn64({2, 2, 3, 3}, 62).requires_grad_(), w = randn64({2}, 63).requires_grad_(),
         b = randn64({2}, 64).requires_grad_();
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::instance_norm(t[0], {}, {}, t[1], t[2]); }, {xs, w, b});
  expect_error([&] { (void)affine(zeros({2, 3, 4, 4})); }, {"InstanceNorm2d", "2 channels"});
  expect_error([&] { (void)affine(zeros({2, 4})); }, {"InstanceNorm2d", "4-D", "3-D"});
}

}  // namespace
}  // namespace kiln
