// ConvTranspose2d, interpolate (every mode) and adaptive average and max pooling against direct loops in float64
// written from their definitions, gradchecked, and their modules and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <utility>

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
// Adaptive average pooling from its definition, in float64 and real arithmetic: along a dim of `in` positions
// pooled to `out`, output o averages [floor(o in / out), ceil((o + 1) in / out)). Every output's bin is walked
// in full; `grad` (the outputs' gradient, if given) is spread the same way into *grad_x.
struct AdaptiveCase {
  Shape in, out;  // the spatial dims only
};
std::vector<double> adaptive_reference(const std::vector<double>& x, int64_t planes, const AdaptiveCase& c,
                                       const std::vector<double>* grad = nullptr, std::vector<double>* grad_x = nullptr) {
  const size_t k = c.in.size();
  Shape in(3, 1), out(3, 1);
  for (size_t i = 0; i < k; ++i) in[3 - k + i] = c.in[i], out[3 - k + i] = c.out[i];
  auto lo = [](int64_t o, int64_t n, int64_t m) { return static_cast<int64_t>(std::floor(static_cast<double>(o) * n / m)); };
  auto hi = [](int64_t o, int64_t n, int64_t m) { return static_cast<int64_t>(std::ceil(static_cast<double>(o + 1) * n / m)); };
  const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
  std::vector<double> y(static_cast<size_t>(planes * out_plane));
  if (grad_x) grad_x->assign(x.size(), 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t e = 0; e < out[2]; ++e) {
          std::vector<size_t> bin;
          for (int64_t d = lo(a, in[0], out[0]); d < hi(a, in[0], out[0]); ++d)
            for (int64_t h = lo(b, in[1], out[1]); h < hi(b, in[1], out[1]); ++h)
              for (int64_t w = lo(e, in[2], out[2]); w < hi(e, in[2], out[2]); ++w)
                bin.push_back(static_cast<size_t>(p * in_plane + (d * in[1] + h) * in[2] + w));
          const auto o = static_cast<size_t>(p * out_plane + (a * out[1] + b) * out[2] + e);
          double sum = 0;
          for (size_t i : bin) sum += x[i];
          y[o] = sum / static_cast<double>(bin.size());
          if (grad_x)
            for (size_t i : bin) (*grad_x)[i] += (*grad)[o] / static_cast<double>(bin.size());
        }
  return y;
}

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
  // area is adaptive average pooling: against its definition, down and up.
  for (const Shape& out : {Shape{2, 4}, Shape{7, 9}, Shape{5, 1}, Shape{5, 3}}) {  // the last two: bins of one length
    const std::vector<double> want = adaptive_reference(xv, 6, {{5, 6}, out});
    test::expect_tensor_near(nn::F::interpolate(x, {.size = {out[0], out[1]}, .mode = "area"}), want,
                             {2, 3, out[0], out[1]}, 1e-14, 1e-14, "area to " + shape_str(out));
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
  // area with bins of one length.
  gradcheck([&](const std::vector<Tensor>& t) { return nn::F::interpolate(t[0], {.size = {2, 5}, .mode = "area"}); }, {g});
  const Tensor g3 = randn64({1, 2, 5}, 23).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& t) { return nn::F::interpolate(t[0], {.size = {8}, .mode = "linear"}); }, {g3});
}

const std::vector<AdaptiveCase> kAdaptiveCases = {
    {{10}, {3}},          {{5}, {8}},            {{12}, {4}},        {{7, 9}, {3, 4}},   {{6, 5}, {6, 5}},
    {{4, 9}, {7, 2}},     {{64, 64}, {7, 7}},    {{5, 6, 7}, {2, 4, 3}}, {{3, 4, 2}, {5, 2, 3}},
};

TEST(AdaptiveAvgPool, ValuesAndGradientsMatchTheDefinition) {
  for (const AdaptiveCase& c : kAdaptiveCases) {
    Shape xs = {2, 3};
    xs.insert(xs.end(), c.in.begin(), c.in.end());
    Shape ys = {2, 3};
    ys.insert(ys.end(), c.out.begin(), c.out.end());
    const Tensor x64 = randn64(xs, 31), g64 = randn64(ys, 32);
    const std::vector<double> xv = test::values(x64), gv = test::values(g64);
    std::vector<double> want_gx;
    const std::vector<double> want = adaptive_reference(xv, 6, c, &gv, &want_gx);
    const std::string what = shape_str(c.in) + " to " + shape_str(c.out);
    for (DType d : {kFloat64, kFloat32}) {
      const double tol = d == kFloat64 ? 1e-14 : 2e-6;
      Tensor x = x64.to(d).detach().requires_grad_();
      const Tensor y = adaptive_avg_pool(x, c.out);
      ASSERT_EQ(y.sizes(), ys) << what;
      // The float32 reference starts from the inputs rounded to float32.
      const std::vector<double> want_d =
          d == kFloat64 ? want : adaptive_reference(test::values(x.detach()), 6, c);
      test::expect_tensor_near(y, want_d, ys, tol, tol, what + " " + dtype_name(d));
      (y * g64.to(d)).sum().backward();
      test::expect_tensor_near(x.grad(), want_gx, xs, tol, tol, what + " gradient " + dtype_name(d));
    }
    // 16-bit floats compute in float32 and round once.
    for (DType d : {kFloat16, kBFloat16}) {
      const Tensor xh = x64.to(d);
      EXPECT_TRUE(equal(adaptive_avg_pool(xh, c.out), adaptive_avg_pool(xh.to(kFloat32), c.out).to(d))) << what;
      const Tensor gh = g64.to(d);
      EXPECT_TRUE(equal(ops::adaptive_avg_pool_backward(gh, xs), ops::adaptive_avg_pool_backward(gh.to(kFloat32), xs).to(d)))
          << what << " gradient";
    }
  }
}

TEST(AdaptiveAvgPool, GradientOfTheGradientIsThePoolingAgain) {
  // The gradient is linear in g: d/dg <pool^T(g), v> = pool(v), through create_graph.
  for (const AdaptiveCase& c : {AdaptiveCase{{7, 9}, {3, 4}}, AdaptiveCase{{3, 4, 2}, {5, 2, 3}}}) {
    Shape xs = {1, 2}, ys = {1, 2};
    xs.insert(xs.end(), c.in.begin(), c.in.end());
    ys.insert(ys.end(), c.out.begin(), c.out.end());
    Tensor x = randn64(xs, 33).requires_grad_(), g = randn64(ys, 34).requires_grad_();
    const Tensor v = randn64(xs, 35);
    const Tensor gx = autograd::grad({(adaptive_avg_pool(x, c.out) * g).sum()}, {x}, {}, std::nullopt, true).at(0);
    const Tensor gg = autograd::grad({(gx * v).sum()}, {g}).at(0);
    test::expect_tensor_near(gg, adaptive_reference(test::values(v), 2, c), ys, 1e-14, 1e-14, shape_str(c.in));
    gradcheck([&](const std::vector<Tensor>& t) { return adaptive_avg_pool(t[0], c.out); }, {x});
  }
}

TEST(AdaptiveAvgPool, ThroughNnAndErrors) {
  const Tensor x = randn64({2, 3, 10, 7}, 36);
  const std::vector<double> want = adaptive_reference(test::values(x), 6, {{10, 7}, {4, 3}});
  test::expect_tensor_near(nn::F::adaptive_avg_pool2d(x, {4, 3}), want, {2, 3, 4, 3}, 1e-14, 1e-14, "2d");
  test::expect_tensor_near(nn::F::interpolate(x, {.size = {4, 3}, .mode = "area"}), want, {2, 3, 4, 3}, 1e-14, 1e-14,
                           "area");
  // (C, H, W) input: one batch of planes.
  test::expect_tensor_near(nn::F::adaptive_avg_pool2d(x[0], {4, 3}), std::vector<double>(want.begin(), want.begin() + 36),
                           {3, 4, 3}, 1e-14, 1e-14, "unbatched");
  expect_error([&] { ops::adaptive_avg_pool(x, {4, 0}); }, {"adaptive_avg_pool: output sizes must be positive, got (4, 0)"});
  expect_error([&] { ops::adaptive_avg_pool(x, {1, 2, 3, 4}); }, {"expected one to three output sizes, got 4"});
  expect_error([&] { ops::adaptive_avg_pool(x.view({420}), {4}); }, {"needs an input of at least 2 dims", "(420)"});
  expect_error([&] { ops::adaptive_avg_pool(ones({2, 3, 0}), {3}); }, {"has an empty dim to pool"});
  expect_error([&] { ops::adaptive_avg_pool(arange(0, 10).view({2, 5}), {3}); }, {"expected a floating-point tensor"});
  expect_error([&] { ops::adaptive_avg_pool_backward(ones({2, 4, 3}, kFloat64), {3, 10, 7}); },
               {"adaptive_avg_pool_backward: grad_out (2, 4, 3) does not match the input shape (3, 10, 7) in dim 0"});
  // One and three dims, with and without the batch dim, as functions and as modules.
  const Tensor line = randn64({2, 3, 11}, 37), vol = randn64({2, 3, 5, 6, 7}, 38);
  const std::vector<double> want1 = adaptive_reference(test::values(line), 6, {{11}, {4}});
  const std::vector<double> want3 = adaptive_reference(test::values(vol), 6, {{5, 6, 7}, {2, 4, 3}});
  test::expect_tensor_near(nn::F::adaptive_avg_pool1d(line, 4), want1, {2, 3, 4}, 1e-14, 1e-14, "1d");
  test::expect_tensor_near(nn::AdaptiveAvgPool1d(4)(line[1]), std::vector<double>(want1.begin() + 12, want1.end()),
                           {3, 4}, 1e-14, 1e-14, "1d module, unbatched");
  test::expect_tensor_near(nn::F::adaptive_avg_pool3d(vol, {2, 4, 3}), want3, {2, 3, 2, 4, 3}, 1e-14, 1e-14, "3d");
  test::expect_tensor_near(nn::AdaptiveAvgPool3d(Shape{2, 4, 3})(vol), want3, {2, 3, 2, 4, 3}, 1e-14, 1e-14, "3d module");
  EXPECT_EQ(nn::F::adaptive_avg_pool3d(vol, {3}).sizes(), (Shape{2, 3, 3, 3, 3}));
  EXPECT_EQ(nn::AdaptiveAvgPool1d(4)->extra_repr(), "output_size=4");
  EXPECT_EQ(nn::AdaptiveAvgPool3d(Shape{2, 4, 3})->extra_repr(), "output_size=(2, 4, 3)");
  expect_error([&] { nn::F::adaptive_avg_pool1d(vol, 4); }, {"adaptive_avg_pool1d: expected input (N, C, L) or (C, L)"});
  expect_error([&] { nn::F::adaptive_avg_pool3d(vol, {2, 4}); }, {"adaptive_avg_pool3d: output_size has 2 values"});
  // An empty batch or channel dim gives an empty result, and an empty gradient.
  EXPECT_EQ(ops::adaptive_avg_pool(zeros({0, 3, 5}), {2}).sizes(), (Shape{0, 3, 2}));
  Tensor no_channels = zeros({2, 0, 5, 5}, kFloat64).requires_grad_();
  nn::F::adaptive_avg_pool2d(no_channels, {3, 2}).sum().backward();
  EXPECT_EQ(no_channels.grad().sizes(), (Shape{2, 0, 5, 5}));
}

// Adaptive max pooling from its definition: over the same real-number bins, the max of each bin and its first
// position in (d, h, w) order (a NaN is the max), that position within the pooled dims flattened.
void adaptive_max_reference(const std::vector<double>& x, int64_t planes, const AdaptiveCase& c,
                            std::vector<double>* values, std::vector<int64_t>* indices) {
  const size_t k = c.in.size();
  Shape in(3, 1), out(3, 1);
  for (size_t i = 0; i < k; ++i) in[3 - k + i] = c.in[i], out[3 - k + i] = c.out[i];
  auto lo = [](int64_t o, int64_t n, int64_t m) { return static_cast<int64_t>(std::floor(static_cast<double>(o) * n / m)); };
  auto hi = [](int64_t o, int64_t n, int64_t m) { return static_cast<int64_t>(std::ceil(static_cast<double>(o + 1) * n / m)); };
  const int64_t in_plane = in[0] * in[1] * in[2];
  values->clear();
  indices->clear();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t e = 0; e < out[2]; ++e) {
          int64_t arg = -1;
          for (int64_t i = lo(a, in[0], out[0]); i < hi(a, in[0], out[0]); ++i)
            for (int64_t j = lo(b, in[1], out[1]); j < hi(b, in[1], out[1]); ++j)
              for (int64_t l = lo(e, in[2], out[2]); l < hi(e, in[2], out[2]); ++l) {
                const int64_t at = (i * in[1] + j) * in[2] + l;
                const double v = x[p * in_plane + at];
                if (arg < 0) { arg = at; continue; }
                const double best = x[p * in_plane + arg];
                if (!std::isnan(best) && (std::isnan(v) || v > best)) arg = at;
              }
          values->push_back(x[p * in_plane + arg]);
          indices->push_back(arg);
        }
}

TEST(AdaptiveMaxPool, ValuesIndicesAndGradientsMatchTheDefinition) {
  for (const AdaptiveCase& c : kAdaptiveCases) {
    Shape xs = {2, 3}, ys = {2, 3};
    xs.insert(xs.end(), c.in.begin(), c.in.end());
    ys.insert(ys.end(), c.out.begin(), c.out.end());
    const Tensor x64 = randn64(xs, 41), g64 = randn64(ys, 42);
    const std::string what = shape_str(c.in) + " to " + shape_str(c.out);
    for (DType d : {kFloat64, kFloat32, kBFloat16}) {
      Tensor x = x64.to(d).detach().requires_grad_();
      const auto [y, idx] = nn::F::adaptive_max_pool_with_indices(x, c.out);
      // The reference reads the inputs as rounded to d: a max is exact in any dtype.
      std::vector<double> want;
      std::vector<int64_t> want_idx;
      adaptive_max_reference(test::values(x.detach()), 6, c, &want, &want_idx);
      test::expect_tensor_near(y, want, ys, 0, 0, what + " " + dtype_name(d));
      EXPECT_EQ(idx.to_vector<int64_t>(), want_idx) << what;
      if (d == kBFloat16) continue;
      (y * g64.to(d)).sum().backward();
      // The gradient: each output's grad added at its max.
      std::vector<double> want_gx(static_cast<size_t>(x.numel()), 0.0);
      const int64_t in_plane = x.numel() / 6, out_plane = y.numel() / 6;
      const std::vector<double> gv = test::values(g64.to(d));
      for (int64_t p = 0; p < 6; ++p)
        for (int64_t o = 0; o < out_plane; ++o)
          want_gx[static_cast<size_t>(p * in_plane + want_idx[static_cast<size_t>(p * out_plane + o)])] +=
              gv[static_cast<size_t>(p * out_plane + o)];
      test::expect_tensor_near(x.grad(), want_gx, xs, 1e-6, 1e-6, what + " gradient " + dtype_name(d));
    }
  }
  // Random inputs have no ties: central differences see the same gradient.
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::adaptive_max_pool2d(t[0], {3, 4}); },
            {randn64({2, 2, 7, 9}, 43).requires_grad_()});
}

// Values from a set of five (-0, 0, 1, 2 and NaN): bins full of ties and NaNs, which the kernel settles
// column by column and then along W, against the reference's single scan in (d, h, w) order.
TEST(AdaptiveMaxPool, ManyTiesAndNansPickTheFirstInScanOrder) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> pool = {-0.0, 0.0, 1.0, 2.0, nan};
  std::mt19937 rng(46);
  for (const AdaptiveCase& c : kAdaptiveCases) {
    Shape xs = {2, 3};
    xs.insert(xs.end(), c.in.begin(), c.in.end());
    for (const bool with_nan : {false, true}) {
      std::vector<double> xv(static_cast<size_t>(shape_numel(xs)));
      std::uniform_int_distribution<size_t> pick(0, with_nan ? 4 : 3);
      for (double& v : xv) v = pool[pick(rng)];
      std::vector<double> want;
      std::vector<int64_t> want_idx;
      adaptive_max_reference(xv, 6, c, &want, &want_idx);
      for (DType d : {kFloat64, kFloat32, kBFloat16}) {
        const Tensor x = tensor(xv, xs).to(d);
        const std::string what = shape_str(c.in) + " to " + shape_str(c.out) + " " + dtype_name(d) +
                                 (with_nan ? " with NaNs" : "");
        EXPECT_EQ(nn::F::adaptive_max_pool_with_indices(x, c.out).second.to_vector<int64_t>(), want_idx) << what;
      }
    }
  }
}

TEST(AdaptiveMaxPool, TiesNansModulesAndErrors) {
  // Ties go to the first position of the bin; a NaN is its bin's max.
  const Tensor flat = ones({1, 1, 4, 4}, kFloat64);
  EXPECT_EQ(nn::F::adaptive_max_pool_with_indices(flat, {2, 2}).second.to_vector<int64_t>(),
            (std::vector<int64_t>{0, 2, 8, 10}));
  Tensor with_nan = arange(0, 16, 1, TensorOptions(kFloat64)).view({1, 1, 4, 4});
  with_nan.index_put_({0, 0, 1, 0}, std::numeric_limits<double>::quiet_NaN());
  const auto [v, i] = nn::F::adaptive_max_pool_with_indices(with_nan, {2, 2});
  const std::vector<double> vv = test::values(v);
  EXPECT_TRUE(std::isnan(vv[0]));
  EXPECT_EQ((std::vector<double>(vv.begin() + 1, vv.end())), (std::vector<double>{7, 13, 15}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{4, 7, 13, 15}));
  // One and three dims, unbatched, modules.
  const Tensor line = randn64({3, 10}, 44), vol = randn64({2, 2, 4, 5, 6}, 45);
  std::vector<double> want;
  std::vector<int64_t> want_idx;
  adaptive_max_reference(test::values(line), 3, {{10}, {4}}, &want, &want_idx);
  test::expect_tensor_near(nn::AdaptiveMaxPool1d(4)(line), want, {3, 4}, 0, 0, "1d module, unbatched");
  adaptive_max_reference(test::values(vol), 4, {{4, 5, 6}, {3, 3, 3}}, &want, &want_idx);
  test::expect_tensor_near(nn::AdaptiveMaxPool3d(3)(vol), want, {2, 2, 3, 3, 3}, 0, 0, "3d module");
  EXPECT_EQ(nn::AdaptiveMaxPool2d({7, 7})->str(), "AdaptiveMaxPool2d(output_size=(7, 7))");
  EXPECT_EQ(nn::AdaptiveMaxPool3d({2, 3, 4})->str(), "AdaptiveMaxPool3d(output_size=(2, 3, 4))");
  expect_error([&] { (void)nn::F::adaptive_max_pool2d(line, {2, 2}); }, {"adaptive_max_pool2d", "(N, C, H, W)"});
  expect_error([&] { (void)nn::F::adaptive_max_pool1d(line, 0); }, {"adaptive_max_pool", "must be positive"});
  expect_error([] { (void)nn::F::adaptive_max_pool1d(ones({2, 3}, kInt64), 2); }, {"floating-point"});
}

}  // namespace
}  // namespace kiln
