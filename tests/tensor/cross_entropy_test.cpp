// The fused cross-entropy kernels (ops::cross_entropy_forward / cross_entropy_backward) against float64
// references computed here from the inputs' stored values: log-sum-exp, loss, row weight and gradient per row,
// in every float dtype, with and without class weights, ignore_index and label smoothing, on wide and narrow
// rows; then the numerical edge cases (NaN, infinities, huge logits, ignored NaN rows) and the errors.
// (The gradient formula itself is checked against central differences in tests/autograd/ops_grad_test.cpp.)
#include <cmath>
#include <cstring>
#include <limits>

#include "test_util.h"

namespace kiln {
namespace {

using test::kNan;
using test::kInf;

struct CeReference {
  std::vector<double> loss, row_weight, lse, grad;
};

// The definitions of ops/cross_entropy.h in float64; g is the incoming gradient per row.
CeReference reference(const Tensor& logits, const std::vector<int64_t>& target, const std::vector<double>& w,
                    const CrossEntropyParams& p, const std::vector<double>& g) {
  const int64_t n = logits.size(0), c = logits.size(1);
  std::vector<double> z = test::values(logits);
  CeReference r;
  double total = 0;
  for (int64_t k = 0; k < c; ++k) total += w.empty() ? 1.0 : w[k];
  const double e = p.label_smoothing;
  for (int64_t i = 0; i < n; ++i) {
    const double* row = z.data() + i * c;
    double mx = -kInf;
    bool nan = false;
    for (int64_t k = 0; k < c; ++k) {
      nan |= std::isnan(row[k]);
      mx = std::max(mx, row[k]);
    }
    double s = 0;
    for (int64_t k = 0; k < c; ++k) s += std::exp(row[k] - mx);
    const double lse = (nan || !std::isfinite(mx)) ? kNan : mx + std::log(s);
    r.lse.push_back(lse);
    const int64_t t = target[i];
    if (t == p.ignore_index) {
      r.loss.push_back(0);
      r.row_weight.push_back(0);
      for (int64_t k = 0; k < c; ++k) r.grad.push_back(0);
      continue;
    }
    auto wk = [&](int64_t k) { return w.empty() ? 1.0 : w[k]; };
    double smooth = 0;
    for (int64_t k = 0; k < c; ++k) smooth += wk(k) * (row[k] - lse);
    r.loss.push_back(-(1 - e) * wk(t) * (row[t] - lse) - (e > 0 ? e / c * smooth : 0.0));
    r.row_weight.push_back(wk(t));
    for (int64_t k = 0; k < c; ++k) {
      const double prob = std::exp(row[k] - lse);
      r.grad.push_back(g[i] * ((1 - e) * wk(t) * (prob - (k == t ? 1.0 : 0.0)) + e / c * (total * prob - wk(k))));
    }
  }
  return r;
}

struct CeCase {
  int64_t n, c;
  bool weighted;
  CrossEntropyParams p;
};

void check_case(const CeCase& cs, DType dtype, std::mt19937& rng) {
  const std::string what = "cross_entropy (" + std::to_string(cs.n) + ", " + std::to_string(cs.c) + ") " +
                           std::string(dtype_name(dtype)) + (cs.weighted ? " weighted" : "") + " ignore " +
                           std::to_string(cs.p.ignore_index) + " smoothing " + std::to_string(cs.p.label_smoothing);
  Tensor z = test::random_tensor({cs.n, cs.c}, dtype, rng, test::Layout::Contiguous, -4, 4);
  std::uniform_int_distribution<int64_t> cls(0, cs.c - 1);
  std::vector<int64_t> t(static_cast<size_t>(cs.n));
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % 5 == 3 ? cs.p.ignore_index : cls(rng);
  if (cs.p.ignore_index >= 0 && cs.p.ignore_index < cs.c && cs.n > 0) t[0] = cs.p.ignore_index;
  std::vector<double> w;
  if (cs.weighted) w = test::random_values(cs.c, dtype, rng, 0.1, 2.0);
  Tensor wt = cs.weighted ? test::make_tensor(w, {cs.c}, dtype) : Tensor();
  if (cs.weighted) w = test::values(wt);  // as stored
  std::vector<double> g = test::random_values(cs.n, dtype, rng, -2, 2);
  Tensor gt = test::make_tensor(g, {cs.n}, dtype);
  g = test::values(gt);
  Tensor target = tensor(t, {cs.n});
  CeReference ref = reference(z, t, w, cs.p, g);

  ops::CrossEntropyForward f = ops::cross_entropy_forward(z, target, wt, cs.p);
  const double tol = test::tolerance(dtype);
  EXPECT_EQ(f.loss.dtype(), dtype);
  EXPECT_EQ(f.stats.dtype(), dtype == kFloat64 ? kFloat64 : kFloat32);
  // The loss is a difference of terms the size of the logits: an absolute error of a few units of them.
  test::expect_tensor_near(f.loss, ref.loss, {cs.n}, tol, 8 * tol, what + ": loss");
  test::expect_tensor_near(f.row_weight, ref.row_weight, {cs.n}, what + ": row weight");
  ASSERT_EQ(f.stats.sizes(), (Shape{cs.n, 2})) << what;
  Tensor lse = f.stats.select(1, 0).to(kFloat64) + f.stats.select(1, 1).to(kFloat64);
  test::expect_tensor_near(lse, ref.lse, {cs.n}, dtype == kFloat64 ? 1e-12 : 1e-5, 1e-5, what + ": lse");
  Tensor grad = ops::cross_entropy_backward(gt, z, f.stats, target, wt, cs.p);
  test::expect_tensor_near(grad, ref.grad, {cs.n, cs.c}, tol, 2 * tol, what + ": gradient");
}

TEST(CrossEntropyKernel, MatchesFloat64Reference) {
  std::mt19937 rng(5);
  const std::vector<CeCase> cases = {
      {0, 5, false, {}},
      {1, 1, false, {}},
      {7, 10, false, {}},
      {7, 10, true, {}},
      {9, 10, false, {.ignore_index = 3}},
      {9, 10, true, {.ignore_index = 3, .label_smoothing = 0.1}},
      {6, 10, false, {.label_smoothing = 1.0}},
      {33, 1000, true, {.label_smoothing = 0.05}},
      {3, 2000, false, {}},
      {2, 3000, true, {.ignore_index = -1, .label_smoothing = 0.2}},
  };
  for (DType d : test::kFloatDTypes)
    for (const CeCase& c : cases) check_case(c, d, rng);
}

// The kernel's rows are independent and each sums in one order: the same bits on any number of threads.
TEST(CrossEntropyKernel, SameBitsOnAnyThreadCount) {
  std::mt19937 rng(6);
  Tensor z = test::random_tensor({300, 257}, kFloat32, rng);
  Tensor t = randint(0, 257, {300}, kInt64);
  const int threads = get_num_threads();
  set_num_threads(1);
  ops::CrossEntropyForward one = ops::cross_entropy_forward(z, t, {}, {.label_smoothing = 0.1});
  Tensor g1 = ops::cross_entropy_backward(ones({300}), z, one.stats, t, {}, {.label_smoothing = 0.1});
  set_num_threads(std::max(2, threads));
  ops::CrossEntropyForward many = ops::cross_entropy_forward(z, t, {}, {.label_smoothing = 0.1});
  Tensor g2 = ops::cross_entropy_backward(ones({300}), z, many.stats, t, {}, {.label_smoothing = 0.1});
  set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one.loss.raw_data_ptr(), many.loss.raw_data_ptr(), one.loss.nbytes()), 0);
  EXPECT_EQ(std::memcmp(g1.raw_data_ptr(), g2.raw_data_ptr(), g1.nbytes()), 0);
}

TEST(CrossEntropyKernel, EdgeCases) {
  // Row 0: a NaN; row 1: +inf; row 2: all -inf; row 3: huge logits (exp would overflow without the shift);
  // row 4: NaN but ignored (PyTorch skips ignored rows: loss and gradient 0); row 5: one -inf logit, not the
  // target.
  Tensor z = tensor(std::vector<double>{1.0, kNan, 2.0, 1.0, kInf, 2.0, -kInf, -kInf, -kInf, 1e4, 1e4 + 1, 1e4 - 3, kNan, 0.0, 1.0,
                     -kInf, 0.5, 1.5},
                    {6, 3})
                 .to(kFloat64);
  Tensor t = tensor(std::vector<int64_t>{0, 1, 2, 1, -100, 2}, {6});
  ops::CrossEntropyForward f = ops::cross_entropy_forward(z, t, {}, {});
  std::vector<double> loss = f.loss.to_vector<double>();
  EXPECT_TRUE(std::isnan(loss[0]));
  EXPECT_TRUE(std::isnan(loss[1]));
  EXPECT_TRUE(std::isnan(loss[2]));
  const double lse3 = 1e4 + 1 + std::log(std::exp(-1.0) + 1 + std::exp(-4.0));
  EXPECT_NEAR(loss[3], lse3 - (1e4 + 1), 1e-9);
  EXPECT_EQ(loss[4], 0.0);
  const double lse5 = std::log(std::exp(0.5) + std::exp(1.5));
  EXPECT_NEAR(loss[5], lse5 - 1.5, 1e-12);
  Tensor g = ops::cross_entropy_backward(ones({6}, kFloat64), z, f.stats, t, {}, {});
  std::vector<double> gv = g.to_vector<double>();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(gv[4 * 3 + k], 0.0) << "ignored NaN row";
  EXPECT_EQ(gv[5 * 3 + 0], 0.0);  // exp(-inf - lse) = 0
  // With smoothing, the -inf logit's log-probability enters the loss: infinite, as in PyTorch.
  ops::CrossEntropyForward s = ops::cross_entropy_forward(z, t, {}, {.label_smoothing = 0.1});
  EXPECT_EQ(s.loss.to_vector<double>()[5], kInf);
}

// Logits near 1e4 in float32: the loss and gradient keep float32's digits, because the kernels subtract the
// row's max before the log of the sum (a log-sum-exp rounded to float near 1e4 is off by 5e-4, and
// exp(z - lse) carries that into every probability).
TEST(CrossEntropyKernel, LargeLogitsKeepTheirDigits) {
  std::mt19937 rng(12);
  Tensor z = test::random_tensor({16, 50}, kFloat32, rng, test::Layout::Contiguous, 1e4 - 4, 1e4 + 4);
  std::vector<int64_t> tv(16);
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = static_cast<int64_t>(i * 3 % 50);
  std::vector<double> g(16, 1.0);
  const CrossEntropyParams p{.label_smoothing = 0.1};
  CeReference ref = reference(z, tv, {}, p, g);
  Tensor t = tensor(tv, {16});
  ops::CrossEntropyForward f = ops::cross_entropy_forward(z, t, {}, p);
  test::expect_tensor_near(f.loss, ref.loss, {16}, 1e-5, 1e-5, "loss near 1e4");
  test::expect_tensor_near(ops::cross_entropy_backward(ones({16}), z, f.stats, t, {}, p), ref.grad, {16, 50}, 1e-5,
                           1e-6, "gradient near 1e4");
}

TEST(CrossEntropyKernel, Errors) {
  Tensor z = randn({2, 3});
  test::expect_error([&] { ops::cross_entropy_forward(z, tensor(std::vector<int64_t>{0, 3}, {2}), {}, {}); },
                     {"cross_entropy", "target 3", "3 classes", "0..2", "ignore_index -100"});
  test::expect_error([&] { ops::cross_entropy_forward(z, tensor(std::vector<int64_t>{-1, 0}, {2}), {}, {}); },
                     {"cross_entropy", "target -1"});
  test::expect_error([&] { ops::cross_entropy_forward(z, tensor(std::vector<int64_t>{0, 1, 2}, {3}), {}, {}); },
                     {"cross_entropy", "(2, 3)", "(2)", "(3)"});
  test::expect_error([&] { ops::cross_entropy_forward(z, tensor(std::vector<int32_t>{0, 1}, {2}), {}, {}); },
                     {"int64", "int32"});
  test::expect_error([&] { ops::cross_entropy_forward(z.flatten(), tensor(std::vector<int64_t>{0}, {1}), {}, {}); },
                     {"cross_entropy", "(N, C)", "(6)"});
  test::expect_error([&] { ops::cross_entropy_forward(z, tensor(std::vector<int64_t>{0, 1}, {2}), ones({4}), {}); },
                     {"cross_entropy", "weight", "(3)", "(4)"});
  test::expect_error(
      [&] { ops::cross_entropy_forward(z, tensor(std::vector<int64_t>{0, 1}, {2}), {}, {.label_smoothing = 1.5}); },
      {"label_smoothing", "[0, 1]", "1.5"});
  test::expect_error([&] { ops::cross_entropy_forward(z.to(kInt64), tensor(std::vector<int64_t>{0, 1}, {2}), {}, {}); },
                     {"cross_entropy", "floating"});
  ops::CrossEntropyForward f = ops::cross_entropy_forward(z, tensor(std::vector<int64_t>{0, 1}, {2}), {}, {});
  test::expect_error(
      [&] { ops::cross_entropy_backward(ones({3}), z, f.stats, tensor(std::vector<int64_t>{0, 1}, {2}), {}, {}); },
      {"cross_entropy_backward", "grad_loss", "(2)"});
  test::expect_error(
      [&] { ops::cross_entropy_backward(ones({2}), z, f.stats, tensor(std::vector<int64_t>{0, 7}, {2}), {}, {}); },
      {"cross_entropy_backward", "target 7"});
}

}  // namespace
}  // namespace kiln
