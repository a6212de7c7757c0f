// kiln's transposed convolution, interpolate (every mode, align_corners), instance norm, padding in every mode
// (and the convolutions' padding_mode), the pixel shuffles, the 1-d and 3-d pools, adaptive max pooling, the 3-d
// and 1-d transposed convolutions, conv3d and padding="same" against
// LibTorch's on the same float64 weights and inputs: outputs, and the gradients of the input, weight and bias.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

using nn::F::Pair;

TEST(SpatialParity, ConvTranspose2dMatchesLibTorch) {
  struct Case {
    Shape x, w;
    Pair stride, padding, output_padding;
    int64_t groups;
    Pair dilation;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 4}, {3, 2, 3, 3}, 1, 0, 0, 1, 1},        {{1, 4, 3, 3}, {4, 3, 4, 4}, 2, 1, 0, 1, 1},
      {{2, 2, 4, 3}, {2, 2, 3, 2}, {2, 3}, {1, 0}, {1, 2}, 1, 1}, {{1, 4, 3, 4}, {4, 1, 3, 3}, 2, 1, 1, 2, {2, 1}},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    const std::string what = "conv_transpose2d of " + shape_str(c.x) + " by " + shape_str(c.w);
    Tensor x = test::randn64(c.x, seed++).requires_grad_(), w = test::randn64(c.w, seed++).requires_grad_();
    Tensor b = test::randn64({c.w[1] * c.groups}, seed++).requires_grad_();
    Tensor y = nn::F::conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    const Tensor probe = test::randn64(y.sizes(), seed++);
    (y * probe).sum().backward();
    torch::Tensor tx = to_torch(x).requires_grad_(), tw = to_torch(w).requires_grad_(),
                  tb = to_torch(b).requires_grad_();
    torch::Tensor ty = torch::conv_transpose2d(tx, tw, tb, {c.stride.h, c.stride.w}, {c.padding.h, c.padding.w},
                                               {c.output_padding.h, c.output_padding.w}, c.groups,
                                               {c.dilation.h, c.dilation.w});
    (ty * to_torch(probe)).sum().backward();
    expect_same(y, ty, 1e-12, what);
    expect_same(x.grad(), tx.grad(), 1e-12, what + ": input gradient");
    expect_same(w.grad(), tw.grad(), 1e-12, what + ": weight gradient");
    expect_same(b.grad(), tb.grad(), 1e-12, what + ": bias gradient");
  }
}

torch::nn::functional::InterpolateFuncOptions::mode_t torch_mode(const std::string& m) {
  if (m == "nearest") return torch::kNearest;
  if (m == "nearest-exact") return torch::kNearestExact;
  if (m == "linear") return torch::kLinear;
  if (m == "bilinear") return torch::kBilinear;
  if (m == "bicubic") return torch::kBicubic;
  if (m == "trilinear") return torch::kTrilinear;
  return torch::kArea;
}

TEST(SpatialParity, InterpolateMatchesLibTorch) {
  namespace tf = torch::nn::functional;
  struct Case {
    Shape input;
    std::vector<int64_t> size;
    std::vector<double> scale;
    std::vector<std::string> modes;
  };
  const std::vector<std::string> planar = {"nearest", "nearest-exact", "bilinear", "bicubic", "area"};
  const std::vector<std::string> line = {"nearest", "nearest-exact", "linear", "area"};
  const std::vector<std::string> volume = {"nearest", "nearest-exact", "trilinear", "area"};
  // Sizes up and down, factors whole and not (the float arithmetic of nearest shows at 10 from 6: 0.6 * 5).
  const std::vector<Case> cases = {
      {{2, 3, 5, 7}, {10, 14}, {}, planar}, {{2, 3, 5, 7}, {3, 4}, {}, planar},
      {{2, 3, 5, 7}, {6, 10}, {}, planar},  {{2, 3, 5, 7}, {5, 7}, {}, planar},
      {{2, 3, 5, 7}, {}, {2.0, 3.0}, planar}, {{2, 3, 5, 7}, {}, {1.5, 0.75}, planar},
      {{2, 3, 5, 7}, {}, {0.5, 2.5}, planar}, {{2, 3, 9}, {4}, {}, line},
      {{2, 3, 9}, {13}, {}, line},           {{2, 3, 9}, {}, {1.7}, line},
      {{1, 2, 3, 4, 5}, {5, 2, 7}, {}, volume}, {{1, 2, 3, 4, 5}, {}, {1.5, 0.5, 2.0}, volume},
  };
  for (const Case& c : cases) {
    const Tensor x0 = test::randn64(c.input, 11);
    for (const std::string& mode : c.modes) {
      const bool interpolating = mode != "nearest" && mode != "nearest-exact" && mode != "area";
      for (bool align : {false, true}) {
        if (align && !interpolating) continue;
        Tensor x = x0.clone().requires_grad_();
        Tensor y = nn::F::interpolate(x, {.size = c.size, .scale_factor = c.scale, .mode = mode, .align_corners = align});
        const Tensor probe = test::randn64(y.sizes(), 12);
        (y * probe).sum().backward();
        auto o = tf::InterpolateFuncOptions().mode(torch_mode(mode));
        if (!c.size.empty()) o.size(c.size);
        else o.scale_factor(c.scale);
        if (interpolating) o.align_corners(align);
        torch::Tensor tx = to_torch(x0).requires_grad_();
        torch::Tensor ty = tf::interpolate(tx, o);
        (ty * to_torch(probe)).sum().backward();
        std::string what = mode + (align ? " align_corners" : "") + " " + shape_str(c.input) + " to ";
        if (!c.size.empty()) what += shape_str(c.size);
        for (double f : c.scale) what += " x" + std::to_string(f);
        expect_same(y, ty, 1e-13, what);
        expect_same(x.grad(), tx.grad(), 1e-12, what + ": gradient");
      }
    }
  }
}

// InstanceNorm2d with affine parameters and tracked statistics: training outputs, the running statistics it
// leaves, eval outputs from them, and the gradients of input and parameters.
TEST(SpatialParity, InstanceNormMatchesLibTorch) {
  auto ours = nn::InstanceNorm2d(3, nn::InstanceNormOptions{.momentum = 0.3, .affine = true,
                                                            .track_running_stats = true});
  ours->to(kFloat64);
  {
    NoGradGuard no_grad;
    ours->weight.copy_(test::randn64({3}, 21));
    ours->bias.copy_(test::randn64({3}, 22));
  }
  torch::nn::InstanceNorm2d theirs(torch::nn::InstanceNorm2dOptions(3).momentum(0.3).affine(true)
                                       .track_running_stats(true));
  theirs->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    theirs->weight.copy_(to_torch(ours->weight));
    theirs->bias.copy_(to_torch(ours->bias));
  }
  for (int step = 0; step < 2; ++step) {
    Tensor x = (test::randn64({4, 3, 5, 6}, 30 + step) * 3.0 + 2.0).requires_grad_();
    Tensor y = ours(x);
    const Tensor probe = test::randn64(y.sizes(), 40 + step);
    (y * probe).sum().backward();
    torch::Tensor tx = to_torch(x).requires_grad_();
    torch::Tensor ty = theirs->forward(tx);
    (ty * to_torch(probe)).sum().backward();
    const std::string what = "InstanceNorm2d training step " + std::to_string(step);
    expect_same(y, ty, 1e-12, what);
    expect_same(x.grad(), tx.grad(), 1e-12, what + ": input gradient");
    expect_same(ours->weight.grad(), theirs->weight.grad(), 1e-12, what + ": weight gradient");
    expect_same(ours->bias.grad(), theirs->bias.grad(), 1e-12, what + ": bias gradient");
    expect_same(ours->running_mean, theirs->running_mean, 1e-12, what + ": running_mean");
    expect_same(ours->running_var, theirs->running_var, 1e-12, what + ": running_var");
  }
  ours->eval();
  theirs->eval();
  const Tensor x = test::randn64({2, 3, 4, 4}, 50);
  expect_same(ours(x), theirs->forward(to_torch(x)), 1e-12, "InstanceNorm2d eval");
}

// Padding in each mode over one, two and three dims, with negative pads, through F::pad and through the
// convolutions' padding_mode: outputs and gradients.
TEST(SpatialParity, PadModesMatchLibTorch) {
  namespace tf = torch::nn::functional;
  struct Case {
    Shape input;
    std::vector<int64_t> pads;
  };
  const std::vector<Case> cases = {{{2, 3, 6}, {2, 5}},           {{2, 3, 5, 4}, {1, 3, 4, 0}},
                                   {{1, 2, 4, 5}, {-1, 2, 3, -2}}, {{1, 2, 3, 4, 5}, {1, 2, 0, 3, 2, 1}},
                                   {{2, 3, 5, 4}, {3, 3, 4, 4}}};
  const std::vector<std::pair<nn::F::PadMode, tf::PadFuncOptions::mode_t>> modes = {
      {nn::F::PadMode::Reflect, torch::kReflect},
      {nn::F::PadMode::Replicate, torch::kReplicate},
      {nn::F::PadMode::Circular, torch::kCircular}};
  uint64_t seed = 60;
  for (const Case& c : cases) {
    for (const auto& [ours, theirs] : modes) {
      const int64_t last = c.input.back();
      if (ours == nn::F::PadMode::Reflect && (c.pads[0] >= last || c.pads[1] >= last)) continue;
      if (ours == nn::F::PadMode::Reflect && c.pads.size() > 2 && c.pads[2] >= c.input[c.input.size() - 2]) continue;
      if (ours == nn::F::PadMode::Circular && *std::min_element(c.pads.begin(), c.pads.end()) < 0) continue;
      const std::string what = std::to_string(static_cast<int>(ours)) + " pad of " + shape_str(c.input) + " by " +
                               shape_str(c.pads);
      Tensor x = test::randn64(c.input, seed++).requires_grad_();
      Tensor y = nn::F::pad(x, c.pads, ours);
      const Tensor probe = test::randn64(y.sizes(), seed++);
      (y * probe).sum().backward();
      torch::Tensor tx = to_torch(x).requires_grad_();
      torch::Tensor ty = tf::pad(tx, tf::PadFuncOptions(c.pads).mode(theirs));
      (ty * to_torch(probe)).sum().backward();
      expect_same(y, ty, 0, what);
      expect_same(x.grad(), tx.grad(), 1e-14, what + ": gradient");
    }
  }
  // Conv2d and Conv1d with each padding_mode, the same weights in both.
  const std::vector<std::pair<nn::F::PadMode, torch::nn::detail::conv_padding_mode_t>> conv_modes = {
      {nn::F::PadMode::Constant, torch::kZeros},
      {nn::F::PadMode::Reflect, torch::kReflect},
      {nn::F::PadMode::Replicate, torch::kReplicate},
      {nn::F::PadMode::Circular, torch::kCircular}};
  for (const auto& [ours, theirs] : conv_modes) {
    auto conv = nn::Conv2d(3, 4, Pair(3, 2), {.stride = {2, 1}, .padding = {2, 1}, .padding_mode = ours});
    conv->to(kFloat64);
    torch::nn::Conv2d tconv(torch::nn::Conv2dOptions(3, 4, {3, 2}).stride({2, 1}).padding({2, 1}).padding_mode(theirs));
    tconv->to(torch::kDouble);
    auto conv1 = nn::Conv1d(2, 3, 3, {.padding = 2, .padding_mode = ours});
    conv1->to(kFloat64);
    torch::nn::Conv1d tconv1(torch::nn::Conv1dOptions(2, 3, 3).padding(2).padding_mode(theirs));
    tconv1->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;
      tconv->weight.copy_(to_torch(conv->weight));
      tconv->bias.copy_(to_torch(conv->bias));
      tconv1->weight.copy_(to_torch(conv1->weight));
      tconv1->bias.copy_(to_torch(conv1->bias));
    }
    const Tensor x = test::randn64({2, 3, 5, 6}, seed++), x1 = test::randn64({2, 2, 7}, seed++);
    expect_same(conv(x), tconv->forward(to_torch(x)), 1e-12, "Conv2d " + conv->str());
    expect_same(conv1(x1), tconv1->forward(to_torch(x1)), 1e-12, "Conv1d " + conv1->str());
  }
}

// pixel_shuffle and pixel_unshuffle move the same elements; the 1-d pools pick the same windows.
TEST(SpatialParity, PixelShuffleAndPool1dMatchLibTorch) {
  const Tensor x = test::randn64({2, 18, 3, 4}, 70);
  expect_same(nn::F::pixel_shuffle(x, 3), torch::pixel_shuffle(to_torch(x), 3), 0, "pixel_shuffle");
  expect_same(nn::F::pixel_unshuffle(x.narrow(3, 0, 3), 3), torch::pixel_unshuffle(to_torch(x.narrow(3, 0, 3)), 3),
              0, "pixel_unshuffle");
  struct Case {
    int64_t kernel, stride, padding, dilation;
  };
  const Tensor s = test::randn64({2, 3, 11}, 71);
  for (const Case& c : std::vector<Case>{{2, 2, 0, 1}, {3, 2, 1, 1}, {3, 1, 1, 2}, {4, 3, 2, 1}}) {
    const std::string what = "k" + std::to_string(c.kernel) + " s" + std::to_string(c.stride) + " p" +
                             std::to_string(c.padding) + " d" + std::to_string(c.dilation);
    Tensor xs = s.clone().requires_grad_();
    Tensor y = nn::F::max_pool1d(xs, c.kernel, c.stride, c.padding, c.dilation);
    const Tensor probe = test::randn64(y.sizes(), 72);
    (y * probe).sum().backward();
    torch::Tensor ts = to_torch(s).requires_grad_();
    torch::Tensor ty = torch::max_pool1d(ts, {c.kernel}, {c.stride}, {c.padding}, {c.dilation});
    (ty * to_torch(probe)).sum().backward();
    expect_same(y, ty, 0, "max_pool1d " + what);
    expect_same(xs.grad(), ts.grad(), 0, "max_pool1d gradient " + what);
    for (bool include : {true, false}) {
      expect_same(nn::F::avg_pool1d(s, c.kernel, c.stride, c.padding, include),
                  torch::avg_pool1d(to_torch(s), {c.kernel}, {c.stride}, {c.padding}, false, include), 1e-14,
                  "avg_pool1d " + what + (include ? "" : " count_include_pad false"));
    }
  }
}

// 2-d pooling with ceil_mode (last windows past the end, one that would start in the padding dropped),
// count_include_pad, divisor_override and dilation: values and gradients.
TEST(SpatialParity, PoolingCeilModeMatchesLibTorch) {
  struct Case {
    Shape input;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  };
  const std::vector<Case> cases = {{{2, 3, 7, 8}, 3, 2, 2, 2, 0, 0, 1, 1},   {{2, 3, 7, 9}, 3, 3, 2, 3, 1, 1, 1, 1},
                                   {{1, 2, 6, 5}, 3, 2, 2, 2, 1, 1, 1, 1},   {{1, 2, 10, 11}, 3, 2, 4, 5, 0, 1, 1, 1},
                                   {{1, 2, 9, 10}, 2, 3, 2, 3, 0, 1, 2, 2}};
  uint64_t seed = 90;
  for (const Case& c : cases) {
    const std::string what = shape_str(c.input) + " k" + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " s" +
                             std::to_string(c.sh) + "x" + std::to_string(c.sw);
    for (bool ceil_mode : {true, false}) {
      Tensor x = test::randn64(c.input, seed++).requires_grad_();
      Tensor y = nn::F::max_pool2d(x, {c.kh, c.kw}, nn::F::Pair(c.sh, c.sw), nn::F::Pair(c.ph, c.pw),
                                   nn::F::Pair(c.dh, c.dw), ceil_mode);
      const Tensor probe = test::randn64(y.sizes(), seed++);
      (y * probe).sum().backward();
      torch::Tensor tx = to_torch(x).requires_grad_();
      torch::Tensor ty = torch::max_pool2d(tx, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, ceil_mode);
      (ty * to_torch(probe)).sum().backward();
      const std::string mode = ceil_mode ? " ceil" : " floor";
      expect_same(y, ty, 0, "max_pool2d " + what + mode);
      expect_same(x.grad(), tx.grad(), 0, "max_pool2d gradient " + what + mode);
      if (c.dh != 1 || c.dw != 1) continue;  // avg_pool2d has no dilation
      for (bool include : {true, false})
        for (std::optional<int64_t> divisor : {std::optional<int64_t>(), std::optional<int64_t>(4)}) {
          Tensor xa = x.detach().requires_grad_();
          Tensor ya = nn::F::avg_pool2d(xa, {c.kh, c.kw}, nn::F::Pair(c.sh, c.sw), nn::F::Pair(c.ph, c.pw), include,
                                        ceil_mode, divisor);
          const Tensor pa = test::randn64(ya.sizes(), seed++);
          (ya * pa).sum().backward();
          torch::Tensor txa = to_torch(xa).requires_grad_();
          torch::Tensor tya = torch::avg_pool2d(txa, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, ceil_mode, include,
                                                divisor ? c10::optional<int64_t>(*divisor) : c10::nullopt);
          (tya * to_torch(pa)).sum().backward();
          const std::string how = what + mode + (include ? " include_pad" : " exclude_pad") +
                                  (divisor ? " divisor 4" : "");
          expect_same(ya, tya, 1e-14, "avg_pool2d " + how);
          expect_same(xa.grad(), txa.grad(), 1e-14, "avg_pool2d gradient " + how);
        }
    }
  }
}

// return_indices and max_unpool2d, odd sizes restored through output_size: values, indices, gradients.
TEST(SpatialParity, MaxUnpoolMatchesLibTorch) {
  const Tensor x = test::randn64({2, 3, 7, 9}, 95);
  for (bool ceil_mode : {false, true}) {
    auto [y, idx] = nn::F::max_pool2d_with_indices(x, 3, 2, 1, 1, ceil_mode);
    auto [ty, tidx] = torch::max_pool2d_with_indices(to_torch(x), {3, 3}, {2, 2}, {1, 1}, {1, 1}, ceil_mode);
    const std::string mode = ceil_mode ? " ceil" : " floor";
    expect_same(y, ty, 0, "max_pool2d_with_indices" + mode);
    expect_same(idx, tidx, 0, "indices" + mode);
    Tensor yl = y.detach().requires_grad_();
    Tensor u = nn::F::max_unpool2d(yl, idx, 3, 2, 1, nn::F::Pair(7, 9));
    const Tensor probe = test::randn64(u.sizes(), 96);
    (u * probe).sum().backward();
    torch::Tensor tyl = to_torch(y).requires_grad_();
    torch::Tensor tu = torch::max_unpool2d(tyl, tidx, {7, 9});
    (tu * to_torch(probe)).sum().backward();
    expect_same(u, tu, 0, "max_unpool2d" + mode);
    expect_same(yl.grad(), tyl.grad(), 0, "max_unpool2d gradient" + mode);
  }
}

// The same for volumes, on values with many ties (0, 1, 2) so the first-maximum rule shows; then random values
// for the gradients. LibTorch's max_unpool3d takes its stride and padding as well.
TEST(SpatialParity, MaxUnpool3dMatchesLibTorch) {
  Generator gen(97);
  const Tensor ties = randint(0, 3, {2, 2, 5, 7, 6}, kInt64, &gen).to(kFloat64);
  for (bool ceil_mode : {false, true}) {
    const std::string mode = ceil_mode ? " ceil" : " floor";
    auto [y, idx] = nn::F::max_pool3d_with_indices(ties, {3, 3, 2}, nn::F::Triple(2, 2, 2), {1, 1, 0}, 1, ceil_mode);
    auto [ty, tidx] = torch::max_pool3d_with_indices(to_torch(ties), {3, 3, 2}, {2, 2, 2}, {1, 1, 0}, {1, 1, 1},
                                                     ceil_mode);
    expect_same(y, ty, 0, "max_pool3d_with_indices" + mode);
    expect_same(idx, tidx, 0, "3-d indices" + mode);
  }
  // Boxes of -inf only, with padding before them: the first position inside the input.
  const Tensor lows = full({1, 1, 3, 4, 5}, -std::numeric_limits<double>::infinity(), kFloat64);
  expect_same(nn::F::max_pool3d_with_indices(lows, 3, 2, 1).second,
              std::get<1>(torch::max_pool3d_with_indices(to_torch(lows), {3, 3, 3}, {2, 2, 2}, {1, 1, 1})), 0,
              "3-d indices of -inf boxes");
  const Tensor x = test::randn64({2, 3, 5, 7, 6}, 98);
  auto [y, idx] = nn::F::max_pool3d_with_indices(x, 2, nn::F::Triple(2, 2, 2), 1);
  auto [ty, tidx] = torch::max_pool3d_with_indices(to_torch(x), {2, 2, 2}, {2, 2, 2}, {1, 1, 1});
  expect_same(idx, tidx, 0, "3-d indices, random values");
  Tensor yl = y.detach().requires_grad_();
  Tensor u = nn::F::max_unpool3d(yl, idx, 2, 2, 1, nn::F::Triple(5, 7, 6));
  const Tensor probe = test::randn64(u.sizes(), 99);
  (u * probe).sum().backward();
  torch::Tensor tyl = to_torch(y).requires_grad_();
  torch::Tensor tu = torch::max_unpool3d(tyl, tidx, {5, 7, 6}, {2, 2, 2}, {1, 1, 1});
  (tu * to_torch(probe)).sum().backward();
  expect_same(u, tu, 0, "max_unpool3d");
  expect_same(yl.grad(), tyl.grad(), 0, "max_unpool3d gradient");
}

// Adaptive max pooling over one, two and three dims, overlapping bins included: values, indices, gradients.
TEST(SpatialParity, AdaptiveMaxPoolMatchesLibTorch) {
  struct Case {
    Shape input, output;
  };
  const std::vector<Case> cases = {{{2, 3, 11}, {4}},       {{2, 3, 5}, {8}},          {{2, 3, 7, 9}, {3, 4}},
                                   {{1, 2, 64, 64}, {7, 7}}, {{2, 2, 4, 9}, {7, 2}},   {{1, 2, 5, 6, 7}, {2, 4, 3}}};
  uint64_t seed = 80;
  for (const Case& c : cases) {
    const std::string what = "adaptive_max_pool of " + shape_str(c.input) + " to " + shape_str(c.output);
    Tensor x = test::randn64(c.input, seed++).requires_grad_();
    const auto [y, idx] = nn::F::adaptive_max_pool_with_indices(x, c.output);
    const Tensor probe = test::randn64(y.sizes(), seed++);
    (y * probe).sum().backward();
    torch::Tensor tx = to_torch(x).requires_grad_();
    std::tuple<torch::Tensor, torch::Tensor> theirs;
    if (c.output.size() == 1) theirs = torch::adaptive_max_pool1d(tx, c.output);
    else if (c.output.size() == 2) theirs = torch::adaptive_max_pool2d(tx, c.output);
    else theirs = torch::adaptive_max_pool3d(tx, c.output);
    (std::get<0>(theirs) * to_torch(probe)).sum().backward();
    expect_same(y, std::get<0>(theirs), 0, what);
    expect_same(idx.to(kFloat64), std::get<1>(theirs), 0, what + ": indices");
    expect_same(x.grad(), tx.grad(), 1e-15, what + ": gradient");
  }
}

// Conv3d, ConvTranspose3d / 1d, padding="same" and the 3-d pools.
TEST(SpatialParity, VolumetricAndSamePaddingMatchLibTorch) {
  using nn::F::Triple;
  struct Conv {
    Shape x, w;
    Triple stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Conv> convs = {
      {{2, 3, 5, 6, 4}, {4, 3, 3, 2, 2}, 1, 0, 1, 1},
      {{1, 4, 6, 5, 7}, {6, 2, 3, 3, 3}, {2, 1, 2}, {1, 1, 0}, {1, 2, 1}, 2},
      {{1, 2, 8, 4, 4}, {3, 2, 2, 2, 3}, {3, 1, 1}, {2, 0, 1}, {3, 1, 1}, 1},
  };
  uint64_t seed = 300;
  for (const Conv& c : convs) {
    const std::string what = "conv3d of " + shape_str(c.x) + " by " + shape_str(c.w);
    expect_parity({test::randn64(c.x, seed), test::randn64(c.w, seed + 1), test::randn64({c.w[0]}, seed + 2)},
                  [&](const std::vector<Tensor>& t) {
                    return nn::F::conv3d(t[0], t[1], t[2], c.stride, c.padding, c.dilation, c.groups);
                  },
                  [&](const std::vector<torch::Tensor>& t) {
                    return torch::conv3d(t[0], t[1], t[2], {c.stride.d, c.stride.h, c.stride.w},
                                         {c.padding.d, c.padding.h, c.padding.w},
                                         {c.dilation.d, c.dilation.h, c.dilation.w}, c.groups);
                  },
                  1e-12, what, seed + 3);
    seed += 4;
  }
  // padding="same" with even kernels (the odd extra after), dilated, in 1, 2 and 3 dims.
  expect_parity({test::randn64({2, 3, 5, 6, 7}, seed), test::randn64({2, 3, 2, 4, 3}, seed + 1)},
                [](const std::vector<Tensor>& t) { return nn::F::conv3d(t[0], t[1], {}, 1, nn::F::same, {1, 1, 2}); },
                [](const std::vector<torch::Tensor>& t) {
                  return torch::conv3d(t[0], t[1], {}, 1, "same", {1, 1, 2});
                },
                1e-12, "conv3d same", seed + 2);
  expect_parity({test::randn64({2, 4, 6, 7}, seed + 3), test::randn64({4, 2, 4, 2}, seed + 4)},
                [](const std::vector<Tensor>& t) { return nn::F::conv2d(t[0], t[1], {}, 1, nn::F::same, {2, 3}, 2); },
                [](const std::vector<torch::Tensor>& t) {
                  return torch::conv2d(t[0], t[1], {}, 1, "same", {2, 3}, 2);
                },
                1e-12, "conv2d same", seed + 5);
  expect_parity({test::randn64({2, 3, 9}, seed + 6), test::randn64({5, 3, 4}, seed + 7), test::randn64({5}, seed + 8)},
                [](const std::vector<Tensor>& t) { return nn::F::conv1d(t[0], t[1], t[2], 1, nn::F::same); },
                [](const std::vector<torch::Tensor>& t) { return torch::conv1d(t[0], t[1], t[2], 1, "same"); },
                1e-12, "conv1d same", seed + 9);
  seed += 10;
  struct Transposed {
    Shape x, w;
    Triple stride, padding, output_padding, dilation;
    int64_t groups;
  };
  const std::vector<Transposed> ups = {
      {{2, 3, 3, 4, 3}, {3, 2, 2, 3, 2}, 1, 0, 0, 1, 1},
      {{1, 4, 3, 3, 4}, {4, 3, 3, 3, 2}, {2, 2, 1}, {1, 1, 0}, {1, 1, 0}, 1, 2},
      {{1, 2, 4, 3, 3}, {2, 2, 2, 2, 3}, {3, 1, 2}, {1, 0, 2}, {2, 0, 1}, {2, 1, 2}, 1},
  };
  for (const Transposed& c : ups) {
    const std::string what = "conv_transpose3d of " + shape_str(c.x) + " by " + shape_str(c.w);
    const Tensor b = test::randn64({c.w[1] * c.groups}, seed + 2);
    expect_parity({test::randn64(c.x, seed), test::randn64(c.w, seed + 1), b},
                  [&](const std::vector<Tensor>& t) {
                    return nn::F::conv_transpose3d(t[0], t[1], t[2], c.stride, c.padding, c.output_padding, c.groups,
                                                   c.dilation);
                  },
                  [&](const std::vector<torch::Tensor>& t) {
                    return torch::conv_transpose3d(t[0], t[1], t[2], {c.stride.d, c.stride.h, c.stride.w},
                                                   {c.padding.d, c.padding.h, c.padding.w},
                                                   {c.output_padding.d, c.output_padding.h, c.output_padding.w},
                                                   c.groups, {c.dilation.d, c.dilation.h, c.dilation.w});
                  },
                  1e-12, what, seed + 3);
    seed += 4;
  }
  expect_parity({test::randn64({2, 4, 7}, seed), test::randn64({4, 3, 3}, seed + 1), test::randn64({6}, seed + 2)},
                [](const std::vector<Tensor>& t) { return nn::F::conv_transpose1d(t[0], t[1], t[2], 3, 1, 2, 2, 2); },
                [](const std::vector<torch::Tensor>& t) {
                  return torch::conv_transpose1d(t[0], t[1], t[2], 3, 1, 2, 2, 2);
                },
                1e-12, "conv_transpose1d", seed + 3);
  seed += 4;
  struct Pool {
    Shape x;
    Triple k, s, p, d;
  };
  const std::vector<Pool> pools = {
      {{2, 3, 4, 6, 4}, 2, 2, 0, 1},
      {{1, 2, 6, 5, 7}, {3, 2, 3}, 2, {1, 0, 1}, 1},
      {{1, 2, 7, 6, 6}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {3, 2, 1}},
  };
  for (const Pool& c : pools)
    for (bool ceil_mode : {false, true}) {
      const std::string what = shape_str(c.x) + (ceil_mode ? " ceil" : " floor");
      const std::vector<int64_t> k{c.k.d, c.k.h, c.k.w}, s{c.s.d, c.s.h, c.s.w}, p{c.p.d, c.p.h, c.p.w},
          d{c.d.d, c.d.h, c.d.w};
      expect_parity({test::randn64(c.x, seed)},
                    [&](const std::vector<Tensor>& t) { return nn::F::max_pool3d(t[0], c.k, c.s, c.p, c.d, ceil_mode); },
                    [&](const std::vector<torch::Tensor>& t) { return torch::max_pool3d(t[0], k, s, p, d, ceil_mode); },
                    1e-14, "max_pool3d " + what, seed + 1);  // overlapping windows' gradients add in another order
      seed += 2;
      if (c.d.d != 1 || c.d.h != 1 || c.d.w != 1) continue;  // avg_pool3d has no dilation
      for (bool include : {true, false})
        for (std::optional<int64_t> divisor : {std::optional<int64_t>(), std::optional<int64_t>(7)}) {
          const std::string how = what + (include ? " include_pad" : " exclude_pad") + (divisor ? " divisor 7" : "");
          expect_parity({test::randn64(c.x, seed)},
                        [&](const std::vector<Tensor>& t) {
                          return nn::F::avg_pool3d(t[0], c.k, c.s, c.p, include, ceil_mode, divisor);
                        },
                        [&](const std::vector<torch::Tensor>& t) {
                          return torch::avg_pool3d(t[0], k, s, p, ceil_mode, include,
                                                   divisor ? c10::optional<int64_t>(*divisor) : c10::nullopt);
                        },
                        1e-14, "avg_pool3d " + how, seed + 1);
          seed += 2;
        }
    }
}

// Unfold and fold (overlapping blocks, dilation, padding, stride) and local_response_norm.
TEST(SpatialParity, FoldUnfoldAndLocalResponseNormMatchLibTorch) {
  namespace tf = torch::nn::functional;
  uint64_t seed = 400;
  struct Case {
    int64_t H, W;
    Pair k, d, p, s;
  };
  for (const Case& c : {Case{6, 7, {2, 3}, 1, 0, 1}, Case{7, 6, 3, {2, 1}, {1, 2}, {2, 1}}}) {
    const std::string what = std::to_string(c.H) + "x" + std::to_string(c.W);
    expect_parity({test::randn64({2, 3, c.H, c.W}, seed)},
                  [&](const std::vector<Tensor>& t) { return nn::F::unfold(t[0], c.k, c.d, c.p, c.s); },
                  [&](const std::vector<torch::Tensor>& t) {
                    return tf::unfold(t[0], tf::UnfoldFuncOptions({c.k.h, c.k.w})
                                                .dilation({c.d.h, c.d.w})
                                                .padding({c.p.h, c.p.w})
                                                .stride({c.s.h, c.s.w}));
                  },
                  1e-14, "unfold " + what, seed + 1);
    const Tensor blocks = nn::F::unfold(test::randn64({2, 3, c.H, c.W}, seed + 2), c.k, c.d, c.p, c.s);
    expect_parity({test::randn64(blocks.sizes(), seed + 3)},
                  [&](const std::vector<Tensor>& t) { return nn::F::fold(t[0], {c.H, c.W}, c.k, c.d, c.p, c.s); },
                  [&](const std::vector<torch::Tensor>& t) {
                    return tf::fold(t[0], tf::FoldFuncOptions({c.H, c.W}, {c.k.h, c.k.w})
                                              .dilation({c.d.h, c.d.w})
                                              .padding({c.p.h, c.p.w})
                                              .stride({c.s.h, c.s.w}));
                  },
                  1e-14, "fold " + what, seed + 4);
    seed += 5;
  }
  for (int64_t size : {2, 3, 5})
    expect_parity({test::randn64({2, 6, 4, 3}, seed + static_cast<uint64_t>(size))},
                  [&](const std::vector<Tensor>& t) { return nn::F::local_response_norm(t[0], size, 0.2, 0.6, 1.5); },
                  [&](const std::vector<torch::Tensor>& t) {
                    return tf::local_response_norm(t[0], tf::LocalResponseNormFuncOptions(size).alpha(0.2).beta(0.6).k(1.5));
                  },
                  1e-13, "local_response_norm size " + std::to_string(size), seed + 10);
}

// grid_sample in every mode, padding mode and corner convention, on a grid from affine_grid plus noise that
// reaches outside the image: outputs and the gradients of the image, the grid and theta.
// LibTorch's options for kiln's mode and padding (bilinear and nearest: its C++ options have no bicubic).
torch::nn::functional::GridSampleFuncOptions torch_grid_options(const std::string& mode, const std::string& padding,
                                                                bool align) {
  torch::nn::functional::GridSampleFuncOptions o;
  o.align_corners(align);
  if (mode == "nearest") o.mode(torch::kNearest);
  if (padding == "border") o.padding_mode(torch::kBorder);
  if (padding == "reflection") o.padding_mode(torch::kReflection);
  return o;
}

TEST(SpatialParity, GridSampleAndAffineGridMatchLibTorch) {
  namespace tf = torch::nn::functional;
  const Tensor x = test::randn64({2, 3, 5, 6}, 500), theta = test::randn64({2, 2, 3}, 501),
               noise = test::randn64({2, 4, 7, 2}, 502);
  for (bool align : {false, true})
    expect_parity({theta},
                  [&](const std::vector<Tensor>& t) { return nn::F::affine_grid(t[0], {2, 3, 4, 7}, align); },
                  [&](const std::vector<torch::Tensor>& t) { return tf::affine_grid(t[0], {2, 3, 4, 7}, align); },
                  1e-14, std::string("affine_grid") + (align ? " align_corners" : ""), 503);
  // Images and volumes (trilinear), each through an affine grid plus noise, in every mode and padding.
  struct Case {
    const char* name;
    Tensor input, theta, noise;
    std::vector<int64_t> size;
  };
  const std::vector<Case> cases = {
      {"", x, theta, noise, {2, 3, 4, 7}},
      {"3-d ", test::randn64({2, 2, 4, 5, 3}, 505), test::randn64({2, 3, 4}, 506),
       test::randn64({2, 3, 4, 2, 3}, 507) * 0.3, {2, 2, 3, 4, 2}}};
  for (const Case& c : cases)
    for (bool align : {false, true})
      for (const std::string mode : {"bilinear", "nearest"})
        for (const std::string padding : {"zeros", "border", "reflection"}) {
          const std::string what =
              std::string("grid_sample ") + c.name + mode + " " + padding + (align ? " align_corners" : "");
          const nn::F::GridSampleOptions o{.mode = mode, .padding_mode = padding, .align_corners = align};
          expect_parity({c.input, c.theta, c.noise},
                        [&](const std::vector<Tensor>& t) {
                          return nn::F::grid_sample(t[0], nn::F::affine_grid(t[1], c.size, align) + t[2], o);
                        },
                        [&](const std::vector<torch::Tensor>& t) {
                          return tf::grid_sample(t[0], tf::affine_grid(t[1], c.size, align) + t[2],
                                                 torch_grid_options(mode, padding, align));
                        },
                        1e-12, what, 504);
        }
  // An exact identity grid with align_corners (the edges at exactly -1 and 1): where border and reflection
  // padding clamp, the edges included, the grid's gradient is 0 along that dim.
  const Tensor identity_grid = nn::F::affine_grid(tensor(std::vector<double>{1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0},
                                                         {2, 2, 3}),
                                                  {2, 3, 5, 6}, true);
  for (const std::string padding : {"zeros", "border", "reflection"}) {
    const nn::F::GridSampleOptions o{.padding_mode = padding, .align_corners = true};
    expect_parity({x, identity_grid}, [&](const std::vector<Tensor>& t) { return nn::F::grid_sample(t[0], t[1], o); },
                  [&](const std::vector<torch::Tensor>& t) {
                    return tf::grid_sample(t[0], t[1], torch_grid_options("bilinear", padding, true));
                  },
                  1e-12, "grid_sample of an exact identity grid, " + padding, 510);
  }
  // Bicubic, images only: each of its 16 taps padded on its own. LibTorch's grid_sampler op takes the mode as
  // a number (2: bicubic), the padding too (0 zeros, 1 border, 2 reflection).
  for (bool align : {false, true})
    for (int64_t padding_code : {0, 1, 2}) {
      const std::string padding = padding_code == 0 ? "zeros" : padding_code == 1 ? "border" : "reflection";
      const std::string what = "grid_sample bicubic " + padding + (align ? " align_corners" : "");
      const nn::F::GridSampleOptions o{.mode = "bicubic", .padding_mode = padding, .align_corners = align};
      expect_parity({x, theta, noise},
                    [&](const std::vector<Tensor>& t) {
                      return nn::F::grid_sample(t[0], nn::F::affine_grid(t[1], {2, 3, 4, 7}, align) + t[2], o);
                    },
                    [&](const std::vector<torch::Tensor>& t) {
                      return torch::grid_sampler(t[0], tf::affine_grid(t[1], {2, 3, 4, 7}, align) + t[2], 2,
                                                 padding_code, align);
                    },
                    1e-12, what, 509);
    }
}

// The LP pools (values and gradients, ceil_mode too) and the channel shuffle; alpha dropout draws differ, so its
// three constants are read off each library's output: the value every dropped element takes, and the line
// a x + b through the kept ones.
TEST(SpatialParity, LPPoolChannelShuffleAndAlphaDropoutMatchLibTorch) {
  namespace tf = torch::nn::functional;
  struct Case {
    double p;
    int64_t k, s;
    bool ceil_mode;
  };
  uint64_t seed = 600;
  for (const Case& c : {Case{2, 3, 2, false}, Case{3, 4, 3, true}, Case{1.5, 2, 1, false}}) {
    const std::string what = "p " + std::to_string(c.p) + " k" + std::to_string(c.k) + (c.ceil_mode ? " ceil" : "");
    expect_parity({test::randn64({2, 3, 11}, seed)},
                  [&](const std::vector<Tensor>& t) { return nn::F::lp_pool1d(t[0].abs() + 0.1, c.p, c.k, c.s, c.ceil_mode); },
                  [&](const std::vector<torch::Tensor>& t) {
                    return tf::lp_pool1d(t[0].abs() + 0.1, tf::LPPool1dFuncOptions(c.p, c.k).stride(c.s).ceil_mode(c.ceil_mode));
                  },
                  1e-13, "lp_pool1d " + what, seed + 1);
    expect_parity({test::randn64({2, 3, 9, 10}, seed + 2)},
                  [&](const std::vector<Tensor>& t) {
                    return nn::F::lp_pool2d(t[0].abs() + 0.1, c.p, {c.k, c.k - 1}, Pair(c.s, c.s + 1), c.ceil_mode);
                  },
                  [&](const std::vector<torch::Tensor>& t) {
                    return tf::lp_pool2d(t[0].abs() + 0.1, tf::LPPool2dFuncOptions(c.p, {c.k, c.k - 1})
                                                               .stride({c.s, c.s + 1})
                                                               .ceil_mode(c.ceil_mode));
                  },
                  1e-13, "lp_pool2d " + what, seed + 3);
    seed += 4;
  }
  const Tensor x = test::randn64({2, 12, 3, 2}, seed);
  for (int64_t groups : {2, 3, 4, 6})
    expect_same(nn::F::channel_shuffle(x, groups), torch::channel_shuffle(to_torch(x), groups), 0,
                "channel_shuffle groups " + std::to_string(groups));
  // {dropped value, a, b} of one library's output.
  auto constants = [](const std::vector<double>& xs, const std::vector<double>& ys) {
    std::map<double, int> counts;
    for (double y : ys) ++counts[y];
    const double dropped = std::max_element(counts.begin(), counts.end(), [](const auto& l, const auto& r) {
                             return l.second < r.second;
                           })->first;
    std::vector<size_t> kept;
    for (size_t i = 0; i < ys.size() && kept.size() < 2; ++i)
      if (ys[i] != dropped && (kept.empty() || std::abs(xs[i] - xs[kept[0]]) > 0.5)) kept.push_back(i);
    const double a = (ys[kept[0]] - ys[kept[1]]) / (xs[kept[0]] - xs[kept[1]]);
    return std::array<double, 3>{dropped, a, ys[kept[0]] - a * xs[kept[0]]};
  };
  const Tensor noise = test::randn64({4000}, seed + 1);
  for (double p : {0.1, 0.5}) {
    const std::array<double, 3> ours =
        constants(kiln_values(noise), kiln_values(nn::F::alpha_dropout(noise, p, true)));
    const std::array<double, 3> theirs =
        constants(kiln_values(noise), torch_values(torch::alpha_dropout(to_torch(noise), p, true)));
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(ours[i], theirs[i], 1e-12) << "alpha_dropout p " << p << ", constant " << i;
  }
}
}  // namespace
}  // namespace kiln::parity
