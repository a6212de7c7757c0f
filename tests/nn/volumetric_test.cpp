// The 3-d convolutions and pools, the 1-d transposed convolution and padding="same", against float64 loops
// written from PyTorch's definitions: each output of a convolution a sum over its window (positions outside the
// input, or the padding, adding nothing); each output of a transposed convolution a scatter of every input
// times its taps; each pool's window clipped and divided as PyTorch's; gradients by gradcheck.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
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
using Dims3 = std::array<int64_t, 3>;

// x (N, C, D, H, W) convolved with w (O, C / groups, kd, kh, kw): out[n][o][i] = b[o] + sum over the group's c
// and the taps u of x[n][c][i s - before + u dil] w[o][c][u] (per dim), with before / after the padding on each
// side. The output's shape goes to *shape.
std::vector<double> conv3d_loops(const Tensor& x, const Tensor& w, const Tensor& b, Dims3 s, Dims3 before,
                                 Dims3 after, Dims3 dil, int64_t groups, Shape* shape) {
  const int64_t N = x.size(0), C = x.size(1), O = w.size(0), cg = C / groups, og = O / groups;
  Dims3 in{x.size(2), x.size(3), x.size(4)}, k{w.size(2), w.size(3), w.size(4)}, out{};
  for (int i = 0; i < 3; ++i) out[i] = (in[i] + before[i] + after[i] - dil[i] * (k[i] - 1) - 1) / s[i] + 1;
  *shape = {N, O, out[0], out[1], out[2]};
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i0 = 0; i0 < out[0]; ++i0)
        for (int64_t i1 = 0; i1 < out[1]; ++i1)
          for (int64_t i2 = 0; i2 < out[2]; ++i2) {
            double acc = b.defined() ? b.to_vector<double>()[o] : 0.0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t u0 = 0; u0 < k[0]; ++u0)
                for (int64_t u1 = 0; u1 < k[1]; ++u1)
                  for (int64_t u2 = 0; u2 < k[2]; ++u2) {
                    const int64_t z0 = i0 * s[0] - before[0] + u0 * dil[0], z1 = i1 * s[1] - before[1] + u1 * dil[1],
                                  z2 = i2 * s[2] - before[2] + u2 * dil[2];
                    if (z0 < 0 || z0 >= in[0] || z1 < 0 || z1 >= in[1] || z2 < 0 || z2 >= in[2]) continue;
                    const int64_t ci = (o / og) * cg + c;
                    acc += xv[(((n * C + ci) * in[0] + z0) * in[1] + z1) * in[2] + z2] *
                           wv[(((o * cg + c) * k[0] + u0) * k[1] + u1) * k[2] + u2];
                  }
            y.push_back(acc);
          }
  return y;
}

// x (N, C, D, H, W) through w (C, O / groups, kd, kh, kw): every x[n][c][i] times w[c][o][u] added at output
// position i s - p + u dil (per dim) where that lies in the output of size (in - 1) s - 2 p + dil (k - 1) + op + 1.
std::vector<double> conv_transpose3d_loops(const Tensor& x, const Tensor& w, const Tensor& b, Dims3 s, Dims3 p,
                                           Dims3 op, Dims3 dil, int64_t groups, Shape* shape) {
  const int64_t N = x.size(0), C = x.size(1), og = w.size(1), O = og * groups, cg = C / groups;
  Dims3 in{x.size(2), x.size(3), x.size(4)}, k{w.size(2), w.size(3), w.size(4)}, out{};
  for (int i = 0; i < 3; ++i) out[i] = (in[i] - 1) * s[i] - 2 * p[i] + dil[i] * (k[i] - 1) + op[i] + 1;
  *shape = {N, O, out[0], out[1], out[2]};
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y(static_cast<size_t>(N * O * out[0] * out[1] * out[2]), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const double bias = b.defined() ? b.to_vector<double>()[o] : 0.0;
      for (int64_t j = 0; j < out[0] * out[1] * out[2]; ++j) y[(n * O + o) * out[0] * out[1] * out[2] + j] = bias;
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i0 = 0; i0 < in[0]; ++i0)
        for (int64_t i1 = 0; i1 < in[1]; ++i1)
          for (int64_t i2 = 0; i2 < in[2]; ++i2) {
            const double xval = xv[(((n * C + c) * in[0] + i0) * in[1] + i1) * in[2] + i2];
            for (int64_t o = 0; o < og; ++o)
              for (int64_t u0 = 0; u0 < k[0]; ++u0)
                for (int64_t u1 = 0; u1 < k[1]; ++u1)
                  for (int64_t u2 = 0; u2 < k[2]; ++u2) {
                    const int64_t z0 = i0 * s[0] - p[0] + u0 * dil[0], z1 = i1 * s[1] - p[1] + u1 * dil[1],
                                  z2 = i2 * s[2] - p[2] + u2 * dil[2];
                    if (z0 < 0 || z0 >= out[0] || z1 < 0 || z1 >= out[1] || z2 < 0 || z2 >= out[2]) continue;
                    const int64_t oi = (c / cg) * og + o;
                    y[(((n * O + oi) * out[0] + z0) * out[1] + z1) * out[2] + z2] +=
                        xval * wv[(((c * og + o) * k[0] + u0) * k[1] + u1) * k[2] + u2];
                  }
          }
  return y;
}

void expect_values_near(const Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want[i], tol) << "element " << i;
}

struct Conv3dCase {
  const char* name;
  Shape x, w;
  Dims3 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

TEST(Conv3d, MatchesTheDefinitionAndGradchecks) {
  const std::vector<Conv3dCase> cases = {
      {"plain", {2, 3, 4, 5, 4}, {4, 3, 2, 3, 2}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, true},
      {"padded and strided", {1, 2, 5, 6, 5}, {3, 2, 3, 3, 3}, {2, 1, 2}, {1, 1, 0}, {1, 1, 1}, 1, true},
      {"dilated in depth", {1, 2, 7, 4, 4}, {2, 2, 3, 2, 2}, {1, 2, 1}, {2, 0, 1}, {2, 1, 2}, 1, false},
      {"grouped", {2, 4, 3, 4, 4}, {6, 2, 2, 2, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 2, true},
      {"depthwise", {1, 3, 4, 3, 3}, {3, 1, 3, 1, 2}, {3, 1, 1}, {1, 0, 0}, {1, 1, 1}, 3, true},
  };
  uint64_t seed = 500;
  for (const Conv3dCase& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = randn64(c.x, seed++), w = randn64(c.w, seed++), b = c.bias ? randn64({c.w[0]}, seed++) : Tensor();
    const F::Triple s{c.stride[0], c.stride[1], c.stride[2]}, p{c.padding[0], c.padding[1], c.padding[2]},
        d{c.dilation[0], c.dilation[1], c.dilation[2]};
    Shape shape;
    const std::vector<double> want = conv3d_loops(x, w, b, c.stride, c.padding, c.padding, c.dilation, c.groups,
                                                  &shape);
    const Tensor y = F::conv3d(x, w, b, s, p, d, c.groups);
    EXPECT_EQ(y.sizes(), shape);
    expect_values_near(y, want, 1e-12);
    std::vector<Tensor> in = {x.requires_grad_(), w.requires_grad_()};
    if (b.defined()) in.push_back(b.requires_grad_());
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) {
      return F::conv3d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), s, p, d, c.groups);
    }, in).ok);
  }
}

TEST(Conv3d, Float32MatchesFloat64) {
  // The float32 path runs the conv2d kernels (im2col + GEMM) on the stacked slices.
  const Tensor x = randn64({2, 4, 6, 7, 5}, 520), w = randn64({8, 4, 3, 3, 3}, 521), b = randn64({8}, 522);
  const Tensor want = F::conv3d(x, w, b, {1, 2, 1}, {1, 1, 0});
  const Tensor got = F::conv3d(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32), {1, 2, 1}, {1, 1, 0});
  EXPECT_EQ(got.dtype(), kFloat32);
  expect_values_near(got, want.to_vector<double>(), 2e-4);
}

struct Transpose3dCase {
  const char* name;
  Shape x, w;
  Dims3 stride, padding, output_padding, dilation;
  int64_t groups;
  bool bias;
};

TEST(ConvTranspose3d, MatchesTheDefinitionAndGradchecks) {
  const std::vector<Transpose3dCase> cases = {
      {"plain", {2, 3, 3, 4, 3}, {3, 2, 2, 3, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1, true},
      {"strided and padded", {1, 2, 3, 3, 4}, {2, 3, 3, 3, 2}, {2, 2, 1}, {1, 1, 0}, {1, 0, 0}, {1, 1, 1}, 1, true},
      {"dilated", {1, 2, 4, 3, 3}, {2, 2, 2, 2, 3}, {3, 1, 2}, {1, 0, 2}, {2, 0, 1}, {2, 1, 2}, 1, false},
      {"grouped", {2, 4, 3, 3, 3}, {4, 3, 2, 2, 2}, {2, 1, 1}, {0, 1, 0}, {0, 0, 0}, {1, 1, 1}, 2, true},
  };
  uint64_t seed = 540;
  for (const Transpose3dCase& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = randn64(c.x, seed++), w = randn64(c.w, seed++),
           b = c.bias ? randn64({c.w[1] * c.groups}, seed++) : Tensor();
    const F::Triple s{c.stride[0], c.stride[1], c.stride[2]}, p{c.padding[0], c.padding[1], c.padding[2]},
        op{c.output_padding[0], c.output_padding[1], c.output_padding[2]},
        d{c.dilation[0], c.dilation[1], c.dilation[2]};
    Shape shape;
    const std::vector<double> want =
        conv_transpose3d_loops(x, w, b, c.stride, c.padding, c.output_padding, c.dilation, c.groups, &shape);
    const Tensor y = F::conv_transpose3d(x, w, b, s, p, op, c.groups, d);
    EXPECT_EQ(y.sizes(), shape);
    expect_values_near(y, want, 1e-12);
    std::vector<Tensor> in = {x.requires_grad_(), w.requires_grad_()};
    if (b.defined()) in.push_back(b.requires_grad_());
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) {
      return F::conv_transpose3d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), s, p, op, c.groups, d);
    }, in).ok);
  }
}

TEST(ConvTranspose1d, MatchesTheDefinitionAndGradchecks) {
  // (N, C, L) as (N, C, 1, 1, L) through the 3-d loops.
  Tensor x = randn64({2, 4, 6}, 560), w = randn64({4, 3, 3}, 561), b = randn64({6}, 562);
  Shape shape;
  const std::vector<double> want = conv_transpose3d_loops(x.view({2, 4, 1, 1, 6}), w.view({4, 3, 1, 1, 3}), b,
                                                          {1, 1, 3}, {0, 0, 1}, {0, 0, 2}, {1, 1, 2}, 2, &shape);
  const Tensor y = F::conv_transpose1d(x, w, b, 3, 1, 2, 2, 2);
  EXPECT_EQ(y.sizes(), (Shape{2, 6, shape[4]}));
  expect_values_near(y, want, 1e-12);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return F::conv_transpose1d(t[0], t[1], t[2], 2, 1, 1); },
                        {x.requires_grad_(), randn64({4, 5, 2}, 563).requires_grad_(),
                         randn64({5}, 564).requires_grad_()}).ok);
  expect_error([&] { F::conv_transpose1d(x.view({2, 4, 2, 3}), w); }, {"conv_transpose1d", "(2, 4, 2, 3)"});
}

// padding="same" against the definition with the padding PyTorch documents: dilation (k - 1) in all, half before,
// the odd one after.
TEST(SamePadding, KeepsTheSizeAndMatchesTheDefinition) {
  auto same = [](int64_t k, int64_t dil) {
    const int64_t total = dil * (k - 1);
    return std::array<int64_t, 2>{total / 2, total - total / 2};
  };
  uint64_t seed = 580;
  // 3-d: odd totals in depth (k 4) and width (k 2, dilation 3), even in height.
  {
    Tensor x = randn64({1, 2, 5, 4, 5}, seed++), w = randn64({3, 2, 4, 3, 2}, seed++), b = randn64({3}, seed++);
    const Dims3 dil{1, 2, 3};
    Dims3 before{}, after{};
    for (int i = 0; i < 3; ++i) {
      auto [lo, hi] = same(w.size(2 + i), dil[i]);
      before[i] = lo, after[i] = hi;
    }
    Shape shape;
    const std::vector<double> want = conv3d_loops(x, w, b, {1, 1, 1}, before, after, dil, 1, &shape);
    const Tensor y = F::conv3d(x, w, b, 1, F::same, {1, 2, 3});
    EXPECT_EQ(y.sizes(), (Shape{1, 3, 5, 4, 5}));
    expect_values_near(y, want, 1e-12);
    auto same3d = [](const std::vector<Tensor>& t) { return F::conv3d(t[0], t[1], t[2], 1, F::same, {1, 2, 3}); };
    EXPECT_TRUE(gradcheck(same3d, {x.requires_grad_(), w.requires_grad_(), b.requires_grad_()}).ok);
    EXPECT_EQ(F::conv3d(x, w, b, 1, F::valid).sizes(), (Shape{1, 3, 2, 2, 4}));
  }
  // 2-d (depth 1), grouped, an even kernel.
  {
    Tensor x = randn64({1, 4, 5, 6}, seed++), w = randn64({2, 2, 2, 3}, seed++);
    auto [h0, h1] = same(2, 1);
    Shape shape;
    const std::vector<double> want =
        conv3d_loops(x.unsqueeze(2), w.unsqueeze(2), {}, {1, 1, 1}, {0, h0, 1}, {0, h1, 1}, {1, 1, 1}, 2, &shape);
    const Tensor y = F::conv2d(x, w, {}, 1, F::same, 1, 2);
    EXPECT_EQ(y.sizes(), (Shape{1, 2, 5, 6}));
    expect_values_near(y, want, 1e-12);
    // the float32 path, through the conv kernels
    expect_values_near(F::conv2d(x.to(kFloat32), w.to(kFloat32), {}, 1, F::same, 1, 2), want, 1e-5);
  }
  // 1-d, an even kernel dilated
  {
    Tensor x = randn64({2, 3, 9}, seed++), w = randn64({4, 3, 4}, seed++);
    auto [l0, l1] = same(4, 2);
    Shape shape;
    const std::vector<double> want = conv3d_loops(x.view({2, 3, 1, 1, 9}), w.view({4, 3, 1, 1, 4}), {}, {1, 1, 1},
                                                  {0, 0, l0}, {0, 0, l1}, {1, 1, 2}, 1, &shape);
    const Tensor y = F::conv1d(x, w, {}, 1, F::same, 2);
    EXPECT_EQ(y.sizes(), (Shape{2, 4, 9}));
    expect_values_near(y, want, 1e-12);
  }
  const Tensor x = zeros({1, 2, 5, 5}, kFloat64), w = zeros({2, 2, 3, 3}, kFloat64);
  expect_error([&] { F::conv2d(x, w, {}, 2, F::same); }, {"conv2d", "same", "stride 1", "(2, 2)"});
  expect_error([&] { F::conv1d(x.select(2, 0), w.select(2, 0), {}, 3, F::same); }, {"conv1d", "same", "stride 1"});
  expect_error([&] { nn::Conv2d(2, 2, 3, {.stride = 2, .padding = F::same}); }, {"Conv2d", "same", "stride 1"});
  expect_error([&] { nn::Conv3d(2, 2, 3, {.stride = {1, 2, 1}, .padding = F::same}); }, {"Conv3d", "stride 1"});
}

TEST(SamePadding, ModulesWithEveryPaddingMode) {
  // A padding mode other than zeros pads by the same amounts in that mode, then convolves unpadded.
  for (F::PadMode mode : {F::PadMode::Constant, F::PadMode::Reflect, F::PadMode::Replicate, F::PadMode::Circular}) {
    auto c3 = nn::Conv3d(2, 3, {2, 3, 4}, {.padding = F::same, .dilation = {2, 1, 1}, .padding_mode = mode});
    c3->to(kFloat64);
    const Tensor x = randn64({1, 2, 5, 4, 6}, 600);
    // depth: total 2, (1, 1); height: total 2, (1, 1); width: total 3, (1, 2)
    const Tensor padded = F::pad(x, {1, 2, 1, 1, 1, 1}, mode);
    const Tensor want = F::conv3d(padded, c3->weight, c3->bias, 1, 0, {2, 1, 1});
    const Tensor got = c3(x);
    EXPECT_EQ(got.sizes(), (Shape{1, 3, 5, 4, 6}));
    EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());

    auto c1 = nn::Conv1d(2, 2, 4, {.padding = F::same, .padding_mode = mode});
    c1->to(kFloat64);
    const Tensor x1 = randn64({2, 2, 7}, 601);
    EXPECT_EQ(c1(x1).to_vector<double>(),
              F::conv1d(F::pad(x1, {1, 2}, mode), c1->weight, c1->bias).to_vector<double>());
  }
  auto c2 = nn::Conv2d(3, 4, {3, 2}, {.padding = F::same});
  EXPECT_EQ(c2(zeros({2, 3, 7, 5})).sizes(), (Shape{2, 4, 7, 5}));
  EXPECT_EQ(c2->str(), "Conv2d(3, 4, kernel_size=(3, 2), stride=(1, 1), padding=same)");
  EXPECT_EQ(nn::Conv1d(3, 4, 3, {.padding = F::valid})->str(), "Conv1d(3, 4, kernel_size=3, stride=1, padding=valid)");
  EXPECT_EQ(nn::Conv2d(3, 4, 3, {.padding = {0, 1}})->str(),
            "Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1), padding=(0, 1))");
}

TEST(Conv3d, ModulesShapesInitAndErrors) {
  auto conv = nn::Conv3d(3, 8, {3, 3, 1}, {.stride = {1, 2, 2}, .padding = {1, 1, 0}, .groups = 1, .bias = false});
  EXPECT_EQ(conv->weight.sizes(), (Shape{8, 3, 3, 3, 1}));
  EXPECT_FALSE(conv->bias.defined());
  EXPECT_LE(conv->weight.abs().max().item<double>(), 1.0 / std::sqrt(27.0));
  EXPECT_EQ(conv(zeros({2, 3, 4, 9, 9})).sizes(), (Shape{2, 8, 4, 5, 5}));
  EXPECT_EQ(conv->str(),
            "Conv3d(3, 8, kernel_size=(3, 3, 1), stride=(1, 2, 2), padding=(1, 1, 0), bias=false)");
  expect_error([&] { conv(zeros({2, 4, 4, 9, 9})); }, {"conv3d", "(2, 4, 4, 9, 9)", "3 channels"});
  expect_error([&] { conv(zeros({2, 3, 9, 9})); }, {"conv3d", "(N, C, D, H, W)"});
  expect_error([&] { F::conv3d(zeros({1, 3, 2, 9, 9}), zeros({8, 3, 3, 3, 3})); },
               {"conv3d", "(1, 3, 2, 9, 9)", "smaller than the kernel", "dim 2"});
  expect_error([&] { nn::Conv3d(3, 8, 3, {.groups = 2}); }, {"Conv3d", "divisible by groups 2"});

  auto up = nn::ConvTranspose3d(4, 6, 2, {.stride = 2, .groups = 2});
  EXPECT_EQ(up->weight.sizes(), (Shape{4, 3, 2, 2, 2}));
  EXPECT_EQ(up(zeros({1, 4, 3, 4, 5})).sizes(), (Shape{1, 6, 6, 8, 10}));
  EXPECT_EQ(up->str(), "ConvTranspose3d(4, 6, kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0), "
                       "output_padding=(0, 0, 0), groups=2)");
  auto too_far = nn::ConvTranspose3d(4, 6, 2, {.stride = 2, .output_padding = {2, 0, 0}});
  expect_error([&] { too_far(zeros({1, 4, 3, 3, 3})); }, {"conv_transpose3d", "output_padding 2"});
  auto up1 = nn::ConvTranspose1d(2, 3, 4, {.stride = 2, .padding = 1});
  EXPECT_EQ(up1(zeros({5, 2, 8})).sizes(), (Shape{5, 3, 16}));
  EXPECT_EQ(up1->str(), "ConvTranspose1d(2, 3, kernel_size=4, stride=2, padding=1, output_padding=0)");
}

// One dim of a pool: the windows' count and, for window i, its start and PyTorch's clipped ends.
struct PoolDim {
  int64_t in, k, s, p, dil;
  int64_t count(bool ceil_mode) const {
    const double span = static_cast<double>(in + 2 * p - dil * (k - 1) - 1) / static_cast<double>(s);
    int64_t n = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
    if (ceil_mode && (n - 1) * s >= in + p) --n;  // a last window may not start in the right padding
    return n;
  }
};

// Pools x (N, C, D, H, W) from the definition. Max: over the window's positions inside the input. Average:
// the sum over those, divided by divisor_override, or by the window's size within the padded input
// (count_include_pad) or within the input, each the product over the three dims.
// first_max, when given, gets each max window's first maximum as d H W + h W + w, scanning (d, h, w) in order.
std::vector<double> pool3d_loops(const Tensor& x, std::array<PoolDim, 3> dims, bool ceil_mode, bool max,
                                 bool count_include_pad, std::optional<int64_t> divisor, Shape* shape,
                                 std::vector<int64_t>* first_max = nullptr) {
  const int64_t planes = x.size(0) * x.size(1);
  Dims3 out{};
  for (int i = 0; i < 3; ++i) out[i] = dims[i].count(ceil_mode);
  *shape = {x.size(0), x.size(1), out[0], out[1], out[2]};
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> y;
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t i0 = 0; i0 < out[0]; ++i0)
      for (int64_t i1 = 0; i1 < out[1]; ++i1)
        for (int64_t i2 = 0; i2 < out[2]; ++i2) {
          const Dims3 idx{i0, i1, i2};
          double best = -std::numeric_limits<double>::infinity(), sum = 0, padded_size = 1, inside_size = 1;
          int64_t best_at = -1;
          for (int i = 0; i < 3; ++i) {
            const PoolDim& d = dims[i];
            const int64_t start = idx[i] * d.s - d.p, end = std::min(start + d.k, d.in + d.p);
            padded_size *= static_cast<double>(end - start);
            inside_size *= static_cast<double>(std::min(end, d.in) - std::max<int64_t>(start, 0));
          }
          for (int64_t u0 = 0; u0 < dims[0].k; ++u0)
            for (int64_t u1 = 0; u1 < dims[1].k; ++u1)
              for (int64_t u2 = 0; u2 < dims[2].k; ++u2) {
                const Dims3 u{u0, u1, u2};
                Dims3 z{};
                bool inside = true;
                for (int i = 0; i < 3; ++i) {
                  z[i] = idx[i] * dims[i].s - dims[i].p + u[i] * dims[i].dil;
                  inside = inside && z[i] >= 0 && z[i] < dims[i].in;
                }
                if (!inside) continue;
                const int64_t at = (z[0] * dims[1].in + z[1]) * dims[2].in + z[2];
                const double v = xv[q * dims[0].in * dims[1].in * dims[2].in + at];
                if (best_at < 0 || v > best) best = v, best_at = at;
                sum += v;
              }
          if (first_max) first_max->push_back(best_at);
          y.push_back(max ? best
                          : sum / (divisor ? static_cast<double>(*divisor)
                                           : (count_include_pad ? padded_size : inside_size)));
        }
  return y;
}

struct Pool3dCase {
  const char* name;
  Shape x;
  Dims3 k, s, p, dil;
  bool ceil_mode;
};

TEST(Pool3d, MaxMatchesTheDefinitionAndGradchecks) {
  const std::vector<Pool3dCase> cases = {
      {"2x2x2", {2, 3, 4, 6, 4}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, false},
      {"padded, overlapping", {1, 2, 5, 5, 6}, {3, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 1, 1}, false},
      {"ceil_mode", {1, 2, 6, 5, 7}, {3, 2, 3}, {2, 2, 2}, {1, 0, 1}, {1, 1, 1}, true},
      {"dilated", {1, 1, 7, 6, 6}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {3, 2, 1}, true},
  };
  uint64_t seed = 620;
  for (const Pool3dCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor x = randn64(c.x, seed++);
    Shape shape;
    const std::vector<double> want =
        pool3d_loops(x,
                     {PoolDim{c.x[2], c.k[0], c.s[0], c.p[0], c.dil[0]},
                      PoolDim{c.x[3], c.k[1], c.s[1], c.p[1], c.dil[1]},
                      PoolDim{c.x[4], c.k[2], c.s[2], c.p[2], c.dil[2]}},
                     c.ceil_mode, true, true, std::nullopt, &shape);
    const F::Triple k{c.k[0], c.k[1], c.k[2]}, s{c.s[0], c.s[1], c.s[2]}, p{c.p[0], c.p[1], c.p[2]},
        d{c.dil[0], c.dil[1], c.dil[2]};
    const Tensor y = F::max_pool3d(x, k, s, p, d, c.ceil_mode);
    EXPECT_EQ(y.sizes(), shape);
    expect_values_near(y, want, 0.0);
    // float32 runs the max-pool kernels for each plane
    expect_values_near(F::max_pool3d(x.to(kFloat32), k, s, p, d, c.ceil_mode), want, 1e-6);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::max_pool3d(t[0], k, s, p, d, c.ceil_mode); },
                          {x.detach().requires_grad_()}).ok);
  }
  // The gradient of a window goes to its first maximum, in (d, h, w) order, once.
  Tensor ties = zeros({1, 1, 2, 2, 2}, kFloat64).requires_grad_();
  F::max_pool3d(ties, 2).sum().backward();
  std::vector<double> g = ties.grad().to_vector<double>();
  EXPECT_EQ(g, (std::vector<double>{1, 0, 0, 0, 0, 0, 0, 0}));
  // unbatched
  const Tensor u = randn64({2, 4, 4, 4}, 630);
  EXPECT_EQ(F::max_pool3d(u, 2).to_vector<double>(), F::max_pool3d(u.unsqueeze(0), 2).to_vector<double>());
  expect_error([&] { F::max_pool3d(u, 2, 2, {2, 0, 0}); }, {"max_pool3d", "at most half the kernel"});
  expect_error([&] { F::max_pool3d(u.view({8, 16}), 2); }, {"max_pool3d", "(N, C, D, H, W)"});
}

// return_indices for volumes and max_unpool3d: each index is its window's first maximum in (d, h, w) order
// (the loops above), on inputs with many ties, and unpooling writes each value there into zeros.
TEST(Pool3d, IndicesFindTheFirstMaximumAndUnpoolWritesThere) {
  struct Case {
    Shape x;
    Dims3 k, s, p, dil;
    bool ceil_mode;
  };
  uint64_t seed = 670;
  for (const Case& c : {Case{{2, 2, 4, 6, 4}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, false},
                        Case{{1, 2, 5, 5, 6}, {3, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 1, 1}, true},
                        Case{{1, 1, 7, 6, 6}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {3, 2, 1}, false}}) {
    Generator gen(seed++);
    // Values 0, 1 and 2 only: most windows hold their maximum more than once.
    const Tensor x = randint(0, 3, c.x, kInt64, &gen).to(kFloat64);
    Shape shape;
    std::vector<int64_t> first;
    const std::vector<double> want =
        pool3d_loops(x,
                     {PoolDim{c.x[2], c.k[0], c.s[0], c.p[0], c.dil[0]},
                      PoolDim{c.x[3], c.k[1], c.s[1], c.p[1], c.dil[1]},
                      PoolDim{c.x[4], c.k[2], c.s[2], c.p[2], c.dil[2]}},
                     c.ceil_mode, true, true, std::nullopt, &shape, &first);
    const F::Triple k{c.k[0], c.k[1], c.k[2]}, s{c.s[0], c.s[1], c.s[2]}, p{c.p[0], c.p[1], c.p[2]},
        d{c.dil[0], c.dil[1], c.dil[2]};
    auto [y, idx] = F::max_pool3d_with_indices(x, k, s, p, d, c.ceil_mode);
    ASSERT_EQ(idx.sizes(), shape);
    EXPECT_EQ(idx.dtype(), kInt64);
    expect_values_near(y, want, 0.0);
    EXPECT_EQ(idx.to_vector<int64_t>(), first);
    const Shape volume{c.x[2], c.x[3], c.x[4]};
    const Tensor u = F::max_unpool3d(y, idx, k, s, p, F::Triple(volume[0], volume[1], volume[2]));
    std::vector<double> written(static_cast<size_t>(shape_numel(c.x)), 0.0);
    const std::vector<double> yv = y.to_vector<double>();
    const int64_t outs = shape_numel(shape) / (c.x[0] * c.x[1]), vol = shape_numel(volume);
    for (size_t o = 0; o < first.size(); ++o)
      written[static_cast<size_t>(static_cast<int64_t>(o) / outs * vol + first[o])] = yv[o];
    EXPECT_EQ(u.to_vector<double>(), written);
  }
  // A box of -inf only (the padding ties with it): the index is the box's first position inside the input.
  {
    const Tensor lows = full({1, 1, 3, 3, 3}, -std::numeric_limits<double>::infinity(), kFloat64);
    Shape shape;
    std::vector<int64_t> first;
    pool3d_loops(lows, {PoolDim{3, 3, 2, 1, 1}, PoolDim{3, 3, 2, 1, 1}, PoolDim{3, 3, 2, 1, 1}}, false, true, true,
                 std::nullopt, &shape, &first);
    EXPECT_EQ(F::max_pool3d_with_indices(lows, 3, 2, 1).second.to_vector<int64_t>(), first);
  }
  // Random values: the gradient of the values reaches the maxima, and unpooling's gathers back.
  const Tensor x = randn64({1, 2, 4, 4, 6}, 680);
  auto [y, idx] = F::max_pool3d_with_indices(x, 2);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::max_pool3d_with_indices(t[0], 2).first; },
                        {x.detach().requires_grad_()}).ok);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::max_unpool3d(t[0], idx, 2); },
                        {y.detach().requires_grad_()}).ok);
  EXPECT_EQ(F::max_unpool3d(y, idx, 2).sizes(), (Shape{1, 2, 4, 4, 6}));  // (in - 1) stride - 2 padding + kernel
  // Modules and unbatched input.
  auto pool = nn::MaxPool3d(2);
  auto [ym, im] = pool->forward_with_indices(x.squeeze(0));
  EXPECT_TRUE(im.equal(idx.squeeze(0)));
  auto unpool = nn::MaxUnpool3d({2, 2, 2});
  EXPECT_TRUE(unpool(ym, im).equal(F::max_unpool3d(y, idx, 2).squeeze(0)));
  EXPECT_EQ(unpool->str(), "MaxUnpool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0))");
  auto [y1, i1] = nn::MaxPool1d(3)->forward_with_indices(randn64({2, 3, 9}, 681));
  EXPECT_EQ(i1.sizes(), (Shape{2, 3, 3}));
  expect_error([&] { F::max_unpool3d(y, idx, 2, 2, 0, F::Triple(2, 2, 2)); },
               {"max_unpool3d", "outside the output volume of (2, 2, 2) = 8 positions"});
  expect_error([&] { F::max_unpool3d(y, idx.narrow(-1, 0, 2), 2); }, {"max_unpool3d", "indices must be int64"});
  expect_error([&] { F::max_pool3d_with_indices(x.to(kInt64), 2); }, {"max_pool3d_with_indices", "floating"});
}

TEST(Pool3d, AverageMatchesTheDefinitionInEveryMode) {
  const std::vector<Pool3dCase> cases = {
      {"2x2x2", {2, 1, 4, 6, 4}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, false},
      {"padded, overlapping", {1, 2, 5, 5, 6}, {3, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 1, 1}, false},
      {"ceil_mode past the padding", {1, 2, 6, 5, 7}, {3, 2, 3}, {2, 2, 2}, {1, 0, 1}, {1, 1, 1}, true},
      {"ceil_mode unpadded", {1, 1, 5, 7, 5}, {2, 3, 2}, {2, 3, 2}, {0, 0, 0}, {1, 1, 1}, true},
  };
  uint64_t seed = 640;
  for (const Pool3dCase& c : cases)
    for (bool include : {true, false})
      for (std::optional<int64_t> divisor : {std::optional<int64_t>(), std::optional<int64_t>(5)}) {
        SCOPED_TRACE(std::string(c.name) + (include ? ", count_include_pad" : "") + (divisor ? ", divisor 5" : ""));
        const Tensor x = randn64(c.x, seed++);
        Shape shape;
        const std::vector<double> want = pool3d_loops(
            x, {PoolDim{c.x[2], c.k[0], c.s[0], c.p[0], 1}, PoolDim{c.x[3], c.k[1], c.s[1], c.p[1], 1},
                PoolDim{c.x[4], c.k[2], c.s[2], c.p[2], 1}},
            c.ceil_mode, false, include, divisor, &shape);
        const F::Triple k{c.k[0], c.k[1], c.k[2]}, s{c.s[0], c.s[1], c.s[2]}, p{c.p[0], c.p[1], c.p[2]};
        const Tensor y = F::avg_pool3d(x, k, s, p, include, c.ceil_mode, divisor);
        EXPECT_EQ(y.sizes(), shape);
        expect_values_near(y, want, 1e-12);
        EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) {
          return F::avg_pool3d(t[0], k, s, p, include, c.ceil_mode, divisor);
        }, {x.detach().requires_grad_()}).ok);
      }
  expect_error([&] { F::avg_pool3d(zeros({1, 1, 4, 4, 4}), 2, 2, 0, true, false, 0); },
               {"avg_pool3d", "divisor_override"});
}

TEST(Pool3d, Modules) {
  auto mp = nn::MaxPool3d({1, 3, 3}, {.stride = {1, 2, 2}, .padding = {0, 1, 1}});
  EXPECT_EQ(mp(zeros({2, 3, 4, 8, 8})).sizes(), (Shape{2, 3, 4, 4, 4}));
  EXPECT_EQ(mp->str(), "MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), dilation=(1, 1, 1))");
  EXPECT_EQ(nn::MaxPool3d(2)(zeros({3, 4, 4, 4})).sizes(), (Shape{3, 2, 2, 2}));
  auto ap = nn::AvgPool3d(3, {.stride = 2, .ceil_mode = true, .count_include_pad = false});
  EXPECT_EQ(ap(zeros({1, 2, 6, 6, 6})).sizes(), (Shape{1, 2, 3, 3, 3}));
  EXPECT_EQ(ap->str(), "AvgPool3d(kernel_size=(3, 3, 3), stride=(2, 2, 2), padding=(0, 0, 0), ceil_mode=true, "
                       "count_include_pad=false)");
  const Tensor x = randn64({1, 2, 4, 4, 4}, 660);
  EXPECT_EQ(nn::AvgPool3d(2)(x).to_vector<double>(), F::avg_pool3d(x, 2).to_vector<double>());
}

}  // namespace
}  // namespace kiln
