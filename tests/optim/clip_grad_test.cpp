// clip_grad_norm_ and clip_grad_value_ against values worked out by hand.
#include <cmath>
#include <limits>

#include "optim/optim_test_util.h"

namespace kiln::test {
namespace {

// Grads (3, 4) and (12): the 2-norm over both is 13, the 1-norm 19, the inf-norm 12.
std::vector<Tensor> params_with_grads() {
  Tensor a = make_param({0, 0}, {2}), b = make_param({0}, {1}), c = make_param({0}, {1});
  a.set_grad(tensor({3.0, -4.0}, kFloat64));
  b.set_grad(tensor({12.0}, kFloat64));
  return {a, b, c};  // c has no grad: skipped
}

TEST(ClipGradNorm, ScalesWhenAboveMaxNorm) {
  auto ps = params_with_grads();
  double total = optim::clip_grad_norm_(ps, 6.5);
  EXPECT_DOUBLE_EQ(total, 13.0);
  double coef = 6.5 / (13.0 + 1e-6);
  expect_tensor_near(ps[0].grad(), {3 * coef, -4 * coef}, {2});
  expect_tensor_near(ps[1].grad(), {12 * coef}, {1});
  EXPECT_FALSE(ps[2].grad().defined());
}

TEST(ClipGradNorm, LeavesGradsBelowMaxNorm) {
  auto ps = params_with_grads();
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_(ps, 100.0), 13.0);
  EXPECT_EQ(values(ps[0].grad()), (std::vector<double>{3, -4}));
  EXPECT_EQ(values(ps[1].grad()), (std::vector<double>{12}));
}

TEST(ClipGradNorm, OtherNormTypes) {
  auto ps = params_with_grads();
  EXPECT_NEAR(optim::clip_grad_norm_(ps, 1e9, 1.0), 19.0, 1e-12);
  EXPECT_NEAR(optim::clip_grad_norm_(ps, 1e9, 3.0), std::cbrt(27.0 + 64 + 1728), 1e-10);
  double total = optim::clip_grad_norm_(ps, 6.0, std::numeric_limits<double>::infinity());
  EXPECT_EQ(total, 12.0);
  expect_tensor_near(ps[1].grad(), {12 * 6.0 / (12.0 + 1e-6)}, {1});
}

TEST(ClipGradNorm, NoGradsAndBadArguments) {
  Tensor p = make_param({1, 2}, {2});
  EXPECT_EQ(optim::clip_grad_norm_({p}, 1.0), 0.0);
  auto ps = params_with_grads();
  expect_error([&] { optim::clip_grad_norm_(ps, 1.0, 0.0); }, {"clip_grad_norm_", "norm_type", "0"});
  expect_error([&] { optim::clip_grad_norm_(ps, -1.0); }, {"clip_grad_norm_", "max_norm", "-1"});
}

TEST(ClipGradNorm, NonFiniteNorms) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  {
    auto ps = params_with_grads();
    ps[0].set_grad(tensor({nan, 1.0}, kFloat64));
    expect_error([&] { optim::clip_grad_norm_(ps, 1.0, 2.0, true); },
                 {"clip_grad_norm_", "nan", "error_if_nonfinite"});
    EXPECT_TRUE(std::isnan(optim::clip_grad_norm_(ps, 1.0)));  // without the flag: every grad becomes NaN
    EXPECT_TRUE(std::isnan(values(ps[1].grad())[0]));
  }
  {
    auto ps = params_with_grads();
    ps[0].set_grad(tensor({inf, 1.0}, kFloat64));
    expect_error([&] { optim::clip_grad_norm_(ps, 1.0, 2.0, true); }, {"clip_grad_norm_", "inf"});
    EXPECT_EQ(optim::clip_grad_norm_(ps, 1.0), inf);  // coefficient 0: finite grads become 0, Inf ones NaN
    EXPECT_EQ(values(ps[1].grad())[0], 0.0);
    EXPECT_TRUE(std::isnan(values(ps[0].grad())[0]));
  }
  {
    auto ps = params_with_grads();
    ps[1].set_grad(tensor({nan}, kFloat64));
    EXPECT_TRUE(std::isnan(optim::clip_grad_norm_(ps, 1.0, inf)));  // max() must not drop the NaN
  }
}

TEST(ClipGradValue, Clamps) {
  auto ps = params_with_grads();
  optim::clip_grad_value_(ps, 3.5);
  EXPECT_EQ(values(ps[0].grad()), (std::vector<double>{3, -3.5}));
  EXPECT_EQ(values(ps[1].grad()), (std::vector<double>{3.5}));
  EXPECT_FALSE(ps[2].grad().defined());
  expect_error([&] { optim::clip_grad_value_(ps, -1.0); }, {"clip_grad_value_", "-1"});
}

}  // namespace
}  // namespace kiln::test
