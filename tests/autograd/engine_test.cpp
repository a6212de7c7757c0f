// The engine and the graph: what backward computes and when, checked against gradients worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kiln/kiln.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::DetectAnomalyGuard;
using test::expect_error;

Tensor leaf_with(std::initializer_list<double> values) {
  Tensor t = tensor(values, kFloat64);
  t.requires_grad_();
  return t;
}

std::vector<double> grad_of(const Tensor& t) {
  EXPECT_TRUE(t.grad().defined());
  return t.grad().to_vector<double>();
}

TEST(Engine, ScalarChain) {
  // y = sum(exp(2x)); dy/dx = 2 exp(2x)
  Tensor x = leaf_with({0.5, -1.0, 2.0});
  Tensor y = exp(x * 2).sum();
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  y.backward();
  auto g = grad_of(x);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(g[i], 2 * std::exp(2 * x.to_vector<double>()[i]), 1e-12);
}

TEST(Engine, DiamondRunsEachNodeOnceAfterItsConsumers) {
  // a = x^2 feeds both b = 3a and c = a^2; y = b + c. dy/dx = (3 + 2a) * 2x.
  Tensor x = leaf_with({1.5, -2.0});
  Tensor a = x * x;
  int a_runs = 0;
  a.register_hook([&](const Tensor& g) {
    ++a_runs;  // a's gradient arrives once, already summed over both paths
    EXPECT_NEAR(g.to_vector<double>()[0], 3 + 2 * 2.25, 1e-12);
    return Tensor();
  });
  Tensor y = (a * 3 + a * a).sum();
  y.backward();
  EXPECT_EQ(a_runs, 1);
  auto g = grad_of(x);
  EXPECT_NEAR(g[0], (3 + 2 * 2.25) * 3.0, 1e-12);
  EXPECT_NEAR(g[1], (3 + 2 * 4.0) * -4.0, 1e-12);
}

TEST(Engine, TensorUsedManyTimes) {
  // y = x + x + ... (10 times) + x * x: dy/dx = 10 + 2x
  Tensor x = leaf_with({3.0});
  Tensor y = x * x;
  for (int i = 0; i < 10; ++i) y = y + x;
  y.backward();
  EXPECT_NEAR(grad_of(x)[0], 10 + 6.0, 1e-12);
}

TEST(Engine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf_with({1.0, 2.0});
  (x * 3).sum().backward();
  (x * x).sum().backward();
  auto g = grad_of(x);
  EXPECT_NEAR(g[0], 3 + 2.0, 1e-12);
  EXPECT_NEAR(g[1], 3 + 4.0, 1e-12);
  x.set_grad(Tensor());
  (x * 5).sum().backward();
  EXPECT_NEAR(grad_of(x)[0], 5.0, 1e-12);
}

TEST(Engine, GradIsNotAViewOfSomethingElse) {
  // The seed gradient the user passes must not become .grad itself: a later accumulation would write into it.
  Tensor x = leaf_with({1.0, 2.0});
  Tensor seed = tensor({1.0, 1.0}, kFloat64);
  x.alias().backward(seed);  // alias's gradient is the seed as is
  (x * 1).sum().backward();
  EXPECT_EQ(seed.to_vector<double>(), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{2.0, 2.0}));
}

TEST(Engine, NonScalarBackwardNeedsAGradient) {
  Tensor x = leaf_with({1.0, 2.0});
  Tensor y = x * 2;
  expect_error([&] { y.backward(); }, {"backward", "only a one-element output"});
  expect_error([&] { y.backward(tensor({1.0}, kFloat64)); }, {"backward", "(1)", "(2)"});
  y.backward(tensor({1.0, 10.0}, kFloat64));
  EXPECT_EQ(grad_of(x), (std::vector<double>{2.0, 20.0}));
}

TEST(Engine, SecondBackwardThroughAFreedGraphIsAClearError) {
  Tensor x = leaf_with({1.0, 2.0});
  Tensor y = exp(x).sum();
  y.backward();
  expect_error([&] { y.backward(); }, {"second time", "retain_graph=true"});

  Tensor z = exp(x).sum();
  z.backward({}, /*retain_graph=*/true);
  z.backward();
  EXPECT_NEAR(grad_of(x)[0], std::exp(1.0) * 3, 1e-12);  // once from y, twice from z
}

TEST(Engine, SavedTensorsAreFreedAfterBackward) {
  Tensor x = leaf_with({1.0, 2.0});
  std::weak_ptr<StorageImpl> saved;
  {
    Tensor e = exp(x);  // exp saves its output
    saved = e.storage();
    Tensor y = e.sum();
    e = Tensor();
    EXPECT_FALSE(saved.expired());  // the graph keeps it
    y.backward();
    EXPECT_TRUE(saved.expired());   // backward freed it, while y is still alive
  }
}

TEST(Engine, GraphsFreeThemselvesWithTheirOutputs) {
  Tensor x = leaf_with({1.0});
  std::weak_ptr<autograd::Node> node;
  {
    Tensor y = x;
    for (int i = 0; i < 200000; ++i) y = y * 1.0;  // deep: freeing must not recurse once per node
    node = y.grad_fn();
  }
  EXPECT_TRUE(node.expired());
}

TEST(Engine, GradReturnsGradientsAndLeavesDotGradAlone) {
  Tensor x = leaf_with({1.0, 2.0});
  Tensor w = leaf_with({3.0, 4.0});
  Tensor h = x * w;  // a non-leaf input
  Tensor y = (h * h).sum();
  auto g = autograd::grad({y}, {x, h});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{2 * 3.0 * 3.0, 2 * 8.0 * 4.0}));
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{6.0, 16.0}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());

  Tensor unused = leaf_with({1.0});
  Tensor y2 = (x * 2).sum();
  expect_error([&] { autograd::grad({y2}, {unused}, {}, true); }, {"grad", "not used", "allow_unused"});
  auto g2 = autograd::grad({y2}, {unused, x}, {}, std::nullopt, false, /*allow_unused=*/true);
  EXPECT_FALSE(g2[0].defined());
  EXPECT_EQ(g2[1].to_vector<double>(), (std::vector<double>{2.0, 2.0}));
}

TEST(Engine, CreateGraphGivesSecondDerivatives) {
  // y = x^3: dy/dx = 3x^2, d2y/dx2 = 6x
  Tensor x = leaf_with({2.0});
  Tensor y = x * x * x;
  Tensor dx = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  EXPECT_NEAR(dx.item<double>(), 12.0, 1e-12);
  EXPECT_TRUE(dx.requires_grad());
  Tensor d2x = autograd::grad({dx}, {x})[0];
  EXPECT_NEAR(d2x.item<double>(), 12.0, 1e-12);
  // Through saved outputs too: y = exp(2x), y'' = 4 exp(2x)
  Tensor e = exp(x * 2);
  Tensor de = autograd::grad({e}, {x}, {}, std::nullopt, true)[0];
  EXPECT_NEAR(autograd::grad({de}, {x})[0].item<double>(), 4 * std::exp(4.0), 1e-9);
}

TEST(GradMode, NoGradRecordsNothing) {
  Tensor x = leaf_with({1.0});
  Tensor y;
  {
    NoGradGuard g;
    y = x * 2;
    {
      EnableGradGuard e;
      EXPECT_TRUE((x * 2).requires_grad());
    }
    EXPECT_FALSE((x * 2).requires_grad());
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  expect_error([&] { y.backward(); }, {"backward", "does not require grad", "NoGradGuard"});
  {
    InferenceMode im;
    Tensor z = exp(x);
    EXPECT_FALSE(z.requires_grad());
    EXPECT_EQ(z.impl()->autograd_meta, nullptr);  // no autograd state at all
  }
  EXPECT_TRUE((x * 2).requires_grad());
}

TEST(GradMode, DetachAndRequiresGrad) {
  Tensor x = leaf_with({1.0, 2.0});
  Tensor y = x * 2;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage_with(y));
  expect_error([&] { y.requires_grad_(); }, {"requires_grad_", "only leaves", "mul"});
  expect_error([&] { arange(3).requires_grad_(); }, {"requires_grad_", "floating-point", "int64"});
  y.detach_();
  EXPECT_TRUE(y.is_leaf());
  EXPECT_FALSE(y.requires_grad());
}

TEST(Hooks, RunInOrderAndCanReplaceTheGradient) {
  Tensor x = leaf_with({1.0, 2.0});
  std::vector<std::string> order;
  x.register_hook([&](const Tensor& g) {
    order.push_back("first");
    return g * 10;
  });
  unsigned removed = x.register_hook([&](const Tensor& g) {
    order.push_back("removed");
    return Tensor();
  });
  x.register_hook([&](const Tensor& g) {
    order.push_back("second");
    EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{30.0, 30.0}));  // sees the first hook's result
    return Tensor();
  });
  x.remove_hook(removed);
  x.register_post_accumulate_grad_hook([&](const Tensor& t) {
    order.push_back("post");
    EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{30.0, 30.0}));  // already accumulated
  });
  (x * 3).sum().backward();
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second", "post"}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{30.0, 30.0}));
}

TEST(Hooks, NonLeafHookAndRetainGrad) {
  Tensor x = leaf_with({1.0, 2.0});
  Tensor h = x * 2;
  h.retain_grad();
  h.register_hook([](const Tensor& g) { return g * 2; });  // doubles what flows on to x
  (h * h).sum().backward();
  // dL/dh = 2h = (4, 8), doubled by the hook; retain_grad keeps the gradient the graph used (runs last).
  EXPECT_EQ(h.grad().to_vector<double>(), (std::vector<double>{8.0, 16.0}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{16.0, 32.0}));
  EXPECT_TRUE(h.retains_grad());
}

TEST(Hooks, PostAccumulateHooksRunWhileBackwardStillRuns) {
  // Leaves get their gradient as soon as it is complete: w1 (used last in forward) is done before the
  // nodes that lead to w0 run. DDP starts all-reducing w1's bucket from this hook.
  Tensor w0 = leaf_with({1.0}), w1 = leaf_with({2.0});
  Tensor h = exp(w0 * 3);
  std::vector<std::string> events;
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w1 ready"); });
  w0.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w0 ready"); });
  h.register_hook([&](const Tensor&) {
    events.push_back("exp backward");
    return Tensor();
  });
  (h * w1).sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"w1 ready", "exp backward", "w0 ready"}));
}

TEST(InPlace, ModifiedSavedTensorNamesBothOps) {
  Tensor x = leaf_with({1.0, 2.0});
  Tensor h = x * 1;
  Tensor y = exp(h);  // saves its output y
  y.mul_(2);          // ... which is then changed
  expect_error([&] { y.sum().backward(); }, {"exp", "modified in place", "mul_", "version"});

  Tensor a = x * 1;
  Tensor b = a * a;  // saves a
  a.add_(1);
  expect_error([&] { b.sum().backward(); }, {"mul", "modified in place", "add_"});
}

TEST(InPlace, LeafAndViewRules) {
  Tensor x = leaf_with({1.0, 2.0});
  expect_error([&] { x.mul_(2); }, {"mul_", "leaf", "NoGradGuard"});
  {
    NoGradGuard g;
    x.mul_(2);  // as an optimizer step does
  }
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{2.0, 4.0}));
  // A view of a leaf that requires grad cannot be written either; views of other tensors can
  // (tests/autograd/inplace_view_test.cpp).
  expect_error([&] { x.narrow(0, 0, 1).mul_(2); }, {"mul_", "view", "leaf"});
}

// split, chunk and unbind: every piece is an output of one node, whose backward joins the pieces' gradients once
// (a node per piece gave back a zero tensor of the input's whole shape per piece). The pieces stay views.
TEST(Pieces, AreOutputsOfOneNodeAndStayViews) {
  Tensor x = leaf_with({1, 2, 3, 4, 5, 6}).view({3, 2}) * 1;
  for (const auto& [op, pieces] : std::vector<std::pair<std::string, std::vector<Tensor>>>{
           {"unbind", unbind(x, 0)}, {"chunk", chunk(x, 3, 0)}, {"split", split(x, 1, 0)}}) {
    ASSERT_EQ(pieces.size(), 3u) << op;
    for (const Tensor& p : pieces) {
      EXPECT_EQ(p.grad_fn(), pieces[0].grad_fn()) << op;
      EXPECT_EQ(op, p.grad_fn()->name());
    }
  }
  // Written through, a piece changes the tensor it views, and its gradient with it.
  Tensor w = leaf_with({1, 2, 3, 4, 5, 6});
  Tensor y = w.view({3, 2}) * 1;
  std::vector<Tensor> parts = chunk(y, 3, 0);
  parts[1].mul_(10);
  y.sum().backward();
  EXPECT_EQ(grad_of(w), (std::vector<double>{1, 1, 10, 10, 1, 1}));
  // Two of three rows used: the unused one's gradient is zero.
  Tensor leaf = leaf_with({1, 2, 3, 4, 5, 6});
  const std::vector<Tensor> rows = unbind(leaf.view({3, 2}), 0);
  (rows[0] * 2 + rows[2] * 3).sum().backward();
  EXPECT_EQ(grad_of(leaf), (std::vector<double>{2, 2, 0, 0, 3, 3}));
}

TEST(InPlace, GradientsFlowThroughInPlaceOps) {
  // y = relu_(x * w + 1) summed; in-place ops on non-leaves keep the graph right.
  Tensor x = leaf_with({-2.0, 3.0});
  Tensor w = leaf_with({1.0, 2.0});
  Tensor h = x * w;
  h.add_(1);    // (-1, 7)
  relu_(h);     // (0, 7)
  h.mul_(w);    // (0, 14)
  h.sum().backward();
  // d/dx = relu'(xw+1) w^2 = (0, 4); d/dw = relu'(.) (x w + (xw+1)) = (0, 6 + 7)
  EXPECT_EQ(grad_of(x), (std::vector<double>{0.0, 4.0}));
  EXPECT_EQ(grad_of(w), (std::vector<double>{0.0, 13.0}));

  Tensor buf = zeros({2}, kFloat64);
  buf.copy_(x * 3);  // a plain tensor takes the history of what is copied into it
  buf.sum().backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{3.0, 7.0}));
}

struct ScaledTanh : autograd::Function<ScaledTanh> {
  static constexpr const char* name = "ScaledTanh";
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, double scale) {
    Tensor y = tanh(x * scale);
    EXPECT_FALSE(y.requires_grad());  // forward runs with grad off
    ctx->save_for_backward({y});
    ctx->saved_data["scale"] = scale;
    return y;
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    Tensor y = ctx->get_saved_variables()[0];
    double scale = std::any_cast<double>(ctx->saved_data["scale"]);
    return {grads[0] * (1 - y * y) * scale, Tensor()};  // one per forward argument
  }
};

TEST(CustomFunction, JoinsTheGraphLikeABuiltInOp) {
  Tensor x = leaf_with({0.3, -0.7});
  Tensor y = ScaledTanh::apply(x * 1, 2.0);
  EXPECT_STREQ(y.grad_fn()->name(), "ScaledTanh");
  (y * y).sum().backward();
  auto xs = x.to_vector<double>();
  for (int i = 0; i < 2; ++i) {
    double t = std::tanh(2 * xs[i]);
    EXPECT_NEAR(grad_of(x)[i], 2 * t * (1 - t * t) * 2, 1e-12);
  }
  // A saved output changed in place is caught here too.
  Tensor z = ScaledTanh::apply(x, 1.0);
  Tensor z2 = z * 1;
  z.detach().mul_(2);
  expect_error([&] { z.sum().backward(); }, {"ScaledTanh", "modified in place", "mul_"});
}

struct WrongBackwardCount : autograd::Function<WrongBackwardCount> {
  static Tensor forward(autograd::AutogradContext*, const Tensor& a, const Tensor& b) { return a + b; }
  static std::vector<Tensor> backward(autograd::AutogradContext*, std::vector<Tensor> g) { return {g[0]}; }
};

TEST(CustomFunction, WrongNumberOfGradientsIsAClearError) {
  Tensor a = leaf_with({1.0}), b = leaf_with({2.0});
  expect_error([&] { WrongBackwardCount::apply(a, b).backward(); }, {"backward returned 1", "expected 2"});
}

TEST(Anomaly, NamesTheOpAndWhereItWasCreated) {
  Tensor x = leaf_with({0.0, 1.0});
  DetectAnomalyGuard anomaly;
  Tensor y;
  {
    autograd::ForwardScope scope("model.layer1");
    y = sqrt(x).sum();  // d sqrt(x)/dx at 0 is inf
  }
  try {
    y.backward();
    FAIL() << "expected an anomaly error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("sqrt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Inf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("created in forward at"), std::string::npos) << msg;
    EXPECT_NE(msg.find("in forward scope: model.layer1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("kiln::sqrt("), std::string::npos) << msg;  // the forward call, from the native stack
  }
}

TEST(Dot, ShowsOpsShapesAndLeaves) {
  Tensor x = leaf_with({1.0, 2.0});
  Tensor w = tensor({3.0, 4.0}, kFloat64).requires_grad_();
  Tensor y = (exp(x) * w).sum();
  std::string dot = autograd::to_dot(y);
  for (const char* s : {"digraph", "sum", "mul", "exp", "leaf", "(2) float64", "output", "->"})
    EXPECT_NE(dot.find(s), std::string::npos) << s << " not in\n" << dot;
  EXPECT_EQ(std::count(dot.begin(), dot.end(), '>'), 5);  // exp->mul, leaf->exp, leaf->mul, mul->sum, sum->out
}

TEST(Broadcasting, GradientsAreSummedBackToInputShapes) {
  Tensor a = zeros({3, 1}, kFloat64).requires_grad_();
  Tensor b = zeros({4}, kFloat64).requires_grad_();
  Tensor s = tensor({2.0}, kFloat64).requires_grad_();
  ((a + b) * s).sum().backward();
  EXPECT_EQ(a.grad().sizes(), (Shape{3, 1}));
  EXPECT_EQ(grad_of(a), (std::vector<double>{8.0, 8.0, 8.0}));
  EXPECT_EQ(grad_of(b), (std::vector<double>{6.0, 6.0, 6.0, 6.0}));
  EXPECT_EQ(grad_of(s), (std::vector<double>{0.0}));
}

TEST(Dtypes, GradientsTakeTheirInputsDtype) {
  Tensor a = ones({2}, kFloat32).requires_grad_();
  Tensor b = ones({2}, kFloat64).requires_grad_();
  (a * b).sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat64);
}

}  // namespace
}  // namespace kiln
