// Padding in every mode, the pixel shuffles, rms_norm, channel dropout and the 1-d pools, against small worked
// examples and float64 loops written from their definitions; gradchecked; their modules and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using nn::F::PadMode;
using test::expect_error;
using test::randn64;

const char* name(PadMode m) {
  return m == PadMode::Reflect ? "reflect" : m == PadMode::Replicate ? "replicate" : "circular";
}

// Where output position i of a dim of size n padded by `before` reads from, written independently of the
// library's: reflect as a triangle wave of period 2 (n - 1), replicate as a clamp, circular as a wrap.
int64_t source(PadMode m, int64_t i, int64_t before, int64_t n) {
  const int64_t s = i - before;
  if (m == PadMode::Replicate) return s < 0 ? 0 : (s >= n ? n - 1 : s);
  if (m == PadMode::Circular) return ((s % n) + n) % n;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1), t = ((s % period) + period) % period;
  return n - 1 - std::llabs(n - 1 - t);
}

// x (A, B, C) padded over its last two dims by pads (last dim's pair first), from the definition.
std::vector<double> pad_reference(const Tensor& x, PadMode m, int64_t wl, int64_t wr, int64_t hl, int64_t hr,
                                  Shape* shape) {
  const int64_t A = x.size(0), H = x.size(1), W = x.size(2), oh = H + hl + hr, ow = W + wl + wr;
  *shape = {A, oh, ow};
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> out;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) out.push_back(v[(a * H + source(m, i, hl, H)) * W + source(m, j, wl, W)]);
  return out;
}

TEST(Pad, WorkedExamplesOfEachMode) {
  const Tensor x = arange(1, 5, 1, TensorOptions(kFloat64)).view({1, 4});  // 1 2 3 4
  EXPECT_EQ(test::values(nn::F::pad(x, {2, 3}, PadMode::Reflect)), (std::vector<double>{3, 2, 1, 2, 3, 4, 3, 2, 1}));
  EXPECT_EQ(test::values(nn::F::pad(x, {2, 1}, PadMode::Replicate)), (std::vector<double>{1, 1, 1, 2, 3, 4, 4}));
  EXPECT_EQ(test::values(nn::F::pad(x, {4, 1}, PadMode::Circular)), (std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4, 1}));
  EXPECT_EQ(test::values(nn::F::pad(x, {1, 1}, PadMode::Constant, -7)), (std::vector<double>{-7, 1, 2, 3, 4, -7}));
  // A negative pad crops, in every mode but circular.
  EXPECT_EQ(test::values(nn::F::pad(x, {-1, 2}, PadMode::Reflect)), (std::vector<double>{2, 3, 4, 3, 2}));
  EXPECT_EQ(test::values(nn::F::pad(x, {1, -2}, PadMode::Replicate)), (std::vector<double>{1, 1, 2}));
  // Over two dims the corners combine both: reflect of [[1, 2], [3, 4]] by one on each side.
  const Tensor sq = arange(1, 5, 1, TensorOptions(kFloat64)).view({1, 2, 2});
  EXPECT_EQ(test::values(nn::F::pad(sq, {1, 1, 1, 0}, PadMode::Reflect)),
            (std::vector<double>{4, 3, 4, 3, 2, 1, 2, 1, 4, 3, 4, 3}));
}

// Three padded dims (a volume) are the depth padded on its own, then the plane: padding is separable. A
// non-contiguous input reads as its contiguous copy.
TEST(Pad, VolumesAndStridedInputs) {
  const Tensor x = randn64({2, 3, 4, 5, 6}, 21);
  for (PadMode m : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    const Tensor depth_first = nn::F::pad(x.transpose(-1, -3), {2, 3}, m).transpose(-1, -3);
    const Tensor want = nn::F::pad(depth_first, {1, 4, 3, 2}, m);
    test::expect_tensor_near(nn::F::pad(x, {1, 4, 3, 2, 2, 3}, m), test::values(want), want.sizes(), 0, 0, name(m));
    const Tensor t = x.transpose(1, 4);
    test::expect_tensor_near(nn::F::pad(t, {1, 2, 2, 1}, m), test::values(nn::F::pad(t.contiguous(), {1, 2, 2, 1}, m)),
                             {2, 6, 4, 8, 6}, 0, 0, std::string(name(m)) + " of a transposed input");
  }
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::pad(t[0], {1, 0, 2, 1, 1, 1}, PadMode::Reflect); },
            {randn64({1, 3, 3, 4}, 22).requires_grad_()});
  // Four padded dims take the gather per dim (the kernels pad up to three): the fourth padded on its own.
  for (PadMode m : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    const Tensor fourth_first = nn::F::pad(x.transpose(1, -1), {1, 2}, m).transpose(1, -1);
    const Tensor want = nn::F::pad(fourth_first, {1, 4, 3, 2, 2, 3}, m);
    test::expect_tensor_near(nn::F::pad(x, {1, 4, 3, 2, 2, 3, 1, 2}, m), test::values(want), want.sizes(), 0, 0,
                             std::string(name(m)) + " over four dims");
  }
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::pad(t[0], {1, 0, 0, 1, 1, 1, 1, 0}, PadMode::Replicate); },
            {randn64({2, 2, 3, 2}, 23).requires_grad_()});
  // The kernels copy any dtype; 16-bit gradients sum in float32 and round once.
  const Tensor ints = arange(0, 24, 1, TensorOptions(kInt64)).view({2, 3, 4});
  EXPECT_EQ(test::values(nn::F::pad(ints, {2, 1, 1, 1}, PadMode::Reflect)),
            test::values(nn::F::pad(ints.to(kFloat64), {2, 1, 1, 1}, PadMode::Reflect)));
  const Tensor g = randn64({2, 5, 7}, 24).to(kBFloat16);
  EXPECT_TRUE(equal(ops::pad_backward(g, {2, 1, 1, 1}, PadMode::Replicate, {2, 3, 4}),
                    ops::pad_backward(g.to(kFloat32), {2, 1, 1, 1}, PadMode::Replicate, {2, 3, 4}).to(kBFloat16)));
  // Empty inputs give empty outputs.
  EXPECT_EQ(nn::F::pad(zeros({0, 3, 4}), {1, 1, 2, 2}, PadMode::Reflect).sizes(), (Shape{0, 7, 6}));
}

TEST(Pad, EveryModeMatchesTheDefinitionAndGradchecks) {
  struct Case {
    Shape x;
    int64_t wl, wr, hl, hr;
  };
  const std::vector<Case> cases = {{{2, 5, 4}, 2, 3, 1, 4}, {{3, 1, 6}, 0, 5, 0, 0}, {{1, 3, 3}, -1, 2, 2, -1},
                                   {{2, 4, 1}, 0, 0, 3, 3}};
  uint64_t seed = 1;
  for (PadMode m : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    for (const Case& c : cases) {
      const std::string what = std::string(name(m)) + " of " + shape_str(c.x);
      const bool fits = m != PadMode::Reflect || (c.wl < c.x[2] && c.wr < c.x[2] && c.hl < c.x[1] && c.hr < c.x[1]);
      const bool wraps_once = m != PadMode::Circular || (std::min({c.wl, c.wr, c.hl, c.hr}) >= 0 && c.wl <= c.x[2] &&
                                                         c.wr <= c.x[2] && c.hl <= c.x[1] && c.hr <= c.x[1]);
      if (!fits || !wraps_once) continue;
      const Tensor x = randn64(c.x, seed++);
      Shape shape;
      const std::vector<double> ref = pad_reference(x, m, c.wl, c.wr, c.hl, c.hr, &shape);
      test::expect_tensor_near(nn::F::pad(x, {c.wl, c.wr, c.hl, c.hr}, m), ref, shape, 0, 0, what);
      // float32 copies the same elements, bit for bit.
      const Tensor x32 = x.to(kFloat32);
      test::expect_tensor_near(nn::F::pad(x32, {c.wl, c.wr, c.hl, c.hr}, m),
                               pad_reference(x32.to(kFloat64), m, c.wl, c.wr, c.hl, c.hr, &shape), shape, 0, 0,
                               what + " in float32");
      gradcheck([&](const std::vector<Tensor>& t) { return nn::F::pad(t[0], {c.wl, c.wr, c.hl, c.hr}, m); },
                {x.clone().requires_grad_()});
    }
  }
}

// The gradient of a copy sums each output's gradient into the element it copied: for replicate of
// (a, b) by two on the left, a receives three gradients.
TEST(Pad, GradientSumsTheCopies) {
  const Tensor x = tensor({1.0, 2.0}, kFloat64).view({1, 2}).requires_grad_();
  const Tensor probe = tensor({1.0, 10.0, 100.0, 1000.0}, kFloat64).view({1, 4});
  (nn::F::pad(x, {2, 0}, PadMode::Replicate) * probe).sum().backward();
  EXPECT_EQ(test::values(x.grad()), (std::vector<double>{111, 1000}));
  // Under create_graph the gradient is itself differentiable.
  gradcheck([](const std::vector<Tensor>& t) {
    autograd::EnableGradGuard enable;  // the numeric passes run without grad; this function needs it
    const Tensor in = t[0].requires_grad() ? t[0] : t[0].detach().requires_grad_();
    const Tensor out = nn::F::pad(in, {2, 1, 1, 2}, PadMode::Reflect);
    return autograd::grad({(out * out * out).sum()}, {in}, {}, std::nullopt, true).at(0);
  }, {randn64({2, 3, 4}, 7).requires_grad_()});
}

TEST(Pad, Errors) {
  const Tensor x = zeros({2, 3, 4});
  expect_error([&] { (void)nn::F::pad(x, {4, 0}, PadMode::Reflect); }, {"pad", "reflect", "smaller than its size 4"});
  expect_error([&] { (void)nn::F::pad(x, {0, 5}, PadMode::Circular); }, {"pad", "circular", "in [0, 4]"});
  expect_error([&] { (void)nn::F::pad(x, {-1, 2}, PadMode::Circular); }, {"pad", "circular", "do not crop"});
  expect_error([&] { (void)nn::F::pad(zeros({2, 0}), {1, 1}, PadMode::Replicate); }, {"replicate", "non-empty"});
  expect_error([&] { (void)nn::F::pad(x, {1, 1}, PadMode::Reflect, 2.0); }, {"reflect takes no value"});
  expect_error([&] { (void)nn::F::pad(x, {1, 1, 1}, PadMode::Circular); }, {"pad", "(before, after) pairs"});
  expect_error([&] { (void)nn::F::pad(x, {1, 1, 1, 1, 1, 1, 1, 1}, PadMode::Replicate); }, {"4 pairs", "3 dims"});
  expect_error([&] { (void)nn::F::pad(x, {-3, -2}, PadMode::Replicate); }, {"negative"});
}

TEST(Pad, Modules) {
  const Tensor x = randn64({2, 3, 4, 5}, 3);
  auto reflect = nn::ReflectionPad2d({1, 2, 3, 0});
  EXPECT_EQ(reflect->str(), "ReflectionPad2d((1, 2, 3, 0))");
  test::expect_tensor_near(reflect(x), test::values(nn::F::pad(x, {1, 2, 3, 0}, PadMode::Reflect)), {2, 3, 7, 8}, 0, 0);
  EXPECT_EQ(nn::ReplicationPad1d(2)(x).sizes(), (Shape{2, 3, 4, 9}));
  EXPECT_EQ(nn::CircularPad3d(1)(x).sizes(), (Shape{2, 5, 6, 7}));
  EXPECT_EQ(nn::ZeroPad2d(1)(x).sizes(), (Shape{2, 3, 6, 7}));
  EXPECT_EQ(nn::ZeroPad1d({1, 2})->str(), "ZeroPad1d((1, 2))");
  auto constant = nn::ConstantPad1d({1, 0}, 0.5);
  EXPECT_EQ(constant->str(), "ConstantPad1d(padding=(1, 0), value=0.5)");
  EXPECT_EQ(test::values(constant(tensor({1.0, 2.0}, kFloat64).view({1, 2}))), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(nn::ConstantPad3d(1, 2.0)(x).sizes(), (Shape{2, 5, 6, 7}));
  expect_error([] { (void)nn::ReflectionPad2d({1, 2, 3}); }, {"ReflectionPad2d", "one value for every side or 4"});
  expect_error([&] { (void)nn::ReflectionPad3d(1)(zeros({2, 3, 4})); }, {"ReflectionPad3d", "more than 3 dims"});
}

// A Conv1d with a delta kernel reads its input shifted by one: with circular padding that is a roll, with
// reflect and replicate the edge shows which element the padding copied.
TEST(Pad, ConvPaddingModes) {
  const Tensor x = arange(1, 6, 1, TensorOptions(kFloat64)).view({1, 1, 5});  // 1 2 3 4 5
  const std::vector<std::pair<PadMode, std::vector<double>>> cases = {
      {PadMode::Constant, {0, 1, 2, 3, 4}},
      {PadMode::Circular, {5, 1, 2, 3, 4}},
      {PadMode::Reflect, {2, 1, 2, 3, 4}},
      {PadMode::Replicate, {1, 1, 2, 3, 4}}};
  for (const auto& [mode, want] : cases) {
    auto conv = nn::Conv1d(1, 1, 3, {.padding = 1, .bias = false, .padding_mode = mode});
    conv->to(kFloat64);
    {
      autograd::NoGradGuard no_grad;
      conv->weight.copy_(tensor({1.0, 0.0, 0.0}, kFloat64).view({1, 1, 3}));
    }
    EXPECT_EQ(test::values(conv(x)), want);
  }
  // Conv2d pads both dims the same way: a delta at the top-left corner of a 3 x 3 kernel rolls rows and columns.
  auto conv2 = nn::Conv2d(1, 1, 3, {.padding = 1, .bias = false, .padding_mode = PadMode::Circular});
  conv2->to(kFloat64);
  {
    autograd::NoGradGuard no_grad;
    conv2->weight.copy_(tensor({1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, kFloat64).view({1, 1, 3, 3}));
  }
  const Tensor img = randn64({1, 1, 4, 5}, 4);
  const std::vector<double> iv = img.to_vector<double>();
  std::vector<double> rolled;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 5; ++j) rolled.push_back(iv[((i + 3) % 4) * 5 + (j + 4) % 5]);
  test::expect_tensor_near(conv2(img), rolled, {1, 1, 4, 5}, 0, 0, "circular conv2d");
  EXPECT_NE(conv2->str().find("padding_mode=circular"), std::string::npos) << conv2->str();
}

// out[*, c, h r + i, w r + j] = in[*, c r^2 + i r + j, h, w].
TEST(PixelShuffle, MatchesTheDefinitionAndInverts) {
  const int64_t r = 3, C = 2, H = 2, W = 4;
  const Tensor x = randn64({2, 2, C * r * r, H, W}, 5);  // two batch dims
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> ref;
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H * r; ++y)
        for (int64_t z = 0; z < W * r; ++z)
          ref.push_back(v[(((b * C + c) * r * r + (y % r) * r + (z % r)) * H + y / r) * W + z / r]);
  const Tensor y = nn::F::pixel_shuffle(x, r);
  test::expect_tensor_near(y, ref, {2, 2, C, H * r, W * r}, 0, 0);
  test::expect_tensor_near(nn::F::pixel_unshuffle(y, r), v, x.sizes(), 0, 0, "unshuffle");
  test::expect_tensor_near(nn::PixelUnshuffle(r)(nn::PixelShuffle(r)(x)), v, x.sizes(), 0, 0, "modules");
  EXPECT_EQ(nn::PixelShuffle(2)->str(), "PixelShuffle(upscale_factor=2)");
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::pixel_shuffle(t[0], 2); },
            {randn64({1, 8, 2, 3}, 6).requires_grad_()});
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::pixel_unshuffle(t[0], 2); },
            {randn64({2, 4, 6}, 7).requires_grad_()});
  expect_error([] { (void)nn::F::pixel_shuffle(zeros({1, 6, 2, 2}), 2); }, {"pixel_shuffle", "6 channels", "4"});
  expect_error([] { (void)nn::F::pixel_unshuffle(zeros({1, 1, 3, 4}), 2); }, {"pixel_unshuffle", "divisible by"});
  expect_error([] { (void)nn::F::pixel_shuffle(zeros({4, 2}), 2); }, {"pixel_shuffle", "(*, C r^2, H, W)"});
}

// rms_norm against the definition in float64, with and without the weight, over one and two dims.
TEST(RMSNorm, MatchesTheDefinitionAndGradchecks) {
  const Tensor x = randn64({3, 4, 5}, 8), w = randn64({4, 5}, 9);
  const std::vector<double> v = x.to_vector<double>(), wv = w.to_vector<double>();
  for (double eps : {1e-6, 0.5}) {
    std::vector<double> ref;
    for (int64_t row = 0; row < 3; ++row) {
      double ms = 0;
      for (int64_t i = 0; i < 20; ++i) ms += v[row * 20 + i] * v[row * 20 + i] / 20;
      for (int64_t i = 0; i < 20; ++i) ref.push_back(v[row * 20 + i] / std::sqrt(ms + eps) * wv[i]);
    }
    test::expect_tensor_near(nn::F::rms_norm(x, {4, 5}, w, eps), ref, x.sizes(), 1e-14, 1e-14);
  }
  // eps unset: float64's machine epsilon, which leaves a unit row at 1.
  EXPECT_EQ(test::values(nn::F::rms_norm(ones({1, 4}, kFloat64), {4})), (std::vector<double>(4, 1.0)));
  // Over the last dim only, no weight; float32 and bfloat16 (normalized in float32, rounded once) near float64.
  const Tensor ref_last = nn::F::rms_norm(x, {5}, {}, 1e-5);
  test::expect_tensor_near(nn::F::rms_norm(x.to(kFloat32), {5}, {}, 1e-5), test::values(ref_last), x.sizes(), 1e-6,
                           1e-6, "float32");
  const Tensor xb = x.to(kBFloat16);
  const Tensor yb = nn::F::rms_norm(xb, {5}, {}, 1e-5);
  EXPECT_EQ(yb.dtype(), kBFloat16);
  test::expect_tensor_near(yb, test::values(nn::F::rms_norm(xb.to(kFloat64), {5}, {}, 1e-5).to(kBFloat16)),
                           x.sizes(), 0, 0, "bfloat16 rounded once");
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::rms_norm(t[0], {4, 5}, t[1], 1e-3); },
            {x.clone().requires_grad_(), w.clone().requires_grad_()});
  // The module: weight of ones, in state_dict; a braced shape.
  auto norm = nn::RMSNorm({5}, 1e-5);
  EXPECT_EQ(norm->str(), "RMSNorm((5), eps=1e-05, elementwise_affine=true)");
  EXPECT_EQ(norm->named_parameters().size(), 1u);
  norm->to(kFloat64);
  test::expect_tensor_near(norm(x), test::values(ref_last), x.sizes(), 0, 0, "module");
  EXPECT_FALSE(nn::RMSNorm(Shape{5}, std::nullopt, false)->weight.defined());
  expect_error([&] { (void)nn::F::rms_norm(x, {4}); }, {"rms_norm", "does not end in normalized_shape (4)"});
  expect_error([&] { (void)nn::F::rms_norm(x, {5}, ones({4})); }, {"rms_norm", "weight must have"});
  expect_error([] { (void)nn::F::rms_norm(ones({2, 3}, kInt64), {3}); }, {"rms_norm", "floating"});
}

// Channel dropout keeps or drops whole channels: each (sample, channel) is all zeros or all x / (1 - p), and
// the share dropped is near p.
TEST(ChannelDropout, DropsWholeChannels) {
  const double p = 0.3;
  Generator gen(11);
  const Tensor x = ones({40, 50, 3, 2}, kFloat64);
  const Tensor y = nn::F::dropout2d(x, p, true, &gen);
  const std::vector<double> v = y.to_vector<double>();
  int64_t dropped = 0;
  for (int64_t ch = 0; ch < 40 * 50; ++ch) {
    const double first = v[ch * 6];
    EXPECT_TRUE(first == 0.0 || std::fabs(first - 1 / (1 - p)) < 1e-15) << first;
    for (int64_t i = 1; i < 6; ++i) ASSERT_EQ(v[ch * 6 + i], first) << "channel " << ch;
    dropped += first == 0.0;
  }
  // 2000 Bernoulli(0.3) draws: standard deviation sqrt(2000 0.3 0.7) = 20.5; allow five.
  EXPECT_NEAR(static_cast<double>(dropped), 2000 * p, 5 * 20.5);
  // The gradient is the same mask.
  const Tensor xg = randn64({4, 6, 5}, 12).requires_grad_();
  Generator g1(3), g2(3);
  nn::F::dropout1d(xg, 0.5, true, &g1).sum().backward();
  test::expect_tensor_near(xg.grad(), test::values(nn::F::dropout1d(ones({4, 6, 5}, kFloat64), 0.5, true, &g2)),
                           xg.sizes(), 0, 0, "gradient");
  // Unbatched input draws per channel; eval mode and p = 0 are the identity; p = 1 zeroes.
  const Tensor u = nn::F::dropout3d(ones({8, 2, 2, 2}, kFloat64), 0.5, true, &gen);
  for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(u[c].min().item<double>(), u[c].max().item<double>());
  auto layer = nn::Dropout2d(0.5);
  layer->eval();
  EXPECT_TRUE(layer(x).equal(x));
  EXPECT_EQ(layer->str(), "Dropout2d(p=0.5)");
  EXPECT_EQ(nn::F::dropout2d(x, 1.0).abs().sum().item<double>(), 0.0);
  expect_error([] { (void)nn::F::dropout2d(zeros({2, 3}), 0.5); }, {"dropout2d", "4-D (N, C, ...) or 3-D (C, ...)"});
  expect_error([] { (void)nn::Dropout1d(1.5); }, {"Dropout1d", "[0, 1]"});
}

// The 1-d pools against windows read off by hand, and their modules.
TEST(Pool1d, MaxAndAverage) {
  const Tensor x = tensor({3.0, -1.0, 4.0, 1.0, -5.0, 9.0, 2.0}, kFloat64).view({1, 1, 7});
  EXPECT_EQ(test::values(nn::F::max_pool1d(x, 2)), (std::vector<double>{3, 4, 9}));
  EXPECT_EQ(test::values(nn::F::max_pool1d(x, 3, 2, 1)), (std::vector<double>{3, 4, 9, 9}));
  EXPECT_EQ(test::values(nn::F::max_pool1d(x, 2, 1, 0, 3)), (std::vector<double>{3, -1, 9, 2}));  // dilation 3
  EXPECT_EQ(test::values(nn::F::avg_pool1d(x, 3, 2)), (std::vector<double>{2, 0, 2}));
  // Padded ends count as zeros, or not with count_include_pad false.
  EXPECT_EQ(test::values(nn::F::avg_pool1d(x.narrow(2, 0, 4), 2, 2, 1)), (std::vector<double>{1.5, 1.5, 0.5}));
  EXPECT_EQ(test::values(nn::F::avg_pool1d(x.narrow(2, 0, 4), 2, 2, 1, false)), (std::vector<double>{3, 1.5, 1}));
  // Unbatched (C, L), modules, gradients.
  EXPECT_EQ(nn::MaxPool1d(2)(zeros({3, 8})).sizes(), (Shape{3, 4}));
  EXPECT_EQ(nn::AvgPool1d(3, 1)(zeros({2, 3, 8})).sizes(), (Shape{2, 3, 6}));
  EXPECT_EQ(nn::MaxPool1d(3, 2, 1)->str(), "MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=1)");
  const Tensor g = randn64({2, 3, 9}, 13).requires_grad_();
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::max_pool1d(t[0], 3, 2, 1); }, {g});
  gradcheck([](const std::vector<Tensor>& t) { return nn::F::avg_pool1d(t[0], 3, 2, 1, false); }, {g});
  expect_error([] { (void)nn::F::max_pool1d(zeros({2, 3, 4, 5}), 2); }, {"max_pool1d", "(N, C, L) or (C, L)"});
  expect_error([] { (void)nn::F::max_pool1d(zeros({2, 3, 8}), 2, 2, 2); }, {"max_pool1d", "at most half"});
}

// Braced lists reach the modules' constructors, first or second; Unflatten splits a dim; the 3-d norms.
TEST(NewLayers, BracedSizesUnflattenAnd3dNorms) {
  EXPECT_EQ(nn::AdaptiveAvgPool3d({2, 4, 3})(zeros({1, 2, 4, 8, 6})).sizes(), (Shape{1, 2, 2, 4, 3}));
  EXPECT_EQ(nn::LayerNorm({6})(zeros({2, 6})).sizes(), (Shape{2, 6}));
  EXPECT_EQ(nn::AdaptiveAvgPool2d({2, 3})(zeros({1, 1, 4, 6})).sizes(), (Shape{1, 1, 2, 3}));  // a braced Pair
  EXPECT_EQ(nn::MaxPool2d({2, 3})(zeros({1, 1, 4, 6})).sizes(), (Shape{1, 1, 2, 2}));
  expect_error([] { (void)nn::F::Pair({1, 2, 3}); }, {"Pair", "one size or two", "got 3"});
  auto unflatten = nn::Unflatten(1, {2, -1});
  EXPECT_EQ(unflatten(zeros({3, 12, 5})).sizes(), (Shape{3, 2, 6, 5}));
  EXPECT_EQ(unflatten->str(), "Unflatten(dim=1, unflattened_size=(2, -1))");
  // BatchNorm3d normalizes each channel over (N, D, H, W): mean 0 and biased variance 1 in training.
  auto bn = nn::BatchNorm3d(3, {.eps = 0.0});
  bn->to(kFloat64);
  const Tensor y = bn(randn64({2, 3, 2, 3, 4}, 14) * 3.0 + 1.0);
  const Tensor per_channel = y.transpose(0, 1).reshape({3, -1});
  for (double m : test::values(per_channel.mean({1}))) EXPECT_NEAR(m, 0.0, 1e-12);
  for (double s : test::values((per_channel * per_channel).mean({1}))) EXPECT_NEAR(s, 1.0, 1e-12);
  expect_error([&] { (void)bn(zeros({2, 3, 4, 4})); }, {"BatchNorm3d", "5-D"});
  auto in3 = nn::InstanceNorm3d(3);
  EXPECT_EQ(in3(zeros({3, 2, 2, 2})).sizes(), (Shape{3, 2, 2, 2}));
  expect_error([&] { (void)in3(zeros({2, 3, 4})); }, {"InstanceNorm3d", "5-D (batched) or 4-D"});
}

}  // namespace
}  // namespace kiln
