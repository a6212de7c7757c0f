// Embedding with padding_idx, EmbeddingBag and Bilinear against float64 loops written from PyTorch's
// definitions: each bag's rows summed, averaged or maxed element by element, padding entries left out, empty bags
// zero; the padding row's gradient zero; scale_grad_by_freq's divided shares; the bilinear form as a triple sum.
// Gradients by gradcheck.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/tensor/ops/embedding_bag.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::randn64;
namespace F = nn::functional;

Tensor ids(const std::vector<int64_t>& v, IntArrayRef shape) { return tensor(v, shape); }

TEST(EmbeddingPadding, LooksUpThePaddingRowButPassesItNoGradient) {
  Tensor w = randn64({5, 3}, 700).requires_grad_();
  const Tensor idx = ids({1, 4, 1, 2, 4, 0}, {2, 3});
  const Tensor y = F::embedding(idx, w, 4);
  // the forward is a plain lookup, the padding row included
  const std::vector<double> wv = w.to_vector<double>(), yv = y.to_vector<double>();
  const std::vector<int64_t> iv = idx.to_vector<int64_t>();
  for (size_t i = 0; i < iv.size(); ++i)
    for (size_t d = 0; d < 3; ++d) EXPECT_EQ(yv[i * 3 + d], wv[static_cast<size_t>(iv[i]) * 3 + d]);
  // the gradient of row r is the sum of the upstream rows that looked it up, except the padding row's
  const Tensor g = randn64({2, 3, 3}, 701);
  (y * g).sum().backward();
  const std::vector<double> gv = g.to_vector<double>(), grad = w.grad().to_vector<double>();
  std::vector<double> want(15, 0.0);
  for (size_t i = 0; i < iv.size(); ++i)
    if (iv[i] != 4)
      for (size_t d = 0; d < 3; ++d) want[static_cast<size_t>(iv[i]) * 3 + d] += gv[i * 3 + d];
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(grad[i], want[i], 1e-15) << i;
  // a negative padding_idx counts from the end
  Tensor w2 = w.detach().requires_grad_();
  F::embedding(idx, w2, -1).sum().backward();
  EXPECT_EQ(w2.grad().narrow(0, 4, 1).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(w2.grad().narrow(0, 1, 1).sum().item<double>(), 2 * 3.0);  // row 1, looked up twice
  expect_error([&] { F::embedding(idx, w, 5); }, {"embedding", "padding_idx 5", "5 embeddings"});

  auto emb = nn::Embedding(6, 4, {.padding_idx = -2});
  EXPECT_EQ(emb->weight.narrow(0, 4, 1).abs().sum().item<double>(), 0.0);  // starts at zero
  EXPECT_GT(emb->weight.narrow(0, 3, 1).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(emb->str(), "Embedding(6, 4, padding_idx=4)");
  EXPECT_EQ(nn::Embedding(6, 4)->str(), "Embedding(6, 4)");
  expect_error([] { nn::Embedding(6, 4, {.padding_idx = 6}); }, {"Embedding", "padding_idx 6"});
}

// One bag's reduction from the definition: its entries (padding left out), each row times its weight, summed,
// averaged or maxed per dim; an empty bag is zeros.
std::vector<double> bag_reference(const std::vector<double>& w, int64_t D, const std::vector<int64_t>& idx,
                                  const std::vector<int64_t>& bounds, F::BagMode mode,
                                  std::optional<int64_t> padding, const std::vector<double>& psw) {
  std::vector<double> out;
  for (size_t b = 0; b + 1 < bounds.size(); ++b)
    for (int64_t d = 0; d < D; ++d) {
      double sum = 0, best = -std::numeric_limits<double>::infinity();
      int64_t count = 0;
      for (int64_t i = bounds[b]; i < bounds[b + 1]; ++i) {
        const int64_t id = idx[static_cast<size_t>(i)];
        if (padding && id == *padding) continue;
        const double v = w[static_cast<size_t>(id * D + d)] * (psw.empty() ? 1.0 : psw[static_cast<size_t>(i)]);
        sum += v, best = std::max(best, v), ++count;
      }
      if (count == 0) out.push_back(0.0);
      else if (mode == F::BagMode::Sum) out.push_back(sum);
      else if (mode == F::BagMode::Mean) out.push_back(sum / static_cast<double>(count));
      else out.push_back(best);
    }
  return out;
}

// On the CPU embedding_bag runs fused kernels; the composite path (every other device's) is held to the same
// definition under CompositeOnlyGuard.
class EmbeddingBagPaths : public testing::TestWithParam<bool> {};  // true: the composite path
INSTANTIATE_TEST_SUITE_P(EmbeddingBag, EmbeddingBagPaths, testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Composite" : "Fused"; });

TEST_P(EmbeddingBagPaths, EveryModeMatchesTheDefinition) {
  std::optional<F::CompositeOnlyGuard> composite;
  if (GetParam()) composite.emplace();
  const int64_t V = 7, D = 3;
  const Tensor w = randn64({V, D}, 710);
  const std::vector<int64_t> idx = {2, 5, 5, 0, 6, 1, 3, 3, 4, 6};
  // bags [0, 3), [3, 3) empty, [3, 7), [7, 10)
  const std::vector<int64_t> starts = {0, 3, 3, 7};
  const std::vector<int64_t> bounds = {0, 3, 3, 7, 10};
  const Tensor psw = randn64({10}, 711);
  for (F::BagMode mode : {F::BagMode::Sum, F::BagMode::Mean, F::BagMode::Max})
    for (std::optional<int64_t> padding : {std::optional<int64_t>(), std::optional<int64_t>(3)}) {
      SCOPED_TRACE(std::string(mode == F::BagMode::Sum ? "sum" : mode == F::BagMode::Mean ? "mean" : "max") +
                   (padding ? ", padding 3" : ""));
      const F::EmbeddingBagOptions o{.mode = mode, .padding_idx = padding};
      const Tensor y = F::embedding_bag(ids(idx, {10}), w, ids(starts, {4}), o);
      EXPECT_EQ(y.sizes(), (Shape{4, D}));
      EXPECT_EQ(y.to_vector<double>(), bag_reference(w.to_vector<double>(), D, idx, bounds, mode, padding, {}));
      // include_last_offset: the same bags with their end given
      F::EmbeddingBagOptions last = o;
      last.include_last_offset = true;
      EXPECT_EQ(F::embedding_bag(ids(idx, {10}), w, ids(bounds, {5}), last).to_vector<double>(), y.to_vector<double>());
      auto f = [&](const std::vector<Tensor>& t) {
        return F::embedding_bag(ids(idx, {10}), t[0], ids(starts, {4}), o);
      };
      EXPECT_TRUE(gradcheck(f, {w.detach().requires_grad_()}).ok);
    }
  // per-sample weights scale each row (sum mode), with their own gradient
  const F::EmbeddingBagOptions sum{.mode = F::BagMode::Sum};
  const Tensor ys = F::embedding_bag(ids(idx, {10}), w, ids(starts, {4}), sum, psw);
  const std::vector<double> want = bag_reference(w.to_vector<double>(), D, idx, bounds, F::BagMode::Sum, std::nullopt,
                                                 psw.to_vector<double>());
  const std::vector<double> got = ys.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14);
  auto weighted = [&](const std::vector<Tensor>& t) {
    return F::embedding_bag(ids(idx, {10}), t[0], ids(starts, {4}), sum, t[1]);
  };
  EXPECT_TRUE(gradcheck(weighted, {w.detach().requires_grad_(), psw.detach().requires_grad_()}).ok);
  // a 2-d input: one bag per row, as the 1-d form with offsets 0, L, 2L
  const Tensor grid = ids({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(F::embedding_bag(grid, w).to_vector<double>(),
            F::embedding_bag(grid.reshape({-1}), w, ids({0, 2, 4}, {3})).to_vector<double>());
}

// scale_grad_by_freq against its definition (PyTorch's): each lookup's share of the table's gradient divided by
// how many times the indices name its row, padding rows none; the forward unchanged; bags of sum (with
// per-sample weights) and mean; second derivatives pass through it; max refused.
TEST_P(EmbeddingBagPaths, ScaleGradByFreqDividesEachLookupsShareByItsRowsCount) {
  std::optional<F::CompositeOnlyGuard> composite;
  if (GetParam()) composite.emplace();
  const int64_t V = 7, D = 3;
  const Tensor w = randn64({V, D}, 720);
  const std::vector<int64_t> idx = {2, 5, 5, 0, 6, 1, 3, 3, 4, 6, 5};
  const std::vector<int64_t> bounds = {0, 3, 3, 7, 11};  // bags [0, 3), [3, 3) empty, [3, 7), [7, 11)
  std::vector<double> count(static_cast<size_t>(V), 0.0);
  for (int64_t id : idx) count[static_cast<size_t>(id)] += 1;
  const std::vector<double> psw = randn64({11}, 721).to_vector<double>();
  // embedding: (11) lookups, padding row 3
  {
    const Tensor g = randn64({11, D}, 722);
    const std::vector<double> gv = g.to_vector<double>();
    std::vector<double> want(static_cast<size_t>(V * D), 0.0);
    for (size_t i = 0; i < idx.size(); ++i)
      for (int64_t d = 0; d < D; ++d)
        if (idx[i] != 3) want[static_cast<size_t>(idx[i] * D + d)] += gv[i * D + d] / count[static_cast<size_t>(idx[i])];
    const Tensor leaf = w.detach().requires_grad_();
    const Tensor y = F::embedding(ids(idx, {11}), leaf, 3, std::nullopt, 2.0, /*scale_grad_by_freq=*/true);
    EXPECT_TRUE(y.equal(F::embedding(ids(idx, {11}), w, 3)));
    y.backward(g);
    test::expect_tensor_near(leaf.grad(), want, {V, D}, 1e-14, 1e-14, "embedding");
  }
  for (F::BagMode mode : {F::BagMode::Sum, F::BagMode::Mean}) {
    const bool weighted = mode == F::BagMode::Sum;
    SCOPED_TRACE(weighted ? "sum, per-sample weights" : "mean");
    const Tensor g = randn64({4, D}, 723);
    const std::vector<double> gv = g.to_vector<double>();
    std::vector<double> want(static_cast<size_t>(V * D), 0.0);
    for (size_t b = 0; b + 1 < bounds.size(); ++b) {
      int64_t members = 0;
      for (int64_t i = bounds[b]; i < bounds[b + 1]; ++i) members += idx[static_cast<size_t>(i)] != 0;
      for (int64_t i = bounds[b]; i < bounds[b + 1]; ++i) {
        const int64_t id = idx[static_cast<size_t>(i)];
        if (id == 0) continue;  // padding_idx 0
        const double share = (weighted ? psw[static_cast<size_t>(i)] : 1.0 / static_cast<double>(members)) /
                             count[static_cast<size_t>(id)];
        for (int64_t d = 0; d < D; ++d)
          want[static_cast<size_t>(id * D + d)] += gv[static_cast<size_t>(static_cast<int64_t>(b) * D + d)] * share;
      }
    }
    const F::EmbeddingBagOptions o{.mode = mode, .padding_idx = 0, .scale_grad_by_freq = true};
    const Tensor leaf = w.detach().requires_grad_();
    const Tensor weights = weighted ? tensor(psw, {11}) : Tensor();
    const Tensor y = F::embedding_bag(ids(idx, {11}), leaf, ids({0, 3, 3, 7}, {4}), o, weights);
    F::EmbeddingBagOptions plain = o;
    plain.scale_grad_by_freq = false;
    EXPECT_TRUE(y.equal(F::embedding_bag(ids(idx, {11}), w, ids({0, 3, 3, 7}, {4}), plain, weights)));
    y.backward(g);
    test::expect_tensor_near(leaf.grad(), want, {V, D}, 1e-14, 1e-14, "embedding_bag");
  }
  // A backward with create_graph records the scaling: the table's gradient differentiated by the upstream
  // gradient is each bag's lookup of the probe, each row divided by its count (mean mode, no padding here).
  const Tensor leaf = w.detach().requires_grad_();
  const Tensor up = randn64({4, D}, 724).requires_grad_();
  const Tensor y = F::embedding_bag(ids(idx, {11}), leaf, ids({0, 3, 3, 7}, {4}), {.scale_grad_by_freq = true});
  const Tensor gw = autograd::grad({y}, {leaf}, {up}, std::nullopt, /*create_graph=*/true)[0];
  const Tensor probe = randn64({V, D}, 725);
  const Tensor second = autograd::grad({(gw * probe).sum()}, {up})[0];
  // d/d(up) of <grad_w(up), probe> is the lookup of probe / count, bag by bag (mean mode: over the members)
  std::vector<double> want_second(static_cast<size_t>(4 * D), 0.0);
  const std::vector<double> pv = probe.to_vector<double>();
  for (size_t b = 0; b + 1 < bounds.size(); ++b) {
    const int64_t members = bounds[b + 1] - bounds[b];
    for (int64_t i = bounds[b]; i < bounds[b + 1]; ++i) {
      const int64_t id = idx[static_cast<size_t>(i)];
      for (int64_t d = 0; d < D; ++d)
        want_second[b * D + static_cast<size_t>(d)] +=
            pv[static_cast<size_t>(id * D + d)] / static_cast<double>(members) / count[static_cast<size_t>(id)];
    }
  }
  test::expect_tensor_near(second, want_second, {4, D}, 1e-14, 1e-14, "second derivative");
  expect_error(
      [&] {
        (void)F::embedding_bag(ids(idx, {11}), w, ids({0, 3}, {2}), {.mode = F::BagMode::Max, .scale_grad_by_freq = true});
      },
      {"embedding_bag", "scale_grad_by_freq", "Max"});
  EXPECT_NE(nn::Embedding(5, 2, {.scale_grad_by_freq = true})->extra_repr().find("scale_grad_by_freq=true"),
            std::string::npos);
  EXPECT_NE(nn::EmbeddingBag(5, 2, {.scale_grad_by_freq = true})->extra_repr().find("scale_grad_by_freq=true"),
            std::string::npos);
}

TEST_P(EmbeddingBagPaths, MaxGradientGoesToTheFirstMaximum) {
  std::optional<F::CompositeOnlyGuard> composite;
  if (GetParam()) composite.emplace();
  // Bag {0, 1}: row 1 is larger in dim 0, row 0 in dim 1.
  Tensor w = tensor(std::vector<double>{1, 5, 2, 3}, {2, 2}).requires_grad_();
  F::embedding_bag(ids({0, 1}, {1, 2}), w, {}, {.mode = F::BagMode::Max}).sum().backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 0}));
  // A tie: rows 0 and 2 are equal; the first of the bag (row 2) takes the gradient.
  Tensor t = tensor(std::vector<double>{4, 4, 1, 1, 4, 4}, {3, 2}).requires_grad_();
  F::embedding_bag(ids({2, 1, 0}, {1, 3}), t, {}, {.mode = F::BagMode::Max}).sum().backward();
  EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 0, 1, 1}));
}

// The fused kernels against the composite on a random batch: bags of 0 to 9 entries with repeated rows and a
// padding row, D = 19 (not a whole number of the max backward's column blocks), float32 and float64, every
// mode, the table's and the per-sample weights' gradients. Then the fused results do not depend on the thread
// count (each table row is written by one thread, its entries in input order).
TEST(EmbeddingBag, FusedKernelsMatchTheCompositeAndAnyThreadCount) {
  const int64_t V = 40, D = 19;
  Generator gen(730);
  std::vector<int64_t> idx, starts;
  for (int64_t b = 0; b < 60; ++b) {
    starts.push_back(static_cast<int64_t>(idx.size()));
    const int64_t size = randint(0, 10, {1}, kInt64, &gen).item<int64_t>();
    for (int64_t k = 0; k < size; ++k) idx.push_back(randint(0, V, {1}, kInt64, &gen).item<int64_t>());
  }
  const int64_t n = static_cast<int64_t>(idx.size());
  const Tensor input = ids(idx, {n}), offsets = ids(starts, {static_cast<int64_t>(starts.size())});
  for (DType dtype : {kFloat64, kFloat32})
    for (F::BagMode mode : {F::BagMode::Sum, F::BagMode::Mean, F::BagMode::Max})
      for (bool weighted : {false, true}) {
        if (weighted && mode != F::BagMode::Sum) continue;
        const char* name = mode == F::BagMode::Sum ? " sum" : mode == F::BagMode::Mean ? " mean" : " max";
        SCOPED_TRACE(std::string(dtype_name(dtype)) + name + (weighted ? ", weighted" : ""));
        const F::EmbeddingBagOptions o{.mode = mode, .padding_idx = 5};
        const Tensor w0 = randn({V, D}, TensorOptions(dtype), &gen), psw0 = randn({n}, TensorOptions(dtype), &gen);
        const Tensor up = randn({static_cast<int64_t>(starts.size()), D}, TensorOptions(dtype), &gen);
        // forward, then backward of (y * up).sum(): y, the table's gradient, the weights' gradient
        const auto run = [&](bool composite) {
          std::optional<F::CompositeOnlyGuard> guard;
          if (composite) guard.emplace();
          const Tensor w = w0.detach().requires_grad_(), psw = psw0.detach().requires_grad_();
          const Tensor y = F::embedding_bag(input, w, offsets, o, weighted ? psw : Tensor());
          (y * up).sum().backward();
          return std::vector<Tensor>{y, w.grad(), weighted ? psw.grad() : Tensor()};
        };
        const std::vector<Tensor> fused = run(false), composite = run(true);
        const double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
        for (size_t i = 0; i < fused.size(); ++i) {
          if (!composite[i].defined()) continue;
          ASSERT_TRUE(fused[i].defined()) << i;
          EXPECT_TRUE(allclose(fused[i], composite[i], tol, tol)) << "output " << i;
        }
        const int threads = get_num_threads();
        set_num_threads(1);
        const std::vector<Tensor> one_thread = run(false);
        set_num_threads(3);
        const std::vector<Tensor> three_threads = run(false);
        set_num_threads(threads);
        for (size_t i = 0; i < fused.size(); ++i) {
          if (!fused[i].defined()) continue;
          EXPECT_TRUE(one_thread[i].equal(fused[i]) && three_threads[i].equal(fused[i])) << "output " << i;
        }
      }
}

// The inputs the fused path must take as the composite does: int32 indices, a non-contiguous table, a table of
// width 0, bags all empty over a table holding inf (zeros, not NaN), and per_sample_weights of another dtype
// (an error, as in PyTorch).
TEST_P(EmbeddingBagPaths, OddInputs) {
  std::optional<F::CompositeOnlyGuard> composite;
  if (GetParam()) composite.emplace();
  const Tensor table = randn64({6, 4}, 750);
  const std::vector<int64_t> idx = {1, 4, 4, 0, 5, 2};
  const Tensor offsets = ids({0, 2, 2, 5}, {4});
  const F::EmbeddingBagOptions sum{.mode = F::BagMode::Sum};
  const Tensor want = F::embedding_bag(ids(idx, {6}), table, offsets, sum);
  EXPECT_TRUE(F::embedding_bag(ids(idx, {6}).to(kInt32), table, offsets.to(kInt32), sum).equal(want));
  // the same table, stored transposed
  const Tensor strided = table.t().contiguous().t();
  ASSERT_FALSE(strided.is_contiguous());
  Tensor leaf = strided.detach().requires_grad_();
  const Tensor y = F::embedding_bag(ids(idx, {6}), leaf, offsets, sum);
  EXPECT_TRUE(y.equal(want));
  y.sum().backward();
  EXPECT_EQ(leaf.grad().sum({1}).to_vector<double>(), (std::vector<double>{4, 4, 4, 0, 8, 4}));
  // width 0: (B, 0) out, (6, 0) gradient
  Tensor thin = zeros({6, 0}, kFloat64).requires_grad_();
  const Tensor y0 = F::embedding_bag(ids(idx, {6}), thin, offsets, {.mode = F::BagMode::Max});
  EXPECT_EQ(y0.sizes(), (Shape{4, 0}));
  y0.sum().backward();
  EXPECT_EQ(thin.grad().sizes(), (Shape{6, 0}));
  // every bag empty, over a table with an inf in it
  Tensor infinite = table.clone();
  infinite.index_put_({ids({3}, {1})}, full({1, 4}, std::numeric_limits<double>::infinity(), kFloat64));
  const Tensor empty_bags = F::embedding_bag(ids({}, {0}), infinite, ids({0, 0}, {2}), sum);
  EXPECT_TRUE(empty_bags.equal(zeros({2, 4}, kFloat64)));
  expect_error([&] { F::embedding_bag(ids(idx, {6}), table, offsets, sum, randn64({6}, 751).to(kFloat32)); },
               {"per_sample_weights", "float64", "float32"});
}

// A backward with create_graph runs the fused path's gradient as differentiable ops: the second derivatives
// (the table's gradient by the per-sample weights and by the upstream gradient) pass gradcheck, as mean's
// and max's first-order gradients do by the upstream gradient.
TEST(EmbeddingBag, SecondDerivativesThroughTheFusedPath) {
  const Tensor input = ids({2, 5, 5, 0, 6, 1, 3, 3}, {8}), offsets = ids({0, 3, 3, 6}, {4});
  for (F::BagMode mode : {F::BagMode::Sum, F::BagMode::Mean, F::BagMode::Max}) {
    SCOPED_TRACE(mode == F::BagMode::Sum ? "sum" : mode == F::BagMode::Mean ? "mean" : "max");
    const bool weighted = mode == F::BagMode::Sum;
    // inputs: the table, the upstream gradient, and (sum) the per-sample weights
    // (gradcheck's numeric pass calls it with grad off and inputs that do not require grad)
    auto first_order = [&](const std::vector<Tensor>& in) {
      EnableGradGuard grad_on;
      std::vector<Tensor> t;
      for (const Tensor& x : in) t.push_back(x.requires_grad() ? x : x.detach().requires_grad_());
      const Tensor y = F::embedding_bag(input, t[0], offsets, {.mode = mode, .padding_idx = 1},
                                        weighted ? t[2] : Tensor());
      std::vector<Tensor> wrt{t[0]};
      if (weighted) wrt.push_back(t[2]);
      return autograd::grad({y}, wrt, {t[1]}, std::nullopt, /*create_graph=*/true);
    };
    std::vector<Tensor> inputs{randn64({7, 3}, 740).requires_grad_(), randn64({4, 3}, 742).requires_grad_()};
    if (weighted) inputs.push_back(randn64({8}, 741).requires_grad_());
    EXPECT_TRUE(gradcheck(first_order, inputs).ok);
  }
}

TEST(EmbeddingBag, ErrorsNameTheProblem) {

  const Tensor table = randn64({5, 2}, 720);
  const Tensor flat = ids({0, 1, 2}, {3});
  expect_error([&] { F::embedding_bag(flat, table); }, {"embedding_bag", "offsets"});
  expect_error([&] { F::embedding_bag(flat, table, ids({1}, {1})); }, {"embedding_bag", "start at 0", "1"});
  expect_error([&] { F::embedding_bag(flat, table, ids({0, 2, 1}, {3})); }, {"non-decreasing", "offset 2"});
  expect_error([&] { F::embedding_bag(ids({0, 9}, {2}), table, ids({0}, {1})); },
               {"embedding_bag", "index 9", "position 1", "5 embeddings"});
  expect_error([&] { F::embedding_bag(ids({0, 1}, {1, 2}), table, ids({0}, {1})); }, {"2-d input", "offsets"});
  expect_error([&] { F::embedding_bag(flat, table, ids({0}, {1}), {}, randn64({3}, 1)); },
               {"per_sample_weights", "Sum"});
  expect_error([&] { F::embedding_bag(flat, table, ids({0}, {1}), {.mode = F::BagMode::Sum}, randn64({2}, 1)); },
               {"per_sample_weights", "(3)", "(2)"});

  auto bag = nn::EmbeddingBag(10, 4, {.mode = F::BagMode::Sum, .padding_idx = 0});
  EXPECT_EQ(bag->weight.narrow(0, 0, 1).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(bag(ids({1, 2, 0, 3, 4}, {5}), ids({0, 2}, {2})).sizes(), (Shape{2, 4}));
  EXPECT_EQ(bag(ids({1, 2, 3, 4}, {2, 2})).sizes(), (Shape{2, 4}));
  EXPECT_EQ(bag->str(), "EmbeddingBag(10, 4, mode='sum', padding_idx=0)");
}

// The row groups the table's gradient walks (the CUDA kernels' for every mode, the CPU's for sum and mean):
// against std::stable_sort of the entries by row.
TEST(EmbeddingBag, RowGroupsAreAStableSortOfTheEntriesByRow) {
  std::mt19937 rng(731);
  std::uniform_int_distribution<int64_t> pick(0, 11);
  for (int64_t entries : {0, 1, 40}) {
    std::vector<int64_t> rows(static_cast<size_t>(entries));
    for (int64_t& r : rows) r = pick(rng) < 6 ? pick(rng) % 3 : pick(rng);  // rows 0-2 named often
    BagLayout bags;
    bags.row = tensor(rows, {entries});
    const RowGroups g = ops::group_by_row(bags, 12);
    std::vector<int64_t> order(rows.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int64_t>(j);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
    EXPECT_EQ(g.order.to_vector<int64_t>(), order);
    std::vector<int64_t> named, starts;
    for (size_t k = 0; k < order.size(); ++k)
      if (k == 0 || rows[order[k]] != rows[order[k - 1]]) named.push_back(rows[order[k]]), starts.push_back(static_cast<int64_t>(k));
    starts.push_back(entries);
    EXPECT_EQ(g.rows_named.to_vector<int64_t>(), named);
    EXPECT_EQ(g.row_start.to_vector<int64_t>(), starts);
  }
  BagLayout bad;
  bad.row = tensor(std::vector<int64_t>{0, 12}, {2});
  expect_error([&] { ops::group_by_row(bad, 12); }, {"entry 1", "row 12", "of 12"});
}

// The fused kernels' frontends refuse what their kernels cannot take, naming it.
TEST(EmbeddingBag, FusedFrontendsCheckTheirOperands) {
  BagLayout bags;
  bags.count = 1, bags.num_inputs = 2;
  bags.input = tensor(std::vector<int64_t>{0, 1}, {2}), bags.row = tensor(std::vector<int64_t>{2, 3}, {2});
  bags.bag = tensor(std::vector<int64_t>{0, 0}, {2}), bags.start = tensor(std::vector<int64_t>{0, 2}, {2});
  const Tensor table = randn64({5, 3}, 733);
  const ops::EmbeddingBagForward f = ops::embedding_bag_forward(table, {}, bags, BagReduce::Sum);
  EXPECT_TRUE(f.out.allclose(table.narrow(0, 2, 2).sum({0}, /*keepdim=*/true), 1e-15, 0));
  expect_error([&] { ops::embedding_bag_forward(table.to(kFloat16), {}, bags, BagReduce::Sum); },
               {"float32 or float64", "float16"});
  expect_error([&] { ops::embedding_bag_forward(table, randn64({3}, 1), bags, BagReduce::Sum); },
               {"per_sample_weights", "2", "got 3"});
  BagLayout short_starts = bags;
  short_starts.start = tensor(std::vector<int64_t>{0}, {1});
  expect_error([&] { ops::embedding_bag_forward(table, {}, short_starts, BagReduce::Mean); }, {"1 bags", "2 starts"});
  expect_error([&] { ops::embedding_bag_backward_weight(randn64({2, 3}, 2), {}, {}, bags, 5, BagReduce::Max); },
               {"(1, D)"});
}

// max_norm against PyTorch's rule written here in float64: a named row whose p-norm exceeds max_norm becomes
// row * max_norm / (norm + 1e-7); other rows, named or not, stay as they were.
std::vector<double> renormed_rows(const std::vector<double>& table, int64_t dim, const std::vector<int64_t>& named,
                                  double max_norm, double p) {
  std::vector<double> out = table;
  for (int64_t r : named) {
    double norm = 0;
    for (int64_t j = 0; j < dim; ++j) norm += std::pow(std::abs(table[static_cast<size_t>(r * dim + j)]), p);
    norm = std::pow(norm, 1.0 / p);
    if (norm <= max_norm) continue;
    for (int64_t j = 0; j < dim; ++j)
      out[static_cast<size_t>(r * dim + j)] = table[static_cast<size_t>(r * dim + j)] * (max_norm / (norm + 1e-7));
  }
  return out;
}

TEST(EmbeddingMaxNorm, RenormalizesTheNamedRowsInPlaceThenLooksUp) {
  for (double p : {2.0, 1.0, 3.0}) {
    SCOPED_TRACE(p);
    const Tensor start = randn64({6, 4}, 190) * 2.0;
    const std::vector<int64_t> ids{4, 1, 4, 0};  // rows 2, 3 and 5 are not named; row 4 twice
    const std::vector<double> want = renormed_rows(start.to_vector<double>(), 4, {4, 1, 0}, 1.5, p);
    nn::Embedding emb(6, 4, {.max_norm = 1.5, .norm_type = p});
    emb->to(kFloat64);
    {
      NoGradGuard no_grad;
      emb->weight.copy_(start);
    }
    const Tensor idx = tensor(ids, {2, 2});
    const auto expect_renormed = [&](const Tensor& got) {
      const std::vector<double> g = got.to_vector<double>();
      ASSERT_EQ(g.size(), want.size());
      for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-14) << "at " << i;
    };
    const Tensor y = emb(idx);
    expect_renormed(emb->weight);
    EXPECT_TRUE(y.equal(F::embedding(idx, emb->weight)));  // the lookup reads the renormalized rows
    EXPECT_TRUE(emb->weight.is_leaf());
    // The gradient is the plain lookup's: the scaling happened outside autograd.
    y.sum().backward();
    EXPECT_EQ(emb->weight.grad().sum({1}).to_vector<double>(), (std::vector<double>{4, 4, 0, 0, 8, 0}));
    // embedding_bag renormalizes the same rows, bag by bag or not.
    const Tensor table = start.clone();
    F::embedding_bag(tensor(ids), table, tensor(std::vector<int64_t>{0, 3}),
                     {.mode = F::BagMode::Sum, .max_norm = 1.5, .norm_type = p});
    expect_renormed(table);
  }
  EXPECT_EQ(nn::Embedding(6, 4, {.max_norm = 1.5})->str(), "Embedding(6, 4, max_norm=1.5)");
  EXPECT_EQ(nn::EmbeddingBag(6, 4, {.max_norm = 2, .norm_type = 1})->str(),
            "EmbeddingBag(6, 4, max_norm=2, norm_type=1, mode='mean')");
  expect_error([&] { F::embedding(tensor(std::vector<int64_t>{0}), randn64({2, 2}, 191), std::nullopt, -1.0); },
               {"embedding", "max_norm must be non-negative"});
}

TEST(Bilinear, MatchesTheTripleSumAndGradchecks) {
  const Tensor x1 = randn64({2, 3, 4}, 730), x2 = randn64({2, 3, 5}, 731), w = randn64({6, 4, 5}, 732),
               b = randn64({6}, 733);
  const Tensor y = F::bilinear(x1, x2, w, b);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 6}));
  const std::vector<double> a = x1.to_vector<double>(), c = x2.to_vector<double>(), wv = w.to_vector<double>(),
                            bv = b.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t m = 0; m < 6; ++m)
    for (int64_t o = 0; o < 6; ++o) {
      double want = bv[static_cast<size_t>(o)];
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j)
          want += a[static_cast<size_t>(m * 4 + i)] * wv[static_cast<size_t>((o * 4 + i) * 5 + j)] *
                  c[static_cast<size_t>(m * 5 + j)];
      EXPECT_NEAR(yv[static_cast<size_t>(m * 6 + o)], want, 1e-12);
    }
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return F::bilinear(t[0], t[1], t[2], t[3]); },
                        {x1.detach().requires_grad_(), x2.detach().requires_grad_(), w.detach().requires_grad_(),
                         b.detach().requires_grad_()})
                  .ok);
  auto layer = nn::Bilinear(4, 5, 6);
  EXPECT_EQ(layer->weight.sizes(), (Shape{6, 4, 5}));
  EXPECT_LE(layer->weight.abs().max().item<double>(), 0.5);  // 1 / sqrt(4)
  EXPECT_EQ(layer(x1.to(kFloat32), x2.to(kFloat32)).sizes(), (Shape{2, 3, 6}));
  EXPECT_EQ(layer->str(), "Bilinear(in1_features=4, in2_features=5, out_features=6, bias=true)");
  expect_error([&] { F::bilinear(x1, x2.narrow(1, 0, 2), w, b); }, {"bilinear", "(2, 3, 4)", "(2, 2, 5)"});
}

}  // namespace
}  // namespace kiln
