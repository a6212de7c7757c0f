// Reductions against float64 references computed here, element by element, from the input's stored values
// (test::values), never from another kiln reduction: every layout of test::kLayouts, several dim sets (one
// dim, a negative dim, two dims, all dims, keepdim on and off), every dtype each op takes, zero-size and
// one-element tensors, shapes long enough to be cut into chunks, and the error messages.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "test_util.h"

namespace kiln {
namespace {

using test::Layout;
using test::kNan;
using test::kInf;

// The elements of x grouped by the output they reduce into: items[o] holds, in row-major order of the
// reduced dims, the elements of output o (outputs in row-major order of the kept dims).
struct Grouped {
  Shape out_shape;
  std::vector<std::vector<double>> items;
};

Grouped group_elements(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims)
    if (nd > 0) reduced[(d + nd) % nd] = true;
  Grouped g;
  Shape kept;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[d]) kept.push_back(x.size(d));
    if (!reduced[d] || keepdim) g.out_shape.push_back(reduced[d] ? 1 : x.size(d));
  }
  g.items.resize(static_cast<size_t>(shape_numel(kept)));
  const std::vector<double> v = test::values(x);
  const Shape& sizes = x.sizes();  // read once: Tensor::size checks its dim on every call
  for (int64_t flat = 0; flat < x.numel(); ++flat) {
    int64_t rest = flat, out = 0, scale = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t i = rest % sizes[d];
      rest /= sizes[d];
      if (!reduced[d]) {
        out += i * scale;
        scale *= sizes[d];
      }
    }
    g.items[out].push_back(v[flat]);
  }
  return g;
}

// ---- float64 references ----

double ref_sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double ref_prod(const std::vector<double>& v) {
  double p = 1;
  for (double e : v) p *= e;
  return p;
}
double ref_mean(const std::vector<double>& v) { return ref_sum(v) / static_cast<double>(v.size()); }
// Index of the first max (min); a NaN beats everything and the first one wins.
size_t ref_arg(const std::vector<double>& v, bool is_max) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (std::isnan(v[best])) break;
    if (std::isnan(v[i]) || (is_max ? v[i] > v[best] : v[i] < v[best])) best = i;
  }
  return best;
}
double ref_max(const std::vector<double>& v) { return v[ref_arg(v, true)]; }
double ref_min(const std::vector<double>& v) { return v[ref_arg(v, false)]; }
double ref_var(const std::vector<double>& v, double correction) {
  double m = ref_mean(v), ss = 0;
  for (double e : v) ss += (e - m) * (e - m);
  return ss / std::max(0.0, static_cast<double>(v.size()) - correction);
}
double ref_norm(const std::vector<double>& v, double p) {
  if (std::isinf(p)) {
    double r = p > 0 ? 0 : kInf;
    for (double e : v) r = p > 0 ? std::max(r, std::fabs(e)) : std::min(r, std::fabs(e));
    return r;
  }
  double s = 0;
  for (double e : v) s += p == 0 ? (e != 0) : std::pow(std::fabs(e), p);
  return p == 0 ? s : std::pow(s, 1 / p);
}
double ref_logsumexp(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += std::exp(e);  // the test inputs are small: no overflow
  return std::log(s);
}

// The value the result dtype holds for v (so an f16 product over 65504 is inf in both).
double round_to(DType dtype, double v) {
  switch (dtype) {
    case kFloat32: return static_cast<float>(v);
    case kFloat16: return static_cast<float>(Half(static_cast<float>(v)));
    case kBFloat16: return static_cast<float>(BFloat16(static_cast<float>(v)));
    case kBool: return v != 0;
    default: return v;
  }
}

// ---- the driver ----

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> dims;
};

// One-dim, negative, two-dim and all-dims reductions of a 3-D tensor, plus 2-D ones that take the row and
// the column loops, zero-size and one-element tensors.
const std::vector<ReduceCase> kCases = {
    {{3, 4, 5}, {1}},  {{3, 4, 5}, {-1}}, {{3, 4, 5}, {0, 2}}, {{3, 4, 5}, {}}, {{3, 4, 5}, {2, 0, 1}},
    {{6, 9}, {0}},     {{6, 9}, {1}},     {{5}, {0}},          {{1}, {0}},      {{}, {}},
    {{}, {0}},         {{2, 1, 3}, {1}},
};
const std::vector<ReduceCase> kZeroSizeCases = {{{2, 0, 3}, {1}}, {{2, 0, 3}, {0}}, {{0}, {}}};
// Long enough to be cut into several chunks: rows of 70000 (the row loop) and a reduction over 600 rows of
// 1000 (the column loop), and many short rows (reduced a block of outputs at a time: several blocks, the last
// one partial).
const std::vector<ReduceCase> kLongCases = {{{3, 70000}, {1}}, {{600, 1000}, {0}}, {{100000, 3}, {0}},
                                            {{2000, 40}, {1}}, {{3, 1500, 7}, {2}}};

using KilnReduce = std::function<Tensor(const Tensor&, const std::vector<int64_t>&, bool keepdim)>;
using RefFn = std::function<double(const std::vector<double>&)>;

struct Check {
  std::string name;
  KilnReduce kiln;
  RefFn ref;
  std::function<DType(DType)> out_dtype = [](DType d) { return d; };
  double tol_scale = 1;    // times test::tolerance(out dtype)
  double lo = -3, hi = 3;  // input range
};

void run_check(const Check& c, std::initializer_list<DType> dtypes, const std::vector<ReduceCase>& cases) {
  std::mt19937 rng(1234);
  for (DType dtype : dtypes) {
    for (Layout layout : test::kLayouts) {
      for (const ReduceCase& cs : cases) {
        for (bool keepdim : {false, true}) {
          if (keepdim && shape_numel(cs.shape) > 10000) continue;  // keepdim is a view: small shapes show it
          Tensor x = test::random_tensor(cs.shape, dtype, rng, layout, c.lo, c.hi);
          std::string what = c.name + " " + dtype_name(dtype) + " " + test::layout_name(layout) + " shape " +
                             shape_str(cs.shape) + " dims " + shape_str(cs.dims) + (keepdim ? " keepdim" : "");
          Tensor got = c.kiln(x, cs.dims, keepdim);
          DType out = c.out_dtype(dtype);
          ASSERT_EQ(got.dtype(), out) << what;
          Grouped g = group_elements(x, cs.dims, keepdim);
          std::vector<double> want;
          for (const auto& items : g.items) want.push_back(round_to(out, c.ref(items)));
          double tol = test::tolerance(out) * c.tol_scale;
          test::expect_tensor_near(got, want, g.out_shape, tol, tol, what);
        }
      }
    }
  }
}

template <typename... Cases>
std::vector<ReduceCase> concat(const Cases&... lists) {
  std::vector<ReduceCase> all;
  (all.insert(all.end(), lists.begin(), lists.end()), ...);
  return all;
}

DType int64_for_integers(DType d) { return is_floating(d) ? d : kInt64; }

TEST(ReduceSum, MatchesReference) {
  Check c{"sum", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return sum(x, d, k); }, ref_sum,
          int64_for_integers};
  run_check(c, {kFloat32, kFloat64, kFloat16, kBFloat16, kBool, kUInt8, kInt32, kInt64}, concat(kCases, kZeroSizeCases));
  run_check(c, {kFloat32, kBFloat16, kInt32}, kLongCases);
}

TEST(ReduceSum, DtypeArgumentConvertsFirst) {
  Tensor x = tensor(std::vector<int32_t>{1, 2, 3, 4}, {2, 2});
  Tensor s = sum(x, {1}, false, kFloat64);
  EXPECT_EQ(s.dtype(), kFloat64);
  EXPECT_EQ(test::values(s), (std::vector<double>{3, 7}));
  // float16 values whose float16 sum would round (2048 + 1 is not a float16) but whose float32 sum is exact.
  Tensor h = tensor({2048.0, 1.0}).to(kFloat16);
  EXPECT_EQ(sum(h, {}, false, kFloat32).item<double>(), 2049.0);
  EXPECT_EQ(sum(h).dtype(), kFloat16);
  EXPECT_EQ(sum(tensor(std::vector<bool>{true, true, false, true})).item<int64_t>(), 3);
  EXPECT_EQ(sum(tensor(std::vector<bool>{true})).dtype(), kInt64);
  EXPECT_EQ(sum(tensor(std::vector<uint8_t>{200, 200})).item<int64_t>(), 400);  // no uint8 wrap-around
}

TEST(ReduceMean, MatchesReference) {
  Check c{"mean", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return mean(x, d, k); }, ref_mean};
  run_check(c, {kFloat32, kFloat64, kFloat16, kBFloat16}, concat(kCases, kZeroSizeCases));
  run_check(c, {kFloat16}, kLongCases);
}

TEST(ReduceProd, MatchesReference) {
  // Inputs in [0.5, 1.5] for floats; integers stay small (0..3) and few enough not to overflow int64.
  Check c{"prod", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return prod(x, d, k); }, ref_prod,
          int64_for_integers, 1, 0.5, 1.5};
  run_check(c, {kFloat32, kFloat64, kFloat16, kBFloat16}, concat(kCases, kZeroSizeCases));
  run_check(c, {kBool, kInt32, kInt64}, concat(std::vector<ReduceCase>{{{3, 4, 5}, {1}}, {{3, 4, 5}, {-1}}, {{3, 4, 5}, {0, 1}}},
                                               kZeroSizeCases));
  c.lo = -3;  // uint8 draws 0..20 whatever the range: products of 4 at most
  run_check(c, {kUInt8}, {{{3, 4, 5}, {1}}, {{3, 4}, {-1}}, {{6}, {}}});
}

TEST(ReduceProd, IntegerOverflowWrapsAround) {
  // As in PyTorch (and two's complement): 2^62 * 4 = 2^64 wraps to 0; int64 max + 1 wraps to int64 min.
  EXPECT_EQ(prod(tensor(std::vector<int64_t>{int64_t{1} << 62, 4})).item<int64_t>(), 0);
  EXPECT_EQ(prod(tensor(std::vector<int64_t>{int64_t{1} << 62, 3})).item<int64_t>(), int64_t{-4611686018427387904});
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(sum(tensor(std::vector<int64_t>{big, 1})).item<int64_t>(), std::numeric_limits<int64_t>::min());
}

TEST(ReduceAmaxAmin, MatchesReference) {
  Check mx{"amax", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return amax(x, d, k); }, ref_max};
  Check mn{"amin", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return amin(x, d, k); }, ref_min};
  for (const Check* c : {&mx, &mn}) {
    run_check(*c, {kFloat32, kFloat64, kFloat16, kBFloat16, kBool, kUInt8, kInt32, kInt64}, kCases);
    run_check(*c, {kFloat32, kFloat16, kInt32, kBool}, {{{2, 0, 3}, {0}}});
    run_check(*c, {kFloat32}, kLongCases);
  }
}

TEST(ReduceAllAny, MatchesReference) {
  auto all_ref = [](const std::vector<double>& v) { return std::all_of(v.begin(), v.end(), [](double e) { return e != 0; }) ? 1.0 : 0.0; };
  auto any_ref = [](const std::vector<double>& v) { return std::any_of(v.begin(), v.end(), [](double e) { return e != 0; }) ? 1.0 : 0.0; };
  auto to_bool = [](DType) { return kBool; };
  // Inputs in [-1, 1]: integers are then -3..3 and often 0, so both answers occur.
  Check a{"all", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return all(x, d, k); }, all_ref, to_bool, 1, -1, 1};
  Check n{"any", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return any(x, d, k); }, any_ref, to_bool, 1, -1, 1};
  for (const Check* c : {&a, &n})
    run_check(*c, {kBool, kUInt8, kInt32, kInt64, kFloat32, kFloat64, kFloat16, kBFloat16},
              concat(kCases, kZeroSizeCases));
  EXPECT_TRUE(all(tensor({1.0, kNan})).item<bool>());  // NaN is nonzero
  EXPECT_TRUE(any(tensor({0.0, kNan})).item<bool>());
}

TEST(ReduceVar, MatchesReferenceForSeveralCorrections) {
  for (double correction : {1.0, 0.0, 2.0}) {
    Check v{"var(correction " + std::to_string(correction) + ")",
            [=](const Tensor& x, const std::vector<int64_t>& d, bool k) { return var(x, d, correction, k); },
            [=](const std::vector<double>& e) { return ref_var(e, correction); }};
    run_check(v, {kFloat32, kFloat64, kFloat16, kBFloat16}, concat(kCases, kZeroSizeCases));
  }
  Check v{"var", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return var(x, d, 1.0, k); },
          [](const std::vector<double>& e) { return ref_var(e, 1.0); }};
  run_check(v, {kFloat64}, kLongCases);
  // Offset data: a one-pass sum-of-squares formula loses every digit here, Welford / two-pass do not.
  Tensor big = add(tensor({1.0, 2.0, 3.0, 4.0}, kFloat64), 1e9);
  EXPECT_NEAR(var(big).item<double>(), 5.0 / 3.0, 1e-6);
}

TEST(ReduceStd, IsTheSquareRootOfTheVariance) {
  Check s{"std", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return kiln::std(x, d, 1.0, k); },
          [](const std::vector<double>& e) { return std::sqrt(ref_var(e, 1.0)); }};
  run_check(s, {kFloat32, kFloat64, kFloat16, kBFloat16}, kCases);
}

TEST(ReduceNorm, MatchesReferenceForEveryKindOfP) {
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5}) {
    Check c{"norm(p " + std::to_string(p) + ")",
            [=](const Tensor& x, const std::vector<int64_t>& d, bool k) { return norm(x, p, d, k); },
            [=](const std::vector<double>& e) { return ref_norm(e, p); }};
    // Inputs in [-1, 1] so 16-bit values round to 0 now and then: p = 0 counts nonzeros.
    c.lo = -1;
    c.hi = 1;
    run_check(c, {kFloat32, kFloat64, kFloat16, kBFloat16}, kCases);
    if (p >= 0 && p != kInf) run_check(c, {kFloat32}, kZeroSizeCases);
  }
  Check c{"norm", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return norm(x, 2.0, d, k); },
          [](const std::vector<double>& e) { return ref_norm(e, 2.0); }};
  run_check(c, {kFloat32}, kLongCases);
}

TEST(ReduceLogsumexp, MatchesReference) {
  // A composite of 16-bit ops (x - max, exp, sum, log, + max) rounds five times: 4x the tolerance.
  Check c{"logsumexp", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return logsumexp(x, d, k); },
          ref_logsumexp, [](DType d) { return d; }, 4};
  run_check(c, {kFloat32, kFloat64, kFloat16, kBFloat16}, kCases);
  Tensor e = logsumexp(zeros({2, 0}), {1});
  EXPECT_EQ(test::values(e), (std::vector<double>{-kInf, -kInf}));  // log of an empty sum
}

TEST(ReduceLogsumexp, LargeAndInfiniteRows) {
  // rows: large values (a naive exp overflows), all -inf, one +inf, and -inf mixed with finite values.
  Tensor x = tensor({1000.0, 1000.0, -kInf, -kInf, kInf, 1.0, -kInf, 0.0}, TensorOptions(kFloat32)).view({4, 2});
  Tensor r = logsumexp(x, {1});
  test::expect_tensor_near(r, {1000.0 + std::log(2.0), -kInf, kInf, 0.0}, {4}, 1e-6, 1e-6, "logsumexp");
}

// ---- max / min / argmax / argmin with a dim ----

TEST(ReduceMaxMinDim, ValuesAndFirstIndexMatchReference) {
  std::mt19937 rng(7);
  const std::vector<std::pair<Shape, int64_t>> cases = {{{3, 4, 5}, 1},  {{3, 4, 5}, -1}, {{3, 4, 5}, 0},
                                                        {{6, 9}, 0},     {{6, 9}, 1},     {{1}, 0},
                                                        {{}, 0},         {{2, 0, 3}, 0},  {{3, 70000}, 1},
                                                        {{600, 1000}, 0}};
  for (DType dtype : test::kAllDTypes) {
    for (Layout layout : test::kLayouts) {
      for (const auto& [shape, dim] : cases) {
        const bool large = shape_numel(shape) > 100000;
        if (large && dtype != kFloat32 && dtype != kInt32) continue;
        for (bool keepdim : {false, true}) {
          if (large && keepdim) continue;
          for (bool is_max : {true, false}) {
            // Integers and bools repeat a lot: ties test the first-index rule.
            Tensor x = test::random_tensor(shape, dtype, rng, layout);
            auto [values, indices] = is_max ? max(x, dim, keepdim) : min(x, dim, keepdim);
            Tensor arg = is_max ? argmax(x, dim, keepdim) : argmin(x, dim, keepdim);
            std::string what = std::string(is_max ? "max " : "min ") + dtype_name(dtype) + " " +
                               test::layout_name(layout) + " shape " + shape_str(shape) + " dim " +
                               std::to_string(dim) + (keepdim ? " keepdim" : "");
            ASSERT_EQ(values.dtype(), dtype) << what;
            ASSERT_EQ(indices.dtype(), kInt64) << what;
            ASSERT_EQ(arg.dtype(), kInt64) << what;
            Grouped g = group_elements(x, {dim}, keepdim);
            std::vector<double> want_v, want_i;
            for (const auto& items : g.items) {
              size_t i = ref_arg(items, is_max);
              want_v.push_back(items[i]);
              want_i.push_back(static_cast<double>(i));
            }
            test::expect_tensor_near(values, want_v, g.out_shape, 0, 0, what + " values");
            test::expect_tensor_near(indices, want_i, g.out_shape, 0, 0, what + " indices");
            test::expect_tensor_near(arg, want_i, g.out_shape, 0, 0, what + " arg");
          }
        }
      }
    }
  }
}

TEST(ReduceMaxMinDim, NanCountsAsTheExtremeAndTheFirstNanWins) {
  Tensor x = tensor({1.0, kNan, 5.0, kNan, -2.0, 7.0}, TensorOptions(kFloat32)).view({2, 3});
  auto [v, i] = max(x, 1);
  test::expect_tensor_near(v, {kNan, kNan}, {2}, 0, 0, "max values");
  EXPECT_EQ(test::values(i), (std::vector<double>{1, 0}));
  auto [vm, im] = min(x, 1);
  EXPECT_EQ(test::values(im), (std::vector<double>{1, 0}));
  EXPECT_TRUE(std::isnan(max(x).item<double>()));
  EXPECT_TRUE(std::isnan(amin(x, {0}).to_vector<double>()[1]));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  // Without NaN, ties give the first index.
  EXPECT_EQ(argmax(tensor({1.0, 3.0, 3.0, 2.0})).item<int64_t>(), 1);
  EXPECT_EQ(argmin(tensor({1.0, 0.0, 3.0, 0.0})).item<int64_t>(), 1);
}

TEST(ReduceArgmax, WithoutDimIndexesTheFlattenedTensor) {
  std::mt19937 rng(3);
  for (Layout layout : test::kLayouts) {
    for (DType dtype : {kFloat32, kInt64, kFloat16}) {
      Tensor x = test::random_tensor({4, 6}, dtype, rng, layout);
      std::vector<double> v = test::values(x);
      EXPECT_EQ(argmax(x).item<int64_t>(), static_cast<int64_t>(ref_arg(v, true))) << test::layout_name(layout);
      EXPECT_EQ(argmin(x).item<int64_t>(), static_cast<int64_t>(ref_arg(v, false))) << test::layout_name(layout);
      Tensor k = argmax(x, std::nullopt, true);
      EXPECT_EQ(k.sizes(), (Shape{1, 1}));
      EXPECT_EQ(max(x).item<double>(), v[ref_arg(v, true)]);
      EXPECT_EQ(min(x).item<double>(), v[ref_arg(v, false)]);
      EXPECT_EQ(max(x).dim(), 0);
    }
  }
}

// ---- empty tensors, methods, threads, errors ----

TEST(ReduceEmpty, IdentitiesOfEmptyReductions) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(sum(e).item<double>(), 0.0);
  EXPECT_EQ(prod(e).item<double>(), 1.0);
  EXPECT_TRUE(std::isnan(mean(e).item<double>()));
  EXPECT_TRUE(all(e).item<bool>());
  EXPECT_FALSE(any(e).item<bool>());
  EXPECT_EQ(norm(e).item<double>(), 0.0);
  EXPECT_EQ(test::values(sum(e, {0})), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(sum(e, {1}).sizes(), (Shape{0}));
  EXPECT_EQ(amax(e, {1}).sizes(), (Shape{0}));  // reduces over 3 elements, into no outputs
  EXPECT_EQ(max(e, 1).second.sizes(), (Shape{0}));
  EXPECT_EQ(sum(zeros({0}, kInt32)).dtype(), kInt64);
}

TEST(ReduceMethods, ForwardToTheFreeFunctions) {
  Tensor x = tensor({1.0, 5.0, 3.0, 2.0, 4.0, 0.0}, TensorOptions(kFloat64)).view({2, 3});
  EXPECT_EQ(x.sum().item<double>(), 15.0);
  EXPECT_EQ(test::values(x.sum({0})), (std::vector<double>{3, 9, 3}));
  EXPECT_EQ(x.sum({1}, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(x.mean().item<double>(), 2.5);
  EXPECT_EQ(test::values(x.mean({1})), (std::vector<double>{3, 2}));
  EXPECT_EQ(x.max().item<double>(), 5.0);
  EXPECT_EQ(x.min().item<double>(), 0.0);
  EXPECT_EQ(x.argmax().item<int64_t>(), 1);
  EXPECT_EQ(test::values(x.argmin(1)), (std::vector<double>{0, 2}));
}

TEST(ReduceSum, LargeSumIsTheSameForAnyThreadCount) {
  const int before = get_num_threads();
  std::mt19937 rng(99);
  for (const auto& [shape, dims] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{3000001}, {}}, {{3, 1000001}, {1}}, {{1000001, 3}, {0}}, {{1500, 2000}, {0}}, {{1000001, 5}, {1}},
           {{100001, 40}, {1}}}) {
    Tensor x = test::random_tensor(shape, kFloat32, rng);
    set_num_threads(1);
    Tensor one = sum(x, dims);
    set_num_threads(2);
    Tensor two = sum(x, dims);
    set_num_threads(before);
    ASSERT_EQ(one.numel(), two.numel());
    EXPECT_EQ(std::memcmp(one.raw_data_ptr(), two.raw_data_ptr(), one.nbytes()), 0)
        << "shape " << shape_str(shape) << ": the bits depend on the number of threads";
    Grouped g = group_elements(x, dims, false);
    std::vector<double> want;
    for (const auto& items : g.items) want.push_back(ref_sum(items));
    test::expect_tensor_near(one, want, g.out_shape, 1e-6, 1e-6, "large sum of " + shape_str(shape));
  }
}

TEST(ReduceErrors, NameTheOpAndTheValues) {
  Tensor x = zeros({2, 3});
  test::expect_error([&] { (void)sum(x, {2}); }, {"sum", "dim 2", "out of range", "2 dims"});
  test::expect_error([&] { (void)amax(x, {-3}); }, {"amax", "dim -3", "out of range"});
  test::expect_error([&] { (void)sum(x, {1, -1}); }, {"sum", "dim 1", "more than once", "(1, -1)", "(2, 3)"});
  test::expect_error([&] { (void)mean(zeros({2}, kInt64)); }, {"mean", "floating point", "int64"});
  test::expect_error([&] { (void)var(zeros({2}, kInt32)); }, {"var", "floating point", "int32"});
  test::expect_error([&] { (void)kiln::std(zeros({2}, kBool)); }, {"std", "floating point", "bool"});
  test::expect_error([&] { (void)norm(zeros({2}, kInt32)); }, {"norm", "floating point"});
  test::expect_error([&] { (void)logsumexp(zeros({2}, kInt64), {0}); }, {"logsumexp", "floating point"});
  test::expect_error([&] { (void)max(zeros({0, 3})); }, {"max", "empty", "(0, 3)"});
  test::expect_error([&] { (void)min(zeros({0})); }, {"min", "empty", "(0)"});
  test::expect_error([&] { (void)amax(zeros({0, 3}), {0}); }, {"amax", "zero elements", "(0, 3)"});
  test::expect_error([&] { (void)max(zeros({0, 3}), 0); }, {"max", "zero elements"});
  test::expect_error([&] { (void)argmax(zeros({0})); }, {"argmax", "empty"});
  test::expect_error([&] { (void)argmin(zeros({2, 0}), 1); }, {"argmin", "zero elements"});
  test::expect_error([&] { (void)argmax(x, 2); }, {"argmax", "dim 2", "out of range"});
  test::expect_error([&] { (void)norm(zeros({0}), kInf); }, {"norm", "zero elements"});
  test::expect_error([&] { (void)sum(Tensor()); }, {"sum", "undefined"});
}

}  // namespace
}  // namespace kiln
