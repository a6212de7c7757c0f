// gradcheck itself: it passes correct ops, and it catches a backward that is wrong in one element, naming
// that element. The wrong backwards are custom ops built with record(...), the way users write their own.
#include "grad_test_util.h"
#include "kiln/autograd/record.h"
#include "kiln/tensor/error.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using autograd::GradcheckResult;
using autograd::OpNode;
using autograd::TensorList;
using test::leaf;
using test::leaf_away;
using test::TensorVec;

using test::expect_error;

// x * y, both (2, 3), with a backward that is right for x and doubles the gradient of y's element (1, 0).
Tensor mul_wrong_for_y(const Tensor& x, const Tensor& y) {
  Tensor out = ops::mul(x, y);
  if (autograd::should_record(x, y))
    autograd::record("mul_wrong_for_y", out, {x, y}, [x, y](const Tensor& g, const OpNode&) {
      Tensor scale = ones({2, 3}, kFloat64);
      scale.data_ptr<double>()[3] = 2.0;  // element (1, 0)
      return TensorList{g * y, g * x * scale};
    });
  return out;
}

// x * (1 + rel_error): a backward off by a relative `rel_error` everywhere.
Tensor slightly_off(const Tensor& x, double rel_error) {
  Tensor out = ops::clone(x);
  if (autograd::should_record(x))
    autograd::record("slightly_off", out, {x},
                     [rel_error](const Tensor& g, const OpNode&) { return TensorList{g * (1.0 + rel_error)}; });
  return out;
}

TEST(Gradcheck, PassesOnCorrectOps) {
  Tensor a = leaf({2, 3}), b = leaf({2, 3});
  GradcheckResult r = gradcheck([](const TensorVec& in) { return in[0] * in[1] + exp(in[0]); }, {a, b});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_EQ(r.entries, 2 * 6 * 6);
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_NE(r.report.find("ok"), std::string::npos) << r.report;
  // Gradcheck leaves the inputs as they were and does not touch .grad.
  Tensor before = ops::clone(a);
  (void)gradcheck([](const TensorVec& in) { return tanh(in[0]); }, {a});
  EXPECT_TRUE(ops::all(ops::eq(a, before)).item<bool>());
  EXPECT_FALSE(a.grad().defined());
}

TEST(Gradcheck, NamesTheWrongElement) {
  Tensor x = leaf_away({2, 3}), y = leaf_away({2, 3});
  auto fn = [](const TensorVec& in) { return mul_wrong_for_y(in[0], in[1]); };
  GradcheckResult r = gradcheck(fn, {x, y}, {.raise = false});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.entries, 2 * 6 * 6);
  EXPECT_EQ(r.input, 1u);
  EXPECT_EQ(r.input_index, (Shape{1, 0}));
  EXPECT_EQ(r.output, 0u);
  EXPECT_EQ(r.output_index, (Shape{1, 0}));
  double x10 = x.index({1, 0}).item<double>();
  EXPECT_NEAR(r.analytic, 2 * x10, 1e-12);
  EXPECT_NEAR(r.numeric, x10, 1e-6);
  EXPECT_NEAR(r.abs_err, std::fabs(x10), 1e-6);
  for (const char* part : {"1 of 72 entries", "d(output 0 element (1, 0)) / d(input 1 element (1, 0))", "analytic",
                           "numeric", "abs err", "rel err"})
    EXPECT_NE(r.report.find(part), std::string::npos) << "report lacks \"" << part << "\":\n" << r.report;
  // raise (the default) throws the same report.
  expect_error([&] { gradcheck(fn, {x, y}); }, {"input 1 element (1, 0)", "output 0 element (1, 0)"});
}

TEST(Gradcheck, IndexesThroughViewsInTheInputsLayout) {
  // y is x.t(): y's wrong element (1, 0) is x's element (0, 1).
  Tensor a = leaf_away({2, 3}), x = leaf_away({3, 2});
  GradcheckResult r = gradcheck([](const TensorVec& in) { return mul_wrong_for_y(in[0], in[1].t()); }, {a, x},
                                {.raise = false});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.input, 1u);
  EXPECT_EQ(r.input_index, (Shape{0, 1}));
  EXPECT_EQ(r.output_index, (Shape{1, 0}));
}

TEST(Gradcheck, NamesTheWrongOutput) {
  Tensor x = leaf_away({2, 3}), y = leaf_away({2, 3});
  GradcheckResult r = gradcheck(
      [](const TensorVec& in) { return TensorVec{in[0] * 2.0, mul_wrong_for_y(in[0], in[1])}; }, {x, y},
      {.raise = false});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.output, 1u);
  EXPECT_EQ(r.input, 1u);
  EXPECT_EQ(r.input_index, (Shape{1, 0}));
}

TEST(Gradcheck, UsesTheTolerances) {
  Tensor x = leaf_away({4});
  auto fn = [](const TensorVec& in) { return slightly_off(in[0], 1e-4); };
  EXPECT_TRUE(gradcheck(fn, {x}).ok);  // 1e-4 relative is inside rtol 1e-3
  GradcheckResult strict = gradcheck(fn, {x}, {.atol = 1e-9, .rtol = 1e-6, .raise = false});
  EXPECT_FALSE(strict.ok);
  EXPECT_EQ(strict.mismatches, 4);
}

TEST(Gradcheck, ZeroDimAndUnusedAndIndexOutputs) {
  Tensor s = leaf({}), unused = leaf({3}), m = leaf({3, 4});
  GradcheckResult r = gradcheck([](const TensorVec& in) { return in[0] * in[0]; }, {s, unused});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_EQ(r.entries, 1 + 3);
  // The int64 indices of max are not checked; the values are.
  r = gradcheck([](const TensorVec& in) {
    auto [values, indices] = max(in[0], 1);
    return TensorVec{values, indices};
  }, {m});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_EQ(r.entries, 12 * 3);
}

TEST(Gradcheck, DetachedOutputFailsWithAHint) {
  Tensor x = leaf_away({3});
  GradcheckResult r = gradcheck([](const TensorVec& in) { return in[0].detach() * 2.0; }, {x}, {.raise = false});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.mismatches, 3);
  EXPECT_NE(r.report.find("no grad_fn"), std::string::npos) << r.report;
}

TEST(Gradcheck, RejectsBadInputsAndOutputs) {
  Tensor x = leaf({3});
  Tensor f32 = ops::to(leaf({2}).detach(), kFloat32);
  f32.requires_grad_();
  expect_error([&] { gradcheck([](const TensorVec& in) { return in[0].sum() + in[1].sum(); }, {x, f32}); },
               {"gradcheck", "input 1", "float32", "float64"});
  expect_error([&] { gradcheck([](const TensorVec& in) { return in[0] * 2.0; }, {x.detach()}); },
               {"gradcheck", "requires grad"});
  expect_error([&] { gradcheck([](const TensorVec& in) { return in[0].to(kFloat32); }, {x}); },
               {"gradcheck", "output 0", "float32"});
  // A non-leaf input written in place: allowed by autograd, but the numerical Jacobian would be wrong.
  Tensor nonleaf = x * 1.0;
  expect_error([&] { gradcheck([](const TensorVec& in) { return in[0].mul_(2.0) * 1.0; }, {nonleaf}); },
               {"gradcheck", "input 0", "in place"});
}

}  // namespace
}  // namespace kiln
