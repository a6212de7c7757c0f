// kiln's transposed convolution and interpolate (nearest, bilinear, align_corners) against LibTorch's on the
// same float64 weights and inputs: outputs, and the gradients of the input, weight and bias.
#include <gtest/gtest.h>
#include <torch/torch.h>

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

}  // namespace
}  // namespace kiln::parity
