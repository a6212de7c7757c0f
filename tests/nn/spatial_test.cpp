// ConvTranspose2d and interpolate (nearest, bilinear) against direct loops in float64 written from their
// definitions, gradchecked, and their modules and errors.
#include <gtest/gtest.h>

#include <cmath>

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

// The definition of the transposed convolution: every input element x[n][c][h][w] spreads
// x * w[c][o - group start][u][v] to out[n][o][h sh - ph + u dh][w sw - pw + v dw] (where that is inside out),
// plus the bias.
std::vector<double> conv_transpose2d_reference(const Tensor& x, const Tensor& w, const Tensor& b, Pair s, Pair p,
                                               Pair op, int64_t groups, Pair d, Shape* out_shape) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t og = w.size(1), O = og * groups, kh = w.size(2), kw = w.size(3), cg = C / groups;
  const int64_t oh = (H - 1) * s.h - 2 * p.h + d.h * (kh - 1) + op.h + 1;
  const int64_t ow = (W - 1) * s.w - 2 * p.w + d.w * (kw - 1) + op.w + 1;
  *out_shape = {N, O, oh, ow};
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(N * O * oh * ow), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < oh * ow; ++i) out[((n * O + o) * oh * ow) + i] = b.defined() ? b[o].item<double>() : 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t x0 = 0; x0 < W; ++x0)
          for (int64_t oo = 0; oo < og; ++oo)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                const int64_t y = h * s.h - p.h + u * d.h, z = x0 * s.w - p.w + v * d.w;
                if (y < 0 || y >= oh || z < 0 || z >= ow) continue;
                const int64_t o = (c / cg) * og + oo;
                out[((n * O + o) * oh + y) * ow + z] +=
                    xv[((n * C + c) * H + h) * W + x0] * wv[((c * og + oo) * kh + u) * kw + v];
              }
  return out;
}

struct TransposeCase {
  const char* name;
  Shape x, w;
  Pair stride, padding, output_padding;
  int64_t groups;
  Pair dilation;
  bool bias;
};

TEST(ConvTranspose2d, MatchesTheDefinitionAndGradchecks) {
  const std::vector<TransposeCase> cases = {
      {"plain", {2, 3, 4, 5}, {3, 2, 3, 3}, 1, 0, 0, 1, 1, true},
      {"strided, upsampling by 2", {1, 2, 3, 3}, {2, 3, 4, 4}, 2, 1, 0, 1, 1, true},
      {"output_padding", {1, 2, 3, 4}, {2, 2, 3, 3}, {2, 3}, {1, 0}, {1, 2}, 1, 1, false},
      {"dilated", {1, 1, 4, 4}, {1, 2, 3, 2}, 1, 1, 0, 1, {2, 1}, true},
      {"grouped", {2, 4, 3, 3}, {4, 3, 2, 2}, 2, 0, 1, 2, 1, true},
  };
  uint64_t seed = 40;
  for (const TransposeCase& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = randn64(c.x, seed++), w = randn64(c.w, seed++);
    Tensor b = c.bias ? randn64({c.w[1] * c.groups}, seed++) : Tensor();
    Shape shape;
    const std::vector<double> ref =
        conv_transpose2d_reference(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation, &shape);
    const Tensor y = nn::F::conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    test::expect_tensor_near(y, ref, shape, 1e-12, 1e-12, c.name);
    x.requires_grad_();
    w.requires_grad_();
    std::vector<Tensor> in = {x, w};
    if (b.defined()) in.push_back(b.requires_grad_());
    gradcheck([&](const std::vector<Tensor>& t) {
      return nn::F::conv_transpose2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), c.stride, c.padding,
                                     c.output_padding, c.groups, c.dilation);
    }, in);
  }
}

// A transposed convolution is the adjoint of the convolution with the same weight: <conv(a), b> = <a, convT(b)>.
TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  const Tensor a = randn64({2, 3, 7, 6}, 1), w = randn64({4, 3, 3, 3}, 2);
  const Tensor conv = nn::F::conv2d(a, w, {}, 2, 1);
  const Tensor b = randn64(conv.sizes(), 3);
  const Tensor back = nn::F::conv_transpose2d(b, w, {}, 2, 1, {0, 1});  // output_padding restores width 6
  ASSERT_EQ(back.sizes(), a.sizes());
  EXPECT_NEAR((conv * b).sum().item<double>(), (a * back).sum().item<double>(), 1e-10);
}

TEST(ConvTranspose2d, ModuleShapesInitAndErrors) {
  auto up = nn::ConvTranspose2d(8, 4, 4, nn::ConvTranspose2dOptions{.stride = 2, .padding = 1});
  EXPECT_EQ(up->weight.sizes(), (Shape{8, 4, 4, 4}));
  EXPECT_EQ(up(zeros({2, 8, 5, 5})).sizes(), (Shape{2, 4, 10, 10}));  // doubles the size
  const double bound = 1.0 / std::sqrt(4.0 * 16);  // fan_in from dim 1: out_channels * kernel, as PyTorch
  EXPECT_LE(up->weight.abs().max().item<double>(), bound);
  EXPECT_GT(up->weight.abs().max().item<double>(), 0.8 * bound);
  EXPECT_LE(up->bias.abs().max().item<double>(), bound);
  EXPECT_EQ(up->named_parameters().size(), 2u);
  Tensor x = zeros({1, 8, 5, 5});
  expect_error([&] { (void)up(zeros({1, 3, 5, 5})); }, {"conv_transpose2d", "8 channels"});
  expect_error([&] { (void)nn::F::conv_transpose2d(x, up->weight, {}, 2, 0, 2); },
               {"conv_transpose2d", "output_padding", "smaller than the stride"});
  expect_error([&] { nn::ConvTranspose2d(6, 4, 3, nn::ConvTranspose2dOptions{.groups = 4}); },
               {"ConvTranspose2d", "divisible by groups 4"});
}

// ---- interpolate ----

// PyTorch's source positions, from its definition in double precision (nearest: floor(dst * in / out)).
TEST(Interpolate, NearestAndBilinearMatchTheirDefinitions) {
  const Tensor x = randn64({2, 3, 4, 5}, 7);
  const std::vector<double> xv = x.to_vector<double>();
  auto at = [&](int64_t nc, int64_t h, int64_t w) { return xv[static_cast<size_t>((nc * 4 + h) * 5 + w)]; };
  for (Shape size : {Shape{8, 10}, Shape{3, 7}, Shape{4, 5}, Shape{9, 2}}) {
    const int64_t oh = size[0], ow = size[1];
    std::vector<double> nearest, linear, corners;
    for (int64_t nc = 0; nc < 6; ++nc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          nearest.push_back(at(nc, std::min<int64_t>(i * 4 / oh, 3), std::min<int64_t>(j * 5 / ow, 4)));
          for (bool align : {false, true}) {
            auto source = [&](int64_t d, int64_t in, int64_t out) {
              double r = align ? (out > 1 ? d * double(in - 1) / double(out - 1) : 0.0)
                               : std::max(0.0, (d + 0.5) * double(in) / double(out) - 0.5);
              const auto i0 = static_cast<int64_t>(std::floor(r));
              return std::tuple{i0, std::min(i0 + 1, in - 1), r - double(i0)};
            };
            auto [h0, h1, a] = source(i, 4, oh);
            auto [w0, w1, c] = source(j, 5, ow);
            const double v = (1 - a) * ((1 - c) * at(nc, h0, w0) + c * at(nc, h0, w1)) +
                             a * ((1 - c) * at(nc, h1, w0) + c * at(nc, h1, w1));
            (align ? corners : linear).push_back(v);
          }
        }
    const Shape out{2, 3, oh, ow};
    const std::string what = shape_str(size);
    test::expect_tensor_near(nn::F::interpolate(x, {.size = {oh, ow}}), nearest, out, 0, 0, "nearest " + what);
    test::expect_tensor_near(nn::F::interpolate(x, {.size = {oh, ow}, .mode = "bilinear"}), linear, out, 1e-14,
                             1e-14, "bilinear " + what);
    test::expect_tensor_near(nn::F::interpolate(x, {.size = {oh, ow}, .mode = "bilinear", .align_corners = true}),
                             corners, out, 1e-14, 1e-14, "bilinear align_corners " + what);
  }
}

TEST(Interpolate, ScaleFactorsGradientsUpsampleAndErrors) {
  const Tensor x = arange(0, 4, 1, TensorOptions(kFloat64)).view({1, 1, 2, 2});
  EXPECT_EQ(test::values(nn::F::interpolate(x, {.scale_factor = {2.0, 2.0}})),
            (std::vector<double>{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3}));
  // Bilinear doubling of [0, 1]: (0.5 - 0.5 clamped) 0, then 0.25, 0.75, 1 (PyTorch's half-pixel centres).
  EXPECT_EQ(test::values(nn::F::interpolate(x.narrow(2, 0, 1), {.scale_factor = {1.0, 2.0},
                                                                .mode = "bilinear"})),
            (std::vector<double>{0, 0.25, 0.75, 1}));
  const Tensor y = randn64({1, 2, 3, 4}, 9).requires_grad_();
  for (const char* mode : {"nearest", "bilinear"}) {
    gradcheck([&](const std::vector<Tensor>& t) {
      return nn::F::interpolate(t[0], {.size = {5, 7}, .mode = mode});
    }, {y});
  }
  auto up = nn::Upsample(nn::UpsampleOptions{.scale_factor = {2.0, 3.0}, .mode = "bilinear"});
  EXPECT_EQ(up(zeros({2, 3, 4, 5})).sizes(), (Shape{2, 3, 8, 15}));
  expect_error([&] { (void)nn::F::interpolate(x, {}); }, {"interpolate", "exactly one of size and scale_factor"});
  expect_error([&] { (void)nn::F::interpolate(x, {.size = {3, 3}, .mode = "bogus"}); },
               {"interpolate: mode must be one of", "\"bogus\""});
  expect_error([&] { (void)nn::F::interpolate(x.view({4}), {.size = {3, 3}}); }, {"interpolate", "(N, C, H, W)"});
  expect_error([&] { (void)nn::F::interpolate(x[0], {.size = {3}, .mode = "bilinear"}); },
               {"mode \"bilinear\" resizes 2 spatial dims (an input of 4 dims)", "(1, 2, 2)"});
  expect_error([&] { (void)nn::F::interpolate(x, {.size = {3, 3}, .align_corners = true}); },
               {"align_corners is for linear", "not nearest"});
  expect_error([&] { (void)nn::F::interpolate(x, {.size = {3, 3, 3}}); }, {"size has 3 values for 2 spatial dims"});
}

// The modes beyond nearest and bilinear, and inputs with one and three spatial dims, against loops written from
// the definitions: a 2-d bicubic sum over the 4 x 4 clamped neighbourhood (not the separable passes the code
// makes), trilinear's 8 corners, area's bins, nearest-exact's half-pixel centres.
TEST(Interpolate, EveryModeAgainstLoops) {
  const Tensor x = randn64({2, 3, 5, 6}, 21);
  const std::vector<double> xv = test::values(x);
  auto at = [&](int64_t nc, int64_t h, int64_t w) { return xv[static_cast<size_t>((nc * 5 + h) * 6 + w)]; };
  auto keys = [](double t) {  // Keys' cubic kernel, a = -0.75
    const double a = -0.75, u = std::fabs(t);
    return u <= 1 ? ((a + 2) * u - (a + 3)) * u * u + 1 : u < 2 ? ((a * u - 5 * a) * u + 8 * a) * u - 4 * a : 0.0;
  };
  for (bool align : {false, true}) {
    const int64_t oh = 8, ow = 4;
    std::vector<double> bicubic;
    for (int64_t nc = 0; nc < 6; ++nc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const double ry = align ? i * 4.0 / (oh - 1) : (i + 0.5) * 5 / oh - 0.5;
          const double rx = align ? j * 5.0 / (ow - 1) : (j + 0.5) * 6 / ow - 0.5;
          double v = 0;
          for (int64_t a = -1; a <= 2; ++a)
            for (int64_t b = -1; b <= 2; ++b) {
              const auto yi = static_cast<int64_t>(std::floor(ry)) + a, xi = static_cast<int64_t>(std::floor(rx)) + b;
              v += keys(ry - static_cast<double>(yi)) * keys(rx - static_cast<double>(xi)) *
                   at(nc, std::clamp<int64_t>(yi, 0, 4), std::clamp<int64_t>(xi, 0, 5));
            }
          bicubic.push_back(v);
        }
    test::expect_tensor_near(nn::F::interpolate(x, {.size = {oh, ow}, .mode = "bicubic", .align_corners = align}),
                             bicubic, {2, 3, oh, ow}, 1e-13, 1e-13, align ? "bicubic align_corners" : "bicubic");
  }
  // nearest-exact: source floor((d + 0.5) * in / out), in single precision.
  std::vector<double> exact;
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 10; ++j) {
        const auto h = std::min<int64_t>(static_cast<int64_t>(std::floor((i + 0.5f) * (5.0f / 3.0f))), 4);
        const auto w = std::min<int64_t>(static_cast<int64_t>(std::floor((j + 0.5f) * (6.0f / 10.0f))), 5);
        exact.push_back(at(nc, h, w));
      }
  test::expect_tensor_near(nn::F::interpolate(x, {.size = {3, 10}, .mode = "nearest-exact"}), exact, {2, 3, 3, 10},
                           0, 0, "nearest-exact");
  // area is adaptive average pooling: the same as the pooling kernel, down and up.
  for (const Shape& out : {Shape{2, 4}, Shape{7, 9}, Shape{5, 1}, Shape{5, 3}}) {  // the last two: bins of one length
    const Tensor want = nn::F::adaptive_avg_pool2d(x, {out[0], out[1]});
    test::expect_tensor_near(nn::F::interpolate(x, {.size = {out[0], out[1]}, .mode = "area"}), test::values(want),
                             want.sizes(), 1e-14, 1e-14, "area to " + shape_str(out));
  }
  // One spatial dim: linear; three: trilinear against its 8 corners.
  const Tensor line = x.reshape({2, 3, 30});
  const std::vector<double> lv = test::values(line);
  std::vector<double> linear;
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t d = 0; d < 11; ++d) {
      const double r = std::max(0.0, (d + 0.5) * 30.0 / 11 - 0.5);
      const auto i0 = static_cast<int64_t>(r);
      const int64_t i1 = std::min<int64_t>(i0 + 1, 29);
      linear.push_back((1 - (r - i0)) * lv[static_cast<size_t>(nc * 30 + i0)] + (r - i0) * lv[static_cast<size_t>(nc * 30 + i1)]);
    }
  test::expect_tensor_near(nn::F::interpolate(line, {.size = {11}, .mode = "linear"}), linear, {2, 3, 11}, 1e-14, 1e-14,
                           "linear");
  const Tensor vol = x.reshape({1, 2, 3, 5, 6});
  const std::vector<double> vv = test::values(vol);
  std::vector<double> trilinear;
  auto src = [](int64_t d, int64_t in, int64_t out) {
    const double r = d * double(in - 1) / double(out - 1);  // align_corners
    const auto i0 = static_cast<int64_t>(r);
    return std::tuple{i0, std::min<int64_t>(i0 + 1, in - 1), r - double(i0)};
  };
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t k = 0; k < 7; ++k) {
          const auto [d0, d1, a] = src(i, 3, 4);
          const auto [h0, h1, b] = src(j, 5, 2);
          const auto [w0, w1, e] = src(k, 6, 7);
          auto v = [&](int64_t d, int64_t h, int64_t w) { return vv[static_cast<size_t>(((c * 3 + d) * 5 + h) * 6 + w)]; };
          double s = 0;
          for (auto [dd, wd] : {std::pair{d0, 1 - a}, std::pair{d1, a}})
            for (auto [hh, wh] : {std::pair{h0, 1 - b}, std::pair{h1, b}})
              for (auto [ww, ww_] : {std::pair{w0, 1 - e}, std::pair{w1, e}}) s += wd * wh * ww_ * v(dd, hh, ww);
          trilinear.push_back(s);
        }
  test::expect_tensor_near(nn::F::interpolate(vol, {.size = {4, 2, 7}, .mode = "trilinear", .align_corners = true}),
                           trilinear, {1, 2, 4, 2, 7}, 1e-14, 1e-14, "trilinear");
  // One size or factor for every spatial dim.
  EXPECT_EQ(nn::F::interpolate(vol, {.scale_factor = {2.0}}).sizes(), (Shape{1, 2, 6, 10, 12}));
  EXPECT_EQ(nn::F::interpolate(vol, {.size = {3}, .mode = "area"}).sizes(), (Shape{1, 2, 3, 3, 3}));
  // Gradients of every mode.
  const Tensor g = randn64({1, 2, 4, 5}, 22).requires_grad_();
  for (const char* mode : {"nearest-exact", "bicubic", "area"}) {
    gradcheck([&](const std::vector<Tensor>& t) { return nn::F::interpolate(t[0], {.size = {6, 3}, .mode = mode}); }, {g});
  }
  // area with bins of one length takes the reshape-and-mean path.
  gradcheck([&](const std::vector<Tensor>& t) { return nn::F::interpolate(t[0], {.size = {2, 5}, .mode = "area"}); }, {g});
  const Tensor g3 = randn64({1, 2, 5}, 23).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& t) { return nn::F::interpolate(t[0], {.size = {8}, .mode = "linear"}); }, {g3});
}

}  // namespace
}  // namespace kiln
