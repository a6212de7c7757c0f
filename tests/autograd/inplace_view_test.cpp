// In-place ops through views while recording: writing into a view changes the tensor it views, and the
// gradients must see it. Each case is a function of float64 inputs checked by gradcheck against central
// differences (which know nothing of views or histories), plus hand-worked gradients for the simplest ones:
// a write into a slice of a buffer that needs no grad, writes through rows, columns and views of views, a view
// read after its base was changed through another view or in place itself (stale histories), second
// derivatives through a write (against their formulas), a saved view rebuilt later, the errors, leaves made of
// views, and one stale view used from several threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "kiln/kiln.h"
#include "tensor/test_util.h"

namespace kiln {
namespace inplace_view_tests {  // named: this target is built as one unit, beside files with helpers of their own

Tensor leaf64(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randn(shape, kFloat64, &gen);
  t.requires_grad_(true);
  return t;
}

std::vector<double> values_of(const Tensor& t) { return t.contiguous().to_vector<double>(); }

void expect_gradcheck(const autograd::GradcheckSingleFn& fn, const std::vector<Tensor>& inputs, const std::string& what) {
  const autograd::GradcheckResult r = autograd::gradcheck(fn, inputs, {.raise = false});
  EXPECT_TRUE(r.ok) << what << ": " << r.report;
  EXPECT_GT(r.entries, 0) << what;
}

// A buffer that needs no grad, written through slices: it joins the graph, and only the written elements
// send gradients back.
TEST(InPlaceView, CopyIntoASliceOfAPlainBuffer) {
  Tensor x = leaf64({2, 3}, 1);
  Tensor buf = zeros({4, 3}, kFloat64);
  buf.narrow(0, 1, 2).copy_(x);
  EXPECT_TRUE(buf.requires_grad());
  Tensor weights = arange(12, kFloat64).view({4, 3});
  (buf * weights).sum().backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{3, 4, 5, 6, 7, 8}));  // rows 1 and 2 of the weights

  expect_gradcheck([](const std::vector<Tensor>& in) {
    Tensor out = zeros({4, 3}, kFloat64);
    out.narrow(0, 1, 2).copy_(in[0]);
    out.select(1, 2).mul_(in[1]);  // a column scaled by a vector: the rows 1 and 2 copied above included
    return (out * out).sum();
  }, {leaf64({2, 3}, 2), leaf64({4}, 3)}, "copy into rows, then a column scaled");
}

// Writes through views of a tensor in the graph: rows, a column, a view of a view, a transposed view, and
// an op that reads the view's old value.
TEST(InPlaceView, WritesThroughViewsOfANonLeafMatchFiniteDifferences) {
  expect_gradcheck([](const std::vector<Tensor>& in) {
    Tensor y = in[0] * 2 + 1;                                  // (4, 3)
    y.narrow(0, 0, 3).select(1, 1).mul_(in[1].narrow(0, 0, 3));  // a view of a view, reading its old value
    y.t().narrow(0, 2, 1).add_(exp(in[1]).view({1, 4}));      // a column through the transpose
    Tensor block = y.narrow(0, 2, 2);
    tanh_(block);                                              // a row block, in place through tanh_
    return (y * in[0]).sum();
  }, {leaf64({4, 3}, 4), leaf64({4}, 5)}, "rows, columns, views of views");
}

// A view made before the write: its history is stale after another view (or the base itself) changed the
// base, and it must read the new value's history. Without the fix the gradient of b missed the factor 3.
TEST(InPlaceView, ViewsMadeBeforeAWriteSeeIt) {
  Tensor x = leaf64({4}, 6);
  Tensor y = x * 2;
  Tensor a = y.narrow(0, 0, 2), b = y.narrow(0, 1, 2);  // overlapping in element 1
  a.mul_(3);
  b.sum().backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{0, 6, 2, 0}));

  Tensor z = leaf64({4}, 7);
  Tensor h = z * 1;
  Tensor v = h.narrow(0, 2, 2);
  h.mul_(5);  // the base itself, in place
  v.sum().backward();
  EXPECT_EQ(values_of(z.grad()), (std::vector<double>{0, 0, 5, 5}));

  expect_gradcheck([](const std::vector<Tensor>& in) {
    Tensor y = in[0] * in[0];
    Tensor a = y.narrow(0, 0, 3), b = y.narrow(0, 2, 3), c = y.view({2, 3});
    a.mul_(in[1].narrow(0, 0, 3));
    b.add_(in[1].narrow(0, 3, 3) + a.narrow(0, 2, 1));  // reads a (fresh) and writes through b (stale before)
    return (c.sum(0) * c.sum(1).sum()).sum() + (a * b).sum();
  }, {leaf64({6}, 8), leaf64({6}, 9)}, "siblings and a reshaped view, written in turn");
}

// A view of a tensor that is gone: writing through it makes the view its own root, and a sibling read after
// that write is refused (its history cannot be rebuilt) instead of sending gradients along the old one.
TEST(InPlaceView, AViewOfATensorThatIsGone) {
  Tensor x = leaf64({4}, 10);
  Tensor alone = (x * 2).narrow(0, 1, 2);
  alone.mul_(3);
  alone.sum().backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{0, 6, 6, 0}));

  Tensor a, b;
  {
    Tensor y = x * 2;
    a = y.narrow(0, 0, 2);
    b = y.narrow(0, 1, 2);
  }
  a.mul_(3);
  test::expect_error([&] { (b * 1).sum(); }, {"view of shape (2)", "changed in place", "mul_", "no longer exists"});
}

// The gradient through a write into a view, differentiated again (create_graph). buf is ones with rows 1-2
// replaced by x * x and column 0 then scaled by w, so buf[i + 1][j] = x_ij^2 c_ij with c_ij = w_{i+1} for j = 0,
// else 1, and L = sum(buf^2) gives g = dL/dx = 4 x^3 c^2; then d(sum g)/dx = 12 x^2 c^2 and
// d(sum g)/dw_{i+1} = 8 x_i0^3 w_{i+1}.
TEST(InPlaceView, SecondDerivativesThroughAWrite) {
  Tensor x = leaf64({2, 3}, 13), w = leaf64({4}, 14);
  Tensor buf = ones({4, 3}, kFloat64);
  buf.narrow(0, 1, 2).copy_(x * x);
  buf.select(1, 0).mul_(w);
  const Tensor g = autograd::grad({(buf * buf).sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  const std::vector<Tensor> gg = autograd::grad({g.sum()}, {x, w});
  const std::vector<double> xv = values_of(x), wv = values_of(w), gv = values_of(g), ggx = values_of(gg[0]),
                            ggw = values_of(gg[1]);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      const double xi = xv[static_cast<size_t>(i * 3 + j)], c = j == 0 ? wv[static_cast<size_t>(i + 1)] : 1.0;
      EXPECT_NEAR(gv[static_cast<size_t>(i * 3 + j)], 4 * xi * xi * xi * c * c, 1e-12) << "g " << i << "," << j;
      EXPECT_NEAR(ggx[static_cast<size_t>(i * 3 + j)], 12 * xi * xi * c * c, 1e-12) << "d2/dx2 " << i << "," << j;
    }
  }
  const std::vector<double> want_w{0, 8 * std::pow(xv[0], 3) * wv[1], 8 * std::pow(xv[3], 3) * wv[2], 0};
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(ggw[k], want_w[k], 1e-12) << "d2/dxdw " << k;
}

// What reads a stale view's history directly rebuilds it first: retain_grad and grad_fn. A view made without
// recording after the write is not pulled into the graph.
TEST(InPlaceView, StaleViewsThroughTheAccessors) {
  Tensor x = leaf64({4}, 15);
  Tensor y = x * 2;
  Tensor v = y.narrow(0, 0, 2);
  y.mul_(3);
  v.retain_grad();
  EXPECT_EQ(v.grad_fn()->name(), std::string("AsStridedView"));
  (v * v).sum().backward();
  ASSERT_TRUE(v.grad().defined());
  EXPECT_EQ(values_of(v.grad()), values_of((y.narrow(0, 0, 2) * 2).detach()));

  Tensor plain;
  {
    NoGradGuard no_grad;
    plain = y.narrow(0, 2, 2);
  }
  EXPECT_FALSE(plain.requires_grad());
}

// A saved input that is a view, whose history is rebuilt later through a node that saved it: the graph must
// not own itself (LeakSanitizer, in the sanitized build, finds a cycle), and backward reports the write.
TEST(InPlaceView, ASavedViewRebuiltLaterOwnsNoCycle) {
  Tensor w = leaf64({2}, 16);
  Tensor y = cat({w, w}, 0) * 1;
  Tensor a = y.narrow(0, 0, 2);
  y.narrow(0, 2, 2).copy_(a * w);  // the product saved a
  Tensor loss = (a * 1).sum() + y.sum();
  test::expect_error([&] { loss.backward(); }, {"modified in place", "copy_"});
}

TEST(InPlaceView, Errors) {
  Tensor x = leaf64({3, 2}, 11);
  test::expect_error([&] { x.narrow(0, 0, 1).mul_(2); }, {"mul_", "view", "leaf tensor that requires grad"});
  Tensor y = x * 1;
  Tensor col = y.narrow(1, 0, 1);                    // (3, 1)
  test::expect_error([&] { col.expand({3, 4}).add_(leaf64({3, 4}, 12)); }, {"add_", "overlap"});
  NoGradGuard no_grad;
  x.narrow(0, 0, 1).mul_(2);  // as an optimizer would: no graph, no error
}

// A leaf made of a view (requires_grad_ on a slice of a buffer): a recorded write anywhere into the buffer would
// give that leaf a history and cut its grad off, so it is refused while the leaf lives; its own gradients
// still reach it; and a view that was already stale when asked to require grad is not a leaf.
TEST(InPlaceView, LeavesMadeOfViews) {
  Tensor buf = zeros({4}, kFloat64);
  Tensor v = buf.narrow(0, 0, 2);
  v.requires_grad_(true);
  Tensor u = v.narrow(0, 0, 1);  // a view of the leaf, through its root buf
  test::expect_error([&] { u.add_(1); }, {"add_", "view", "leaf that requires grad", "shape (2)", "clone()"});
  Tensor w = leaf64({2}, 13);
  test::expect_error([&] { buf.narrow(0, 2, 2).copy_(w); }, {"copy_", "(4)", "leaf that requires grad"});
  test::expect_error([&] { buf.add_(w.sum()); }, {"add_", "leaf that requires grad"});
  EXPECT_FALSE(buf.requires_grad());
  (v * v * 3).sum().backward();  // the leaf's gradient is its own: 6 v = 0
  ASSERT_TRUE(v.grad().defined());
  EXPECT_EQ(values_of(v.grad()), (std::vector<double>{0, 0}));
  {
    NoGradGuard no_grad;
    buf.fill_(1);  // as an optimizer would: no error
  }
  u = Tensor();  // its graph held the leaf
  v = Tensor();  // the leaf is gone: writes into buf record again
  buf.narrow(0, 2, 2).copy_(w);
  buf.sum().backward();
  EXPECT_EQ(values_of(w.grad()), (std::vector<double>{1, 1}));

  Tensor buf2 = zeros({4}, kFloat64);
  Tensor early = buf2.narrow(0, 0, 2);  // made before buf2 joins the graph
  buf2.narrow(0, 2, 2).copy_(leaf64({2}, 14));
  test::expect_error([&] { early.requires_grad_(true); }, {"only leaves", "AsStridedView"});
}

// One stale view used from several threads at once: each thread's gradient through it is right (the rebuild
// runs once, under the lock, and no thread reads a half-set history). Many rounds, each with a fresh stale view.
TEST(InPlaceView, AStaleViewUsedFromSeveralThreads) {
  constexpr int kThreads = 4, kRounds = 100;
  for (int round = 0; round < kRounds; ++round) {
    Tensor x = leaf64({4}, 20);
    Tensor y = x * 2;
    Tensor v = y.narrow(0, 1, 2);
    y.mul_(3);  // v is stale: its value, and gradient, carry the factor 3 now
    std::atomic<int> ready{0};
    std::vector<std::vector<double>> grads(kThreads);
    std::vector<const autograd::Node*> histories(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        Tensor loss = (v * static_cast<double>(i + 1)).sum();
        histories[i] = loss.grad_fn()->next_edges[0].node->next_edges[0].node.get();  // sum <- mul <- v's
        grads[i] = values_of(autograd::grad({loss}, {x}, {}, /*retain_graph=*/true)[0]);  // shared nodes
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kThreads; ++i) {
      const double g = 6.0 * (i + 1);
      ASSERT_EQ(grads[i], (std::vector<double>{0, g, g, 0})) << "round " << round << ", thread " << i;
      ASSERT_EQ(histories[i], v.grad_fn().get()) << "round " << round << ": v was rebuilt more than once";
    }
    ASSERT_NE(v.grad_fn(), nullptr);
    EXPECT_STREQ(v.grad_fn()->name(), "AsStridedView");
  }
}

}  // namespace inplace_view_tests
}  // namespace kiln
