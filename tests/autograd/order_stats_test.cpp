// kthvalue, median, nanmedian, quantile, nanquantile, nansum and nanmean against references computed here with
// std::sort in double (numpy's definition of each interpolation), NaN handling as PyTorch's, index results
// checked to point at their values, and gradients against central differences.
#include <algorithm>
#include <cmath>
#include <limits>

#include "grad_test_util.h"
#include "kiln/autograd/linalg.h"

namespace kiln {
namespace {
// A namespace of its own: the unity build compiles this file together with others that have helpers of these
// names.
namespace order_stats {

using namespace test;
using In = const TensorVec&;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> vals(const Tensor& t) { return ops::contiguous(t.detach().to(kFloat64)).to_vector<double>(); }

// numpy's quantile of a sorted line, by interpolation.
double reference_quantile(std::vector<double> line, double q, const std::string& how) {
  std::sort(line.begin(), line.end());
  const double pos = q * static_cast<double>(line.size() - 1);
  const double lo = std::floor(pos), hi = std::ceil(pos);
  const double a = line[static_cast<size_t>(lo)], b = line[static_cast<size_t>(hi)];
  if (how == "lower") return a;
  if (how == "higher") return b;
  if (how == "midpoint") return a + (b - a) * 0.5;
  if (how == "nearest") return line[static_cast<size_t>(std::nearbyint(pos))];  // halves to even
  return a + (b - a) * (pos - lo);
}

TEST(Quantile, EveryInterpolationMatchesTheReferenceAlongEachDim) {
  seed_from("quantile");
  const Tensor x = leaf({4, 7, 5}).detach();
  const std::vector<double> all = vals(x);
  const std::vector<double> qs{0.0, 0.1, 0.25, 0.5, 0.7, 0.9, 1.0};
  for (const char* how : {"linear", "lower", "higher", "midpoint", "nearest"}) {
    // Over all elements, q a number and a tensor of them.
    for (double q : qs)
      EXPECT_NEAR(quantile(x, q, std::nullopt, false, how).item<double>(), reference_quantile(all, q, how), 1e-15)
          << how << " q " << q;
    // Along dim 1 with a tensor of q: the q dim first, (7, 4, 5).
    const Tensor out = quantile(x, tensor(qs, {7}, kFloat64), 1, false, how);
    ASSERT_EQ(out.sizes(), (Shape{7, 4, 5})) << how;
    const std::vector<double> got = vals(out);
    for (int64_t qi = 0; qi < 7; ++qi)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t k = 0; k < 5; ++k) {
          std::vector<double> line;
          for (int64_t j = 0; j < 7; ++j) line.push_back(all[static_cast<size_t>((i * 7 + j) * 5 + k)]);
          EXPECT_NEAR(got[static_cast<size_t>((qi * 4 + i) * 5 + k)], reference_quantile(line, qs[qi], how), 1e-15)
              << how << " q " << qs[qi] << " at (" << i << ", " << k << ")";
        }
  }
  EXPECT_EQ(quantile(x, 0.5, 2, true).sizes(), (Shape{4, 7, 1}));
  EXPECT_EQ(quantile(x, tensor(qs, {7}, kFloat64), 2, true).sizes(), (Shape{7, 4, 7, 1}));
  EXPECT_EQ(quantile(x, 0.5, std::nullopt, true).sizes(), (Shape{1, 1, 1}));
  EXPECT_EQ(quantile(x, tensor(qs, {7}, kFloat64), std::nullopt, true).sizes(), (Shape{7, 1, 1, 1}));
}

TEST(Quantile, NaNsPropagateOrAreSkipped) {
  // Line 0 has a NaN, line 1 none, line 2 only NaNs.
  const Tensor x = tensor(std::vector<double>{3, kNaN, 1, 2, 4, 1, 2, 3, kNaN, kNaN, kNaN, kNaN}, {3, 4}, kFloat64);
  const std::vector<double> q = vals(quantile(x, 0.5, 1)), nq = vals(nanquantile(x, 0.5, 1));
  EXPECT_TRUE(std::isnan(q[0]));
  EXPECT_EQ(q[1], 2.5);
  EXPECT_TRUE(std::isnan(q[2]));
  EXPECT_EQ(nq[0], 2.0);  // the median of 3, 1, 2
  EXPECT_EQ(nq[1], 2.5);
  EXPECT_TRUE(std::isnan(nq[2]));
  EXPECT_EQ(vals(nanquantile(x, 1.0, 1))[0], 3.0);
}

TEST(Median, IsTheLowerMiddleWithItsIndex) {
  // Even count: the lower of the two middle values (PyTorch's rule, not their mean).
  const Tensor x = tensor(std::vector<double>{5, 1, 4, 2, 9, 9, 7, 3}, {2, 4}, kFloat64);
  auto [values, indices] = median(x, 1);
  EXPECT_EQ(vals(values), (std::vector<double>{2, 7}));
  EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(median(x).item<double>(), 4.0);  // sorted 1 2 3 4 5 7 9 9: the fourth
  EXPECT_EQ(median(tensor(std::vector<int64_t>{3, 1, 2}, {3}, kInt64)).item<int64_t>(), 2);
  // Each index points at its value, along any dim, keepdim or not.
  seed_from("median");
  const Tensor r = leaf({3, 6, 5}).detach();
  for (int64_t d = 0; d < 3; ++d) {
    auto [v, i] = median(r, d, true);
    EXPECT_EQ(vals(ops::gather(r, d, i)), vals(v)) << d;
    auto [kv, ki] = kthvalue(r, 2, d);
    EXPECT_EQ(vals(ops::gather(r, d, ki.unsqueeze(d))), vals(kv)) << d;
  }
}

TEST(Median, NaNsWinOrAreSkipped) {
  const Tensor x = tensor(std::vector<double>{1, kNaN, 3, kNaN, 2, 5, 7, 6, kNaN, kNaN, kNaN, kNaN}, {3, 4}, kFloat64);
  auto [v, i] = median(x, 1);
  const std::vector<double> mv = vals(v);
  EXPECT_TRUE(std::isnan(mv[0]));
  EXPECT_EQ(i.to_vector<int64_t>()[0], 1);  // the first NaN
  EXPECT_EQ(mv[1], 5.0);
  auto [nv, ni] = nanmedian(x, 1);
  const std::vector<double> nmv = vals(nv);
  EXPECT_EQ(nmv[0], 1.0);  // of 1 and 3, the lower
  EXPECT_EQ(ni.to_vector<int64_t>()[0], 0);
  EXPECT_EQ(nmv[1], 5.0);
  EXPECT_TRUE(std::isnan(nmv[2]));
  EXPECT_TRUE(std::isnan(median(x).item<double>()));
  EXPECT_EQ(nanmedian(x).item<double>(), 3.0);  // of 1 3 2 5 7 6
}

// PyTorch's edge cases: an empty float input has median NaN; a 0-dim input is its own median, kthvalue and
// quantile along dim 0 or -1 (index 0).
TEST(Median, EmptyAndZeroDimInputs) {
  EXPECT_TRUE(std::isnan(median(empty({0}, kFloat64)).item<double>()));
  EXPECT_TRUE(std::isnan(nanmedian(empty({3, 0}, kFloat32)).item<double>()));
  const Tensor s = full({}, Scalar(2.5), kFloat64);
  for (int64_t dim : {0, -1}) {
    auto [v, i] = median(s, dim);
    EXPECT_EQ(v.dim(), 0);
    EXPECT_EQ(v.item<double>(), 2.5);
    EXPECT_EQ(i.item<int64_t>(), 0);
    EXPECT_EQ(nanmedian(s, dim, true).first.dim(), 0);
    EXPECT_EQ(kthvalue(s, 1, dim).first.item<double>(), 2.5);
    EXPECT_EQ(quantile(s, 0.3, dim).item<double>(), 2.5);
    EXPECT_EQ(quantile(s, 0.3, dim).dim(), 0);
  }
}

// "nearest" rounds a position halfway between two elements to the even one: 2.5 -> 2 and 1.5 -> 2.
TEST(Quantile, NearestRoundsHalvesToEven) {
  const Tensor x = tensor(std::vector<double>{10, 11, 12, 13, 14, 15}, {6}, kFloat64);
  EXPECT_EQ(quantile(x, 0.5, std::nullopt, false, "nearest").item<double>(), 12.0);  // position 2.5
  EXPECT_EQ(quantile(x, 0.3, std::nullopt, false, "nearest").item<double>(), 12.0);  // position 1.5
  EXPECT_EQ(quantile(x, 0.7, std::nullopt, false, "nearest").item<double>(), 14.0);  // position 3.5
}

// nanmedian's position in a line of more than 2^24 valid elements: exact (it was halved in float32).
TEST(Median, LongLinesPickTheExactMiddle) {
  const int64_t n = (int64_t{1} << 24) + 4;  // valid - 1 = 2^24 + 3: (2^24 + 3) / 2 floors to 2^23 + 1
  const Tensor x = arange(0, n, 1, kFloat32);
  EXPECT_EQ(nanmedian(x).item<double>(), static_cast<double>((n - 1) / 2));
}

TEST(Kthvalue, MatchesNthElement) {
  seed_from("kthvalue");
  const Tensor x = leaf({9}).detach();
  std::vector<double> v = vals(x);
  std::sort(v.begin(), v.end());
  for (int64_t k = 1; k <= 9; ++k) EXPECT_EQ(kthvalue(x, k).first.item<double>(), v[static_cast<size_t>(k - 1)]);
}

TEST(NanReductions, SkipNaNs) {
  const Tensor x = tensor(std::vector<double>{1, kNaN, 3, kNaN, kNaN, kNaN}, {2, 3}, kFloat64);
  EXPECT_EQ(vals(nansum(x, {1})), (std::vector<double>{4, 0}));
  const std::vector<double> m = vals(nanmean(x, {1}));
  EXPECT_EQ(m[0], 2.0);
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_EQ(nanmean(x).item<double>(), 2.0);
  Tensor g = x.clone().requires_grad_();
  nanmean(g).backward();
  const std::vector<double> grad = vals(g.grad());
  EXPECT_EQ(grad, (std::vector<double>{0.5, 0, 0.5, 0, 0, 0}));
}

TEST(OrderStats, BadInputIsNamed) {
  const Tensor x = tensor(std::vector<double>{1, 2, 3}, {3}, kFloat64);
  EXPECT_NE(error_of([&] { quantile(x, 1.5); }).find("quantile: q = 1.5; expected every q in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of([&] { quantile(x, 0.5, 0, false, "cubic"); }).find("interpolation \"cubic\""), std::string::npos);
  EXPECT_NE(error_of([&] { quantile(tensor(std::vector<int64_t>{1}, {1}, kInt64), 0.5); }).find("expected a floating"),
            std::string::npos);
  EXPECT_NE(error_of([&] { kthvalue(x, 4); }).find("kthvalue: k = 4 for a dim of size 3"), std::string::npos);
  EXPECT_NE(error_of([&] { median(empty({0}, kInt64)); }).find("median: the int64 input of shape (0) is empty"),
            std::string::npos);
  EXPECT_NE(error_of([&] { median(empty({2, 0}, kFloat64), 1); }).find("is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { quantile(empty({2, 0}, kFloat64), 0.5); }).find("quantile: the input of shape (2, 0) is empty"),
            std::string::npos);
  EXPECT_NE(error_of([&] { median(Tensor()); }).find("median: the input is undefined"), std::string::npos);
  EXPECT_NE(error_of([&] { median(tensor(std::vector<double>{1}, {}, kFloat64).reshape({}), 1); }).find("median"),
            std::string::npos);
}

// The Tensor methods against values worked out by hand (LibTorch spells both the methods and the functions).
TEST(OrderStats, TensorMethodsGiveHandWorkedValues) {
  auto near = [](const Tensor& got, const std::vector<double>& want, const char* what) {
    const std::vector<double> g = vals(got);
    ASSERT_EQ(g.size(), want.size()) << what;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      else EXPECT_NEAR(g[i], want[i], 1e-12) << what << " element " << i;
    }
  };
  // Rows sorted: 1 2 4 5 and 3 7 9 9; all eight: 1 2 3 4 5 7 9 9.
  const Tensor y = tensor(std::vector<double>{5, 1, 4, 2, 9, 9, 7, 3}, {2, 4}, kFloat64);
  near(y.median(), {4}, "median of all (the lower middle)");
  auto [m, where] = y.median(1);
  near(m, {2, 7}, "median of rows");
  EXPECT_EQ(where.to_vector<int64_t>(), (std::vector<int64_t>{3, 2}));
  near(y.kthvalue(3, 1).first, {4, 9}, "kthvalue 3 of rows");
  near(y.quantile(0.5, 1), {3, 8}, "linear quantile 0.5 of rows (position 1.5)");
  near(y.quantile(0.5, 1, false, "higher"), {4, 9}, "higher quantile 0.5 of rows");
  const Tensor z = tensor(std::vector<double>{1, kNaN, 3, kNaN, kNaN, kNaN}, {2, 3}, kFloat64);
  near(z.nanmedian(1, true).first, {1, kNaN}, "nanmedian of rows");
  EXPECT_EQ(z.nanmedian(1, true).first.sizes(), (Shape{2, 1}));
  near(z.nanquantile(0.5), {2}, "nanquantile of all");
  near(z.nansum({1}), {4, 0}, "nansum of rows");
  near(z.nanmean(), {2}, "nanmean of all");
  const Tensor a = tensor(std::vector<double>{2, 1, 1, 3}, {2, 2}, kFloat64);
  near(a.det(), {5}, "det");
  near(a.inverse(), {0.6, -0.2, -0.2, 0.4}, "inverse");
  near(a.matrix_power(3), {15, 20, 20, 35}, "matrix_power 3");
  // Rank 1, u v^T with u = v = (1, 2): the pseudo-inverse is v u^T / (|u|^2 |v|^2).
  near(tensor(std::vector<double>{1, 2, 2, 4}, {2, 2}, kFloat64).pinverse(), {0.04, 0.08, 0.08, 0.16}, "pinverse");
  // torch's default cutoff is 1e-15 of the largest singular value: 1e-10 is kept (inverted), 1e-16 is not.
  const std::vector<double> kept = vals(tensor(std::vector<double>{1, 0, 0, 1e-10}, {2, 2}, kFloat64).pinverse());
  EXPECT_NEAR(kept[3], 1e10, 1e-2);
  near(tensor(std::vector<double>{1, 0, 0, 1e-16}, {2, 2}, kFloat64).pinverse(), {1, 0, 0, 0}, "pinverse cutoff");
}

// Gradients: each picked value's to its element; quantile's split between the neighbours by weight. Inputs are
// random, so no ties.
std::vector<GradCase> order_cases() {
  return {
      single("median_dim", leaves({{3, 5}}), [](In in) { return median(in[0], 1).first; }),
      single("median_all", leaves({{4, 3}}), [](In in) { return median(in[0]); }),
      single("kthvalue", leaves({{2, 6}}), [](In in) { return kthvalue(in[0], 4, 1, true).first; }),
      single("quantile_linear", leaves({{3, 6}}),
             [](In in) { return quantile(in[0], tensor(std::vector<double>{0.15, 0.5, 0.9}, {3}, kFloat64), 1); }),
      single("quantile_midpoint_all", leaves({{10}}), [](In in) { return quantile(in[0], 0.37, std::nullopt, false, "midpoint"); }),
      single("nanmean", leaves({{3, 4}}), [](In in) { return nanmean(in[0], {0}); }),
  };
}

INSTANTIATE_TEST_SUITE_P(OrderStats, OpGrad, ::testing::ValuesIn(order_cases()), case_name);

}  // namespace order_stats
}  // namespace
}  // namespace kiln
