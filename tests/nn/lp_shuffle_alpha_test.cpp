// The LP pools, the channel shuffle and the alpha dropouts against references written here: the LP pools
// against a float64 window loop of (sum x^p)^(1/p) (a ceil_mode window past the end scaled as PyTorch scales it),
// the shuffle against its index map, alpha dropout against its two output values per element and the mean and
// variance it exists to keep; gradients by gradcheck or from the same definitions. tests/parity compares the
// 1-d and 2-d LP pools and the shuffle with LibTorch.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::randn64;
namespace F = nn::functional;
using LpDims = std::array<int64_t, 3>;

// x (N, C, D, H, W) as float64 values: each output the window's sum of x^p, divided by the window's count
// clipped to the input and multiplied by the whole kernel's (PyTorch's average-pool route), to the power 1/p.
std::vector<double> lp_pool_reference(const std::vector<double>& x, int64_t planes, LpDims in, LpDims out,
                                      LpDims kernel, LpDims stride, double p) {
  std::vector<double> y;
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t i = 0; i < out[0]; ++i)
      for (int64_t j = 0; j < out[1]; ++j)
        for (int64_t l = 0; l < out[2]; ++l) {
          double sum = 0;
          int64_t count = 0;
          for (int64_t u = i * stride[0]; u < std::min(i * stride[0] + kernel[0], in[0]); ++u)
            for (int64_t v = j * stride[1]; v < std::min(j * stride[1] + kernel[1], in[1]); ++v)
              for (int64_t w = l * stride[2]; w < std::min(l * stride[2] + kernel[2], in[2]); ++w, ++count)
                sum += std::pow(x[static_cast<size_t>(((q * in[0] + u) * in[1] + v) * in[2] + w)], p);
          y.push_back(std::pow(sum / static_cast<double>(count) * static_cast<double>(kernel[0] * kernel[1] * kernel[2]),
                               1.0 / p));
        }
  return y;
}

int64_t pooled_size(int64_t in, int64_t k, int64_t s, bool ceil_mode) {
  int64_t n = ceil_mode ? (in - k + s - 1) / s + 1 : (in - k) / s + 1;
  if (ceil_mode && (n - 1) * s >= in) --n;  // the last window must start inside the input
  return n;
}

void expect_close_values(const Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> g = test::values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

TEST(LPPool, EveryRankMatchesTheWindowSums) {
  struct Case {
    LpDims in, kernel, stride;
    bool ceil_mode;
    double p;
  };
  const Case cases[] = {
      {{1, 1, 11}, {1, 1, 3}, {1, 1, 2}, false, 2.0},  // 1-d
      {{1, 1, 10}, {1, 1, 4}, {1, 1, 3}, true, 3.0},   // 1-d, a last window past the end
      {{1, 7, 9}, {1, 3, 2}, {1, 2, 1}, false, 1.0},   // 2-d: sum pooling
      {{1, 8, 7}, {1, 3, 3}, {1, 2, 2}, true, 2.5},    // 2-d, ceil_mode
      {{5, 6, 7}, {2, 3, 2}, {2, 2, 3}, false, 2.0},   // 3-d
      {{5, 5, 6}, {2, 2, 3}, {2, 2, 2}, true, 4.0},    // 3-d, ceil_mode
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "in (" << c.in[0] << ", " << c.in[1] << ", " << c.in[2] << "), p " << c.p
                                    << (c.ceil_mode ? ", ceil_mode" : ""));
    const int64_t N = 2, C = 3;
    const Tensor x = randn64({N, C, c.in[0], c.in[1], c.in[2]}, 300).abs() + 0.1;  // positive: real roots
    LpDims out;
    for (size_t d = 0; d < 3; ++d) out[d] = pooled_size(c.in[d], c.kernel[d], c.stride[d], c.ceil_mode);
    const std::vector<double> want =
        lp_pool_reference(test::values(x), N * C, c.in, out, c.kernel, c.stride, c.p);
    Tensor got;
    if (c.in[0] == 1 && c.in[1] == 1) {
      got = F::lp_pool1d(x.reshape({N, C, c.in[2]}), c.p, c.kernel[2], c.stride[2], c.ceil_mode);
      EXPECT_EQ(got.sizes(), Shape({N, C, out[2]}));
    } else if (c.in[0] == 1) {
      got = F::lp_pool2d(x.reshape({N, C, c.in[1], c.in[2]}), c.p, {c.kernel[1], c.kernel[2]},
                         F::Pair(c.stride[1], c.stride[2]), c.ceil_mode);
      EXPECT_EQ(got.sizes(), Shape({N, C, out[1], out[2]}));
    } else {
      got = F::lp_pool3d(x, c.p, {c.kernel[0], c.kernel[1], c.kernel[2]},
                         F::Triple(c.stride[0], c.stride[1], c.stride[2]), c.ceil_mode);
      EXPECT_EQ(got.sizes(), Shape({N, C, out[0], out[1], out[2]}));
    }
    expect_close_values(got, want, 1e-12);
  }
}

TEST(LPPool, GradientsMatchFiniteDifferences) {
  const Tensor x2 = (randn64({2, 2, 5, 6}, 301).abs() + 0.2).requires_grad_();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return F::lp_pool2d(t[0], 2.0, {3, 2}, 2, true); },
                        {x2}).ok);
  const Tensor x1 = (randn64({2, 3, 9}, 302).abs() + 0.2).requires_grad_();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return F::lp_pool1d(t[0], 3.0, 3, 2); }, {x1}).ok);
  const Tensor x3 = (randn64({1, 2, 4, 4, 5}, 303).abs() + 0.2).requires_grad_();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return F::lp_pool3d(t[0], 1.5, 2); }, {x3}).ok);
}

TEST(LPPool, UnbatchedInputsAndAnOddPowerOfNegativesAsPyTorch) {
  const Tensor x = randn64({3, 6, 6}, 304).abs() + 0.1;
  const Tensor batched = F::lp_pool2d(x.unsqueeze(0), 2.0, 2);
  EXPECT_TRUE(F::lp_pool2d(x, 2.0, 2).allclose(batched.squeeze(0)));
  // p = 1 over a window of negatives: the sum is negative, and its first power is itself.
  const Tensor neg = full({1, 1, 4}, -0.5, TensorOptions(kFloat64));
  EXPECT_EQ(test::values(F::lp_pool1d(neg, 1.0, 2)), std::vector<double>({-1.0, -1.0}));
  // p = 3 over negatives: no real cube root through pow(s, 1/3): NaN, as PyTorch's.
  EXPECT_TRUE(std::isnan(test::values(F::lp_pool1d(neg, 3.0, 2))[0]));
}

TEST(LPPool, ModulesTakeTheirOptionsAndRejectABadNorm) {
  nn::LPPool2d pool(2, {3, 2}, {.stride = 2, .ceil_mode = true});
  EXPECT_EQ(pool->str(), "LPPool2d(norm_type=2, kernel_size=(3, 2), stride=(2, 2), ceil_mode=true)");
  const Tensor x = randn64({2, 3, 7, 8}, 305);
  EXPECT_TRUE(pool(x).equal(F::lp_pool2d(x, 2, {3, 2}, 2, true)));
  nn::LPPool1d pool1(1.5, 4);
  EXPECT_EQ(pool1->str(), "LPPool1d(norm_type=1.5, kernel_size=4, stride=4)");
  nn::LPPool3d pool3(2, 2, F::Triple(1, 2, 2));
  EXPECT_EQ(pool3(randn64({1, 2, 3, 4, 4}, 306)).sizes(), Shape({1, 2, 2, 2, 2}));
  expect_error([] { nn::LPPool2d(0, 2); }, {"LPPool2d", "norm_type", "0"});
  expect_error([] { F::lp_pool2d(zeros({1, 1, 4, 4}), -1, 2); }, {"lp_pool2d", "norm_type", "-1"});
  expect_error([] { F::lp_pool1d(zeros({4}), 2, 2); }, {"lp_pool1d", "(4)", "1 spatial"});
  expect_error([] { F::lp_pool3d(zeros({2, 4, 4}), 2, 2); }, {"lp_pool3d", "(2, 4, 4)", "3 spatial"});
}

// out[:, j g + i] = x[:, i k + j] for C = g k.
TEST(ChannelShuffle, MovesEachChannelWhereTheIndexMapSays) {
  const int64_t g = 3, k = 4, C = g * k;
  const Tensor x = randn64({2, C, 3, 2}, 307).requires_grad_();
  const Tensor y = F::channel_shuffle(x, g);
  ASSERT_EQ(y.sizes(), x.sizes());
  for (int64_t i = 0; i < g; ++i)
    for (int64_t j = 0; j < k; ++j)
      EXPECT_TRUE(y.select(1, j * g + i).equal(x.select(1, i * k + j))) << "group " << i << ", channel " << j;
  // The gradient moves each channel back: weight output channel c by c and read the weights off x's gradient.
  const Tensor weights = arange(0, C, 1, TensorOptions(kFloat64)).view({1, C, 1, 1});
  (y * weights).sum().backward();
  for (int64_t i = 0; i < g; ++i)
    for (int64_t j = 0; j < k; ++j)
      EXPECT_EQ(test::values(x.grad().select(1, i * k + j))[0], static_cast<double>(j * g + i));
  // One group, or as many as channels, leaves the order as it is.
  EXPECT_TRUE(F::channel_shuffle(x.detach(), 1).equal(x.detach()));
  EXPECT_TRUE(F::channel_shuffle(x.detach(), C).equal(x.detach()));
}

TEST(ChannelShuffle, ModuleAndBadInputs) {
  nn::ChannelShuffle shuffle(2);
  EXPECT_EQ(shuffle->str(), "ChannelShuffle(groups=2)");
  const Tensor x = randn64({1, 4, 5}, 308);
  EXPECT_TRUE(shuffle(x).equal(F::channel_shuffle(x, 2)));
  expect_error([] { F::channel_shuffle(zeros({2, 6, 3}), 4); }, {"channel_shuffle", "6 channels", "groups = 4"});
  expect_error([] { F::channel_shuffle(zeros({2, 6}), 2); }, {"channel_shuffle", "(2, 6)"});
  expect_error([] { nn::ChannelShuffle(0); }, {"ChannelShuffle", "groups", "0"});
}

constexpr double kSeluAlpha = 1.7580993408473766;  // SELU's lambda * alpha

TEST(AlphaDropout, EachElementIsKeptOrDroppedAndTheMomentsStay) {
  const double p = 0.2, a = 1.0 / std::sqrt((kSeluAlpha * kSeluAlpha * p + 1.0) * (1.0 - p));
  const double kept_shift = a * kSeluAlpha * p, dropped = a * kSeluAlpha * (p - 1.0);
  Generator gen(309);
  const Tensor x = randn({400000}, kFloat64, &gen).requires_grad_();
  const Tensor y = F::alpha_dropout(x, p, true, &gen);
  const std::vector<double> xv = test::values(x), yv = test::values(y);
  int64_t drops = 0;
  std::vector<double> expected_grad(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool was_dropped = std::abs(yv[i] - dropped) < 1e-12 && std::abs(a * xv[i] + kept_shift - yv[i]) > 1e-12;
    if (!was_dropped) ASSERT_NEAR(yv[i], a * xv[i] + kept_shift, 1e-12) << "element " << i;
    drops += was_dropped;
    expected_grad[i] = was_dropped ? 0.0 : a;
  }
  const double n = static_cast<double>(xv.size());
  EXPECT_NEAR(static_cast<double>(drops) / n, p, 0.005);  // 5 standard deviations: 0.2 +- 0.0032
  double mean = 0, var = 0;
  for (double v : yv) mean += v / n;
  for (double v : yv) var += (v - mean) * (v - mean) / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  y.sum().backward();
  EXPECT_EQ(test::values(x.grad()), expected_grad);
}

TEST(AlphaDropout, EvalP0P1SeedsAndFeatures) {
  const Tensor x = randn64({4, 5, 6}, 310);
  EXPECT_TRUE(F::alpha_dropout(x, 0.5).equal(x));  // training defaults to false, as PyTorch's
  EXPECT_TRUE(F::alpha_dropout(x, 0.0, true).equal(x));
  EXPECT_TRUE(F::alpha_dropout(x, 1.0, true).equal(zeros_like(x)));
  Generator g1(311), g2(311);
  EXPECT_TRUE(F::alpha_dropout(x, 0.3, true, &g1).equal(F::alpha_dropout(x, 0.3, true, &g2)));
  // Feature alpha dropout: within a (sample, channel) every element is kept or every one dropped.
  const double p = 0.5, a = 1.0 / std::sqrt((kSeluAlpha * kSeluAlpha * p + 1.0) * (1.0 - p));
  Generator g3(312);
  const Tensor y = F::feature_alpha_dropout(x, p, true, &g3);
  int64_t dropped_channels = 0;
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t c = 0; c < 5; ++c) {
      const std::vector<double> yc = test::values(y[n][c]), xc = test::values(x[n][c]);
      const bool dropped = std::abs(yc[0] - a * kSeluAlpha * (p - 1.0)) < 1e-12 &&
                           std::abs(yc[0] - (a * xc[0] + a * kSeluAlpha * p)) > 1e-12;
      dropped_channels += dropped;
      for (size_t i = 0; i < yc.size(); ++i)
        EXPECT_NEAR(yc[i], dropped ? a * kSeluAlpha * (p - 1.0) : a * xc[i] + a * kSeluAlpha * p, 1e-12);
    }
  EXPECT_GT(dropped_channels, 0);
  EXPECT_LT(dropped_channels, 20);
  expect_error([] { F::alpha_dropout(zeros({3}), 1.5, true); }, {"alpha_dropout", "[0, 1]", "1.5"});
  expect_error([] { F::feature_alpha_dropout(zeros({3}), 0.5, true); }, {"feature_alpha_dropout", "(3)"});
  expect_error([] { F::alpha_dropout(arange(4), 0.5, true); }, {"alpha_dropout", "floating", "int64"});
}

TEST(AlphaDropout, ModulesFollowTheirMode) {
  nn::AlphaDropout drop(0.25);
  nn::FeatureAlphaDropout feature(0.25);
  EXPECT_EQ(drop->str(), "AlphaDropout(p=0.25)");
  EXPECT_EQ(feature->str(), "FeatureAlphaDropout(p=0.25)");
  const Tensor x = randn64({8, 16, 4}, 313);
  EXPECT_FALSE(drop(x).equal(x));  // training: every element moves, kept ones to a x + a alpha' p
  EXPECT_FALSE(feature(x).equal(x));
  drop->eval();
  feature->eval();
  EXPECT_TRUE(drop(x).equal(x));
  EXPECT_TRUE(feature(x).equal(x));
  expect_error([] { nn::AlphaDropout(-0.1); }, {"AlphaDropout", "p", "-0.1"});
}

}  // namespace
}  // namespace kiln
