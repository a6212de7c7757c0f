// interpolate's fused path (ops::resize_taps, one pass per spatial dim each way) against its composite of
// index_selects (CompositeOnlyGuard), which spatial_test.cpp holds to the definitions: the same bits forward in
// every interpolating mode, gradients within rounding, the same gradient bits on 1 and 3 threads, first and
// second derivatives by central differences, and the op's own errors.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/tensor/ops/resize_taps.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::randn64;
namespace F = nn::functional;

struct ResizeCase {
  Shape x;
  std::vector<int64_t> size;
  const char* mode;
};

const std::vector<ResizeCase> kResizeCases = {
    {{2, 3, 11}, {23}, "linear"},           {{2, 3, 11}, {4}, "linear"},
    {{2, 3, 7, 9}, {14, 18}, "bilinear"},   {{2, 3, 7, 9}, {5, 20}, "bilinear"},
    {{1, 2, 6, 5}, {13, 3}, "bicubic"},     {{1, 2, 6, 5}, {6, 5}, "bicubic"},
    {{1, 2, 3, 4, 5}, {6, 3, 9}, "trilinear"},
};

std::string resize_name(const ResizeCase& c, bool align, DType d) {
  return std::string(c.mode) + " " + shape_str(c.x) + " to " + shape_str(c.size) + (align ? " align_corners " : " ") +
         dtype_name(d);
}

// (output, gradient of the input) for the upstream gradient g, on the fused or the composite path.
std::pair<Tensor, Tensor> resize_run(const Tensor& x, const Tensor& g, const ResizeCase& c, bool align,
                                     bool composite) {
  std::optional<F::CompositeOnlyGuard> guard;
  if (composite) guard.emplace();
  const Tensor leaf = x.detach().requires_grad_();
  const Tensor y = F::interpolate(leaf, {.size = c.size, .mode = c.mode, .align_corners = align});
  // The last resize recorded is the fused op's node on the fused path only.
  EXPECT_EQ(std::string(y.grad_fn()->name()) == "InterpolateBackward", !composite) << y.grad_fn()->name();
  y.backward(g);
  return {y.detach(), leaf.grad()};
}

TEST(ResizeTaps, FusedGivesTheCompositesBitsForwardAndItsGradient) {
  int64_t seed = 900;
  for (const ResizeCase& c : kResizeCases) {
    for (bool align : {false, true}) {
      for (DType d : {kFloat64, kFloat32}) {
        const std::string what = resize_name(c, align, d);
        const Tensor x = randn64(c.x, seed++).to(d);
        Shape ys(c.x.begin(), c.x.begin() + 2);
        ys.insert(ys.end(), c.size.begin(), c.size.end());
        const Tensor g = randn64(ys, seed++).to(d);
        const auto [y, gx] = resize_run(x, g, c, align, false);
        const auto [y_ref, gx_ref] = resize_run(x, g, c, align, true);
        EXPECT_TRUE(y.equal(y_ref)) << what << ": the forward differs from the composite's";
        const double tol = d == kFloat64 ? 1e-12 : 2e-5;
        test::expect_tensor_near(gx, test::values(gx_ref), x.sizes(), tol, tol, what + " gradient");
      }
    }
  }
}

TEST(ResizeTaps, GradientBitsDoNotDependOnTheThreadCount) {
  const ResizeCase c{{4, 8, 33, 47}, {70, 21}, "bicubic"};
  const Tensor x = randn64(c.x, 930).to(kFloat32), g = randn64({4, 8, 70, 21}, 931).to(kFloat32);
  const int saved = get_num_threads();
  set_num_threads(1);
  const auto one = resize_run(x, g, c, false, false);
  set_num_threads(3);
  const auto three = resize_run(x, g, c, false, false);
  set_num_threads(saved);
  EXPECT_TRUE(one.first.equal(three.first));
  EXPECT_TRUE(one.second.equal(three.second));
}

// The backward records the adjoint, whose own backward is the resize: second derivatives by central
// differences, through the fused path.
TEST(ResizeTaps, FirstAndSecondDerivatives) {
  for (const ResizeCase& c : {ResizeCase{{1, 2, 4, 5}, {7, 3}, "bilinear"}, ResizeCase{{1, 1, 5, 4}, {3, 6}, "bicubic"},
                              ResizeCase{{2, 1, 6}, {9}, "linear"}}) {
    SCOPED_TRACE(resize_name(c, false, kFloat64));
    const Tensor x = randn64(c.x, 940).requires_grad_();
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) {
      return F::interpolate(t[0], {.size = c.size, .mode = c.mode});
    }, {x}).ok);
    Shape ys(c.x.begin(), c.x.begin() + 2);
    ys.insert(ys.end(), c.size.begin(), c.size.end());
    auto first_order = [&](const std::vector<Tensor>& in) {
      EnableGradGuard grad_on;
      std::vector<Tensor> t;
      for (const Tensor& v : in) t.push_back(v.requires_grad() ? v : v.detach().requires_grad_());
      const Tensor y = F::interpolate(t[0], {.size = c.size, .mode = c.mode});
      // y * y makes the first derivative depend on x, so that the second is not zero.
      return autograd::grad({y * y}, {t[0]}, {t[1]}, std::nullopt, /*create_graph=*/true);
    };
    EXPECT_TRUE(gradcheck(first_order, {randn64(c.x, 941).requires_grad_(), randn64(ys, 942).requires_grad_()}).ok);
  }
}

TEST(ResizeTaps, ErrorsNameTheProblem) {
  const Tensor x = randn64({2, 5}, 950);
  const Tensor idx = tensor(std::vector<int64_t>{0, 1, 1, 2, 4, 4}, {2, 3});
  const Tensor w = full({2, 3}, 0.5, TensorOptions(kFloat64));
  EXPECT_EQ(ops::resize_taps(x, 1, idx, w).sizes(), (Shape{2, 3}));
  expect_error([&] { (void)ops::resize_taps(x.to(kFloat16), 1, idx, w.to(kFloat16)); },
               {"resize_taps", "float32 or float64", "float16"});
  expect_error([&] { (void)ops::resize_taps(x, 1, idx, w.to(kFloat32)); }, {"resize_taps", "tap weights", "float32"});
  expect_error([&] { (void)ops::resize_taps(x, 1, idx.view({6}), w); }, {"resize_taps", "(taps, "});
  expect_error([&] { (void)ops::resize_taps(x, 1, idx + 1, w); }, {"resize_taps", "outside [0, 5)"});
  expect_error([&] { (void)ops::resize_taps(x, 2, idx, w); }, {"resize_taps", "dim"});
  expect_error([&] { (void)ops::resize_taps(full({}, 1.0, TensorOptions(kFloat64)), 0, idx, w); },
               {"resize_taps", "0-dim"});
  expect_error([&] { (void)ops::resize_taps_backward(randn64({2, 4}, 951), 1, idx, w, 5); },
               {"resize_taps backward", "(taps, 4)"});
}

}  // namespace
}  // namespace kiln
