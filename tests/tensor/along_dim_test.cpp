// cumsum, sort, argsort and topk along each dim, for every dtype and memory layout: cumsum against float64 running
// sums computed here; sort by the properties that define a stable sort (each line in order, a permutation of its
// positions, the values those positions hold, equal values in their original order), with ties, NaN and
// signed zeros drawn on purpose; topk against sort and by hand.
#include <limits>

#include "test_util.h"

namespace kiln {
namespace {

using test::Layout;

const std::vector<Shape> kShapes = {{7}, {3, 5}, {2, 3, 4}, {1, 1}, {4, 1, 3}, {0, 3}, {300, 2}, {2, 300}, {7, 300}};

// Element i of x (row-major) and the line structure along dim: line l, position p -> flat index.
struct LineIndex {
  int64_t n = 1, inner = 1;
  int64_t at(int64_t line, int64_t p) const { return (line / inner) * n * inner + line % inner + p * inner; }
};
LineIndex line_index(const Shape& shape, int64_t dim) {
  LineIndex g;
  g.n = shape[static_cast<size_t>(dim)];
  for (size_t k = static_cast<size_t>(dim) + 1; k < shape.size(); ++k) g.inner *= shape[k];
  return g;
}

TEST(Cumsum, MatchesFloat64RunningSumsAlongEveryDim) {
  std::mt19937 rng(1);
  for (DType d : test::kFloatDTypes) {
    for (Layout layout : test::kLayouts) {
      for (const Shape& shape : kShapes) {
        for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
          Tensor x = test::random_tensor(shape, d, rng, layout);
          const std::vector<double> v = test::values(x);
          std::vector<double> want(v.size());
          const LineIndex g = line_index(shape, dim);
          const int64_t lines = g.n == 0 ? 0 : static_cast<int64_t>(v.size()) / g.n;
          for (int64_t l = 0; l < lines; ++l) {
            double acc = 0;
            for (int64_t p = 0; p < g.n; ++p) want[g.at(l, p)] = acc += v[g.at(l, p)];
          }
          Tensor y = cumsum(x, dim - static_cast<int64_t>(shape.size()));  // negative dims too
          EXPECT_EQ(y.dtype(), d);
          const double tol = test::tolerance(d);
          test::expect_tensor_near(y, want, shape, tol, tol,
                                   std::string(dtype_name(d)) + " " + test::layout_name(layout) + " " +
                                       shape_str(shape) + " dim " + std::to_string(dim));
        }
      }
    }
  }
}

TEST(Cumsum, IntegersSumInInt64UnlessADtypeIsAsked) {
  Tensor i = tensor(std::vector<int32_t>{2147483647, 1, -5});
  EXPECT_EQ(cumsum(i, 0).dtype(), kInt64);
  EXPECT_EQ(test::values(cumsum(i, 0)), (std::vector<double>{2147483647.0, 2147483648.0, 2147483643.0}));
  EXPECT_EQ(test::values(cumsum(tensor(std::vector<bool>{true, false, true}), 0)), (std::vector<double>{1, 1, 2}));
  Tensor u = tensor(std::vector<uint8_t>{200, 100});
  EXPECT_EQ(cumsum(u, 0).dtype(), kInt64);
  EXPECT_EQ(test::values(cumsum(u, 0)), (std::vector<double>{200, 300}));
  Tensor f = cumsum(i, 0, kFloat64);
  EXPECT_EQ(f.dtype(), kFloat64);
  EXPECT_EQ(test::values(cumsum(tensor({1.5}).reshape({}), 0)), (std::vector<double>{1.5}));  // 0-dim
  test::expect_error([&] { (void)cumsum(i, 1); }, {"cumsum", "dim"});
  test::expect_error([&] { (void)cumsum(i, 0, kBool); }, {"cumsum", "bool"});
}

// Checks that (values, indices) is x sorted stably along dim, ascending or not, NaN above every number.
void expect_stable_sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices,
                        const std::string& what) {
  ASSERT_EQ(values.sizes(), x.sizes()) << what;
  ASSERT_EQ(indices.sizes(), x.sizes()) << what;
  ASSERT_EQ(values.dtype(), x.dtype()) << what;
  ASSERT_EQ(indices.dtype(), kInt64) << what;
  const std::vector<double> xv = test::values(x), vv = test::values(values), iv = test::values(indices);
  const LineIndex g = line_index(x.sizes(), dim);
  const int64_t lines = g.n == 0 ? 0 : x.numel() / g.n;
  // rank: NaN above +inf; -0.0 and 0.0 equal.
  const auto rank_less = [&](double a, double b) { return std::isnan(a) ? false : (std::isnan(b) ? true : a < b); };
  const auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  int bad = 0;
  for (int64_t l = 0; l < lines && bad < 5; ++l) {
    std::vector<bool> seen(static_cast<size_t>(g.n), false);
    for (int64_t p = 0; p < g.n; ++p) {
      const double v = vv[g.at(l, p)];
      const auto from = static_cast<int64_t>(iv[g.at(l, p)]);
      bool ok = from >= 0 && from < g.n && !seen[static_cast<size_t>(from)];
      if (ok) seen[static_cast<size_t>(from)] = true;
      // The value is the one at that position, to the bit (the sign of a zero included).
      ok = ok && same(v, xv[g.at(l, from)]) && std::signbit(v) == std::signbit(xv[g.at(l, from)]);
      if (ok && p > 0) {
        const double prev = vv[g.at(l, p - 1)];
        const bool out_of_order = descending ? rank_less(prev, v) : rank_less(v, prev);
        const bool tie = !rank_less(prev, v) && !rank_less(v, prev);
        ok = !out_of_order && (!tie || iv[g.at(l, p - 1)] < from);  // ties keep their order
      }
      if (!ok) ADD_FAILURE() << what << ": line " << l << ", position " << p << " holds " << v << " from " << from;
      bad += !ok;
    }
  }
}

// Inputs for sort and topk: few distinct values, so that ties are common (floats also get NaN, -0.0, 0.0 and
// infinities), in dtype d and laid out as `layout` says (the values are drawn contiguous, then copied into a
// tensor of that layout).
Tensor tie_heavy(const Shape& shape, DType d, Layout layout, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<double> v = test::values(floor(test::random_tensor(shape, kFloat64, rng, Layout::Contiguous, 0, 4)));
  if (is_floating(d)) {
    const std::vector<double> special = {NAN, -0.0, 0.0, INFINITY, -INFINITY, -1.5};
    for (double& e : v)
      if (pick(rng) < 3) e = special[static_cast<size_t>(pick(rng)) % special.size()];
  }
  Tensor laid = test::random_tensor(shape, d, rng, layout);
  laid.copy_(test::make_tensor(v, shape, kFloat64).to(d));
  return laid;
}

TEST(Sort, StableAscendingAndDescendingForEveryDtypeLayoutAndDim) {
  std::mt19937 rng(2);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
    for (Layout layout : test::kLayouts) {
      for (const Shape& shape : kShapes) {
        const Tensor x = tie_heavy(shape, d, layout, rng);
        for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
          for (bool descending : {false, true}) {
            auto [values, indices] = sort(x, dim, descending);
            expect_stable_sort(x, dim, descending, values, indices,
                               std::string(dtype_name(d)) + " " + test::layout_name(layout) + " " + shape_str(shape) +
                                   " dim " + std::to_string(dim) + (descending ? " descending" : ""));
            EXPECT_TRUE(equal(argsort(x, dim, descending), indices));
          }
        }
      }
    }
  }
}

TEST(Sort, ByHand) {
  Tensor x = tensor({3.0, NAN, -0.0, 1.0, 0.0, -INFINITY, 1.0});
  auto [v, i] = sort(x);
  EXPECT_EQ(test::values(i), (std::vector<double>{5, 2, 4, 3, 6, 0, 1}));
  auto [vd, id] = sort(x, 0, /*descending=*/true);
  EXPECT_EQ(test::values(id), (std::vector<double>{1, 0, 3, 6, 2, 4, 5}));
  EXPECT_TRUE(std::isnan(test::values(vd)[0]));
  auto [s, si] = sort(tensor({4.0}).reshape({}));  // 0-dim: itself, at 0
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(test::values(si), (std::vector<double>{0}));
  test::expect_error([&] { (void)sort(x, 1); }, {"sort", "dim"});
}

// Lines long enough for the radix sort (over 256 elements), with values over each type's whole range: both
// signs, magnitudes from subnormal to huge, the extremes, NaN, both zeros, and repeats (stability), laid out
// as a column as well as a row.
TEST(Sort, LongLinesOverTheWholeRangeOfEachType) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> unit(0, 1);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
    for (const Shape& shape : {Shape{5000}, Shape{3, 1000}, Shape{700, 3}}) {
      std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
      const double top = d == kFloat64 ? 300 : 38;  // decimal exponents: past the 16-bit types' range on purpose
      for (size_t i = 0; i < v.size(); ++i) {
        const double sign = unit(rng) < 0.5 ? -1 : 1, u = unit(rng);
        if (i > 0 && u < 0.2) {
          v[i] = v[static_cast<size_t>(rng() % i)];  // a repeat of an earlier value
        } else if (is_floating(d)) {
          const std::vector<double> special = {NAN, -0.0, 0.0, INFINITY, -INFINITY, 5e-324, -1.7e308, 1.4e-45};
          v[i] = u < 0.3 ? special[rng() % special.size()] : sign * std::pow(10.0, (2 * unit(rng) - 1) * top);
        } else if (d == kInt64) {
          v[i] = sign * std::floor(u * 4503599627370496.0);  // |v| < 2^52: exact in the checker's doubles
        } else if (d == kInt32) {
          v[i] = std::floor(-2147483648.0 + u * 4294967295.0);
        } else {
          v[i] = std::floor(u * (d == kBool ? 2 : 256));
        }
      }
      const Tensor x = test::make_tensor(v, shape, kFloat64).to(d);
      if (d == kInt64) {  // the extremes, where the sign bit's flip matters most (exact in the checker's doubles
                          // against the others, which stay below 2^52)
        x.reshape({-1}).narrow(0, 7, 1).fill_(std::numeric_limits<int64_t>::min());
        x.reshape({-1}).narrow(0, 11, 2).fill_(std::numeric_limits<int64_t>::max());
      }
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
        for (bool descending : {false, true}) {
          auto [values, indices] = sort(x, dim, descending);
          expect_stable_sort(x, dim, descending, values, indices,
                             std::string(dtype_name(d)) + " " + shape_str(shape) + " dim " + std::to_string(dim) +
                                 (descending ? " descending" : ""));
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(Topk, IsTheHeadOfTheSortAndChecksK) {
  std::mt19937 rng(3);
  Tensor x = test::random_tensor({6, 40}, kFloat32, rng, Layout::Transposed);
  for (int64_t k : {0, 1, 5, 40}) {
    for (bool largest : {true, false}) {
      auto [v, i] = topk(x, k, 1, largest);
      auto [sv, si] = sort(x, 1, largest);
      EXPECT_TRUE(equal(v, sv.narrow(1, 0, k))) << k << largest;
      EXPECT_TRUE(equal(i, si.narrow(1, 0, k))) << k << largest;
    }
  }
  auto [v, i] = topk(tensor({1.0, 3.0, 2.0, 3.0}), 2);
  EXPECT_EQ(test::values(v), (std::vector<double>{3, 3}));
  EXPECT_EQ(test::values(i), (std::vector<double>{1, 3}));  // ties to the smaller index
  auto [lo, li] = topk(tensor(std::vector<int64_t>{5, -2, 9}), 1, 0, /*largest=*/false);
  EXPECT_EQ(test::values(lo), (std::vector<double>{-2}));
  EXPECT_EQ(test::values(li), (std::vector<double>{1}));
  test::expect_error([&] { (void)topk(x, 41, 1); }, {"topk", "k = 41", "40"});
  test::expect_error([&] { (void)topk(x, -1); }, {"topk", "k = -1"});
}

// The CPU's topk selects and sorts only its k; whatever the ties, NaNs and signed zeros, its values and indices
// are the stable sort's first k.
TEST(Topk, IsTheHeadOfTheStableSortWithTiesAndNansForEveryDtypeLayoutAndDim) {
  std::mt19937 rng(5);
  for (DType d : {kFloat32, kFloat64, kBFloat16, kInt32, kInt64, kUInt8}) {
    for (Layout layout : test::kLayouts) {
      for (const Shape& shape : kShapes) {
        const Tensor x = tie_heavy(shape, d, layout, rng);
        for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
          const int64_t n = x.size(dim);
          for (int64_t k : {int64_t{1}, int64_t{16}, int64_t{17}, n / 2, n - 1, n}) {  // 16: the one-pass path's last
            if (k < 1 || k > n) continue;
            for (bool largest : {true, false}) {
              const std::string what = std::string(dtype_name(d)) + " " + test::layout_name(layout) + " " +
                                       shape_str(shape) + " dim " + std::to_string(dim) + " k " + std::to_string(k) +
                                       (largest ? " largest" : " smallest");
              auto [v, i] = topk(x, k, dim, largest);
              auto [sv, si] = sort(x, dim, largest);
              ASSERT_TRUE(equal(i, si.narrow(dim, 0, k))) << what;
              const std::vector<double> got = test::values(v), want = test::values(sv.narrow(dim, 0, k));
              ASSERT_EQ(got.size(), want.size()) << what;
              for (size_t e = 0; e < got.size(); ++e)
                ASSERT_TRUE(got[e] == want[e] || (std::isnan(got[e]) && std::isnan(want[e]))) << what << " at " << e;
            }
          }
        }
      }
    }
  }
}

TEST(AlongDim, SameResultsOnOneAndTwoThreads) {
  std::mt19937 rng(4);
  Tensor x = test::random_tensor({64, 512}, kFloat32, rng);
  const int saved = get_num_threads();
  set_num_threads(1);
  Tensor c1 = cumsum(x, 1), c0 = cumsum(x, 0);
  auto [v1, i1] = sort(x, 1);
  set_num_threads(2);
  EXPECT_TRUE(equal(cumsum(x, 1), c1));
  EXPECT_TRUE(equal(cumsum(x, 0), c0));
  EXPECT_TRUE(equal(sort(x, 1).second, i1));
  set_num_threads(saved);
}

TEST(TensorMethods, TheNewOpsForwardToTheFreeFunctions) {
  std::mt19937 rng(5);
  Tensor x = test::random_tensor({3, 4}, kFloat64, rng);  // in (-3, 3)
  Tensor y = test::random_tensor({3, 4}, kFloat64, rng).abs() + 0.5;
  Tensor u = x / 3.5;  // inside (-1, 1), for asin and acos
  EXPECT_TRUE(x.tan().equal(tan(x)));
  EXPECT_TRUE(u.asin().equal(asin(u)));
  EXPECT_TRUE(u.acos().equal(acos(u)));
  EXPECT_TRUE(x.atan().equal(atan(x)));
  EXPECT_TRUE(y.log2().equal(log2(y)));
  EXPECT_TRUE(y.log10().equal(log10(y)));
  EXPECT_TRUE(y.reciprocal().equal(reciprocal(y)));
  EXPECT_TRUE(x.floor().equal(floor(x)));
  EXPECT_TRUE(x.ceil().equal(ceil(x)));
  EXPECT_TRUE(x.round().equal(round(x)));
  EXPECT_TRUE(x.trunc().equal(trunc(x)));
  EXPECT_TRUE(x.atan2(y).equal(atan2(x, y)));
  EXPECT_TRUE(x.fmod(y).equal(fmod(x, y)));
  EXPECT_TRUE(x.remainder(y).equal(remainder(x, y)));
  EXPECT_TRUE(x.cumsum(1).equal(cumsum(x, 1)));
  EXPECT_EQ(x.cumsum(0, kFloat32).dtype(), kFloat32);
  EXPECT_TRUE(x.sort(1, true).first.equal(sort(x, 1, true).first));
  EXPECT_TRUE(x.argsort(0).equal(sort(x, 0).second));
  EXPECT_TRUE(x.topk(2).second.equal(topk(x, 2).second));
  EXPECT_TRUE(x.allclose(x + 1e-9));
  EXPECT_FALSE(x.allclose(x + 1e-3));
  EXPECT_FALSE(x.equal(x.t()));  // another shape
}

// The methods LibTorch code calls on tensors (x.softmax(-1), x.gather(1, i), x.max(1), x.std({0}, 0, true)...):
// each gives what its free function gives, with every argument passed through in its place (non-default
// values, so that a swapped or dropped one shows).
TEST(TensorMethods, LibTorchsMethodsGiveTheirFreeFunctionsResults) {
  std::mt19937 rng(6);
  const Tensor x = test::random_tensor({3, 4}, kFloat64, rng);
  const Tensor y = test::random_tensor({3, 4}, kFloat64, rng).abs() + 0.5;
  EXPECT_TRUE(y.log1p().equal(log1p(y)));
  EXPECT_TRUE(x.expm1().equal(expm1(x)));
  EXPECT_TRUE(x.erf().equal(erf(x)));
  EXPECT_TRUE(x.silu().equal(silu(x)));
  EXPECT_TRUE(x.square().equal(x * x));
  EXPECT_TRUE(x.maximum(y).equal(maximum(x, y)));
  EXPECT_TRUE(x.minimum(y).equal(minimum(x, y)));
  const auto [values, indices] = x.max(1, true);
  EXPECT_TRUE(values.equal(max(x, 1, true).first));
  EXPECT_TRUE(indices.equal(max(x, 1, true).second));
  EXPECT_TRUE(x.min(0).second.equal(min(x, 0).second));
  EXPECT_TRUE(y.prod({1}, true).equal(prod(y, {1}, true)));
  EXPECT_TRUE(y.prod().equal(prod(y)));
  EXPECT_TRUE(x.amax({0}).equal(amax(x, {0})));
  EXPECT_TRUE(x.amin({1}, true).equal(amin(x, {1}, true)));
  EXPECT_TRUE(x.var({1}, 0.0, true).equal(var(x, {1}, 0.0, true)));
  EXPECT_TRUE(x.std({0}, 2.0).equal(std(x, {0}, 2.0)));
  EXPECT_TRUE(x.norm(1.0, {1}, true).equal(norm(x, 1.0, {1}, true)));
  EXPECT_TRUE(x.logsumexp({0}, true).equal(logsumexp(x, {0}, true)));
  EXPECT_TRUE(x.softmax(0).equal(softmax(x, 0)));
  EXPECT_TRUE(x.log_softmax(-1).equal(log_softmax(x, -1)));
  const Tensor rows = tensor(std::vector<int64_t>{2, 0, 2});
  const Tensor picks = tensor(std::vector<int64_t>{1, 3, 0, 0, 2, 1}).view({3, 2});
  EXPECT_TRUE(x.index_select(0, rows).equal(index_select(x, 0, rows)));
  EXPECT_TRUE(x.gather(1, picks).equal(gather(x, 1, picks)));
  const Tensor src = test::random_tensor({3, 2}, kFloat64, rng);
  EXPECT_TRUE(x.scatter(1, picks, src).equal(scatter(x, 1, picks, src)));
  EXPECT_TRUE(x.scatter_add(1, picks, src).equal(scatter_add(x, 1, picks, src)));
  const Tensor add_rows = test::random_tensor({3, 4}, kFloat64, rng);
  EXPECT_TRUE(x.index_add(0, rows, add_rows, -0.5).equal(index_add(x, 0, rows, add_rows, -0.5)));
  Tensor a = x.clone(), b = x.clone(), c = x.clone();
  EXPECT_EQ(&a.scatter_(1, picks, src), &a);
  EXPECT_TRUE(a.equal(scatter(x, 1, picks, src)));
  b.scatter_add_(1, picks, src);
  EXPECT_TRUE(b.equal(scatter_add(x, 1, picks, src)));
  c.index_add_(0, rows, add_rows, 2.0);
  EXPECT_TRUE(c.equal(index_add(x, 0, rows, add_rows, 2.0)));
  // In place: the same data as the out-of-place op, through every handle to it.
  Tensor d = y + 1;  // above 1: log > 0, so sqrt has no NaN
  const Tensor alias = d;
  d.log_().sqrt_().neg_().abs_().exp_().tanh_().sigmoid_();
  EXPECT_TRUE(alias.equal((y + 1).log().sqrt().neg().abs().exp().tanh().sigmoid()));
  Tensor e = x.clone();
  e.clamp_(-1.0, 0.5).pow_(2.0);
  EXPECT_TRUE(e.equal(pow(clamp(x, -1.0, 0.5), 2.0)));
  Tensor f = x.clone();
  f.relu_();
  EXPECT_TRUE(f.equal(relu(x)));
  Tensor g = x * 3.7;
  Tensor h = g.clone();
  g.floor_(), h.round_();
  EXPECT_TRUE(g.equal(floor(x * 3.7)));
  EXPECT_TRUE(h.equal(round(x * 3.7)));
  // Shape and layout.
  EXPECT_TRUE(x.view_as(ones({4, 3})).equal(x.view({4, 3})));
  EXPECT_TRUE(x.t().reshape_as(ones({12})).equal(x.t().reshape({12})));
  EXPECT_EQ(x.type_as(ones({1}, kFloat32)).dtype(), kFloat32);
  EXPECT_TRUE(x.repeat({2, 1, 3}).equal(repeat(x, {2, 1, 3})));
  EXPECT_TRUE(x.flip({0, 1}).equal(flip(x, {0, 1})));
  EXPECT_TRUE(x.tril(-1).equal(tril(x, -1)));
  EXPECT_TRUE(x.triu(1).equal(triu(x, 1)));
  const std::vector<Tensor> by_size = x.split(3, 1), by_sizes = x.split({1, 2}, 0), chunks = x.chunk(2, 1);
  ASSERT_EQ(by_size.size(), 2u);
  EXPECT_TRUE(by_size[1].equal(x.narrow(1, 3, 1)));
  ASSERT_EQ(by_sizes.size(), 2u);
  EXPECT_TRUE(by_sizes[1].equal(x.narrow(0, 1, 2)));
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_TRUE(chunks[0].equal(x.narrow(1, 0, 2)));
  const std::vector<Tensor> columns = x.unbind(1);
  ASSERT_EQ(columns.size(), 4u);
  EXPECT_TRUE(columns[2].equal(x.select(1, 2)));
}

}  // namespace
}  // namespace kiln
