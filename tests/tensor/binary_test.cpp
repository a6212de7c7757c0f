// Element-wise binary and ternary ops against float64 references, with broadcasting (the reference indexes
// the inputs by hand), every layout, type promotion and the error messages.
#include "test_util.h"

namespace kiln {
namespace {

using test::Layout;

// Row-major index into `shape` of the element broadcast to position `flat` of `out_shape`.
int64_t broadcast_index(int64_t flat, const Shape& out_shape, const Shape& shape) {
  int64_t idx = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out_shape.size()) - 1, s = static_cast<int64_t>(shape.size()) - 1; d >= 0;
       --d, --s) {
    int64_t i = flat % out_shape[d];
    flat /= out_shape[d];
    if (s >= 0) {
      if (shape[s] != 1) idx += i * stride;
      stride *= shape[s];
    }
  }
  return idx;
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo = -3, hi = 3;
};

std::vector<BinaryCase> cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
       [](double a, double b) { return a + 2.5 * b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"sub_alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -0.5); },
       [](double a, double b) { return a + 0.5 * b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }, 0.5, 3},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
      {"atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); },
       [](double a, double b) { return std::atan2(a, b); }},
      // Independent of the kernels' fmod-based forms: the definitions, in float64.
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); },
       [](double a, double b) { return a - std::trunc(a / b) * b; }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); },
       [](double a, double b) { return a - std::floor(a / b) * b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return a < b; }, [](double a, double b) { return double(a < b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return a <= b; }, [](double a, double b) { return double(a <= b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return a > b; }, [](double a, double b) { return double(a > b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return a >= b; }, [](double a, double b) { return double(a >= b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return a == b; }, [](double a, double b) { return double(a == b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return a != b; }, [](double a, double b) { return double(a != b); }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); },
       [](double a, double b) { return double(a != 0 && b != 0); }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
       [](double a, double b) { return double(a != 0 || b != 0); }},
      {"logical_xor", [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); },
       [](double a, double b) { return double((a != 0) != (b != 0)); }},
  };
}

struct ShapePair {
  Shape a, b, out;
};
const std::vector<ShapePair> kShapePairs = {
    {{3, 4}, {3, 4}, {3, 4}},       {{3, 1, 4}, {5, 1}, {3, 5, 4}}, {{4}, {2, 3, 4}, {2, 3, 4}},
    {{}, {2, 3}, {2, 3}},           {{2, 3}, {}, {2, 3}},           {{0, 3}, {1, 3}, {0, 3}},
    {{1}, {1}, {1}},                {{600, 7}, {600, 7}, {600, 7}},
};

void check_case(const BinaryCase& c, DType d, Layout la, Layout lb, const ShapePair& sp, std::mt19937& rng) {
  Tensor a = test::random_tensor(sp.a, d, rng, la, c.lo, c.hi);
  Tensor b = test::random_tensor(sp.b, d, rng, lb, c.lo, c.hi);
  std::vector<double> av = test::values(a), bv = test::values(b), want;
  for (int64_t i = 0; i < shape_numel(sp.out); ++i)
    want.push_back(c.ref(av[broadcast_index(i, sp.out, sp.a)], bv[broadcast_index(i, sp.out, sp.b)]));
  Tensor y = c.op(a, b);
  if (y.dtype() == kUInt8)  // uint8 arithmetic wraps modulo 256, as in C and PyTorch
    for (double& w : want) w = static_cast<double>((static_cast<int64_t>(w) % 256 + 256) % 256);
  double tol = y.dtype() == kBool ? 0 : test::tolerance(d);
  test::expect_tensor_near(y, want, sp.out, tol, tol,
                           std::string(c.name) + " " + dtype_name(d) + " " + test::layout_name(la) + "/" +
                               test::layout_name(lb) + " " + shape_str(sp.a) + " with " + shape_str(sp.b));
}

TEST(Binary, FloatOpsMatchFloat64ReferenceWithBroadcasting) {
  std::mt19937 rng(10);
  for (const auto& c : cases())
    for (DType d : test::kFloatDTypes)
      for (Layout la : test::kLayouts)
        for (const auto& sp : kShapePairs) check_case(c, d, la, la == Layout::Strided ? Layout::Transposed : la, sp, rng);
}

TEST(Binary, IntegerAndBoolOps) {
  std::mt19937 rng(11);
  for (const auto& c : cases()) {
    std::string name = c.name;
    if (name == "div" || name == "pow" || name == "add_alpha" || name == "sub_alpha" || name == "atan2" ||
        name == "fmod" || name == "remainder")
      continue;  // float results, or a divisor that may draw 0: IntegerModuloFollowsCAndPython below
    for (DType d : {kInt32, kInt64, kUInt8})
      for (const auto& sp : kShapePairs) check_case(c, d, Layout::Contiguous, Layout::Transposed, sp, rng);
  }
  Tensor t = tensor(std::vector<bool>{true, false, true}), f = tensor(std::vector<bool>{false, false, true});
  EXPECT_EQ(test::values(add(t, f)), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(add(t, f).dtype(), kBool);
  EXPECT_EQ(test::values(mul(t, f)), (std::vector<double>{0, 0, 1}));
  test::expect_error([&] { (void)sub(t, f); }, {"sub", "bool"});
}

TEST(Binary, IntegerDivisionIsTrueDivision) {
  Tensor a = tensor(std::vector<int64_t>{7, -7, 1}), b = tensor(std::vector<int64_t>{2, 2, 3});
  Tensor q = a / b;
  EXPECT_EQ(q.dtype(), kFloat32);
  test::expect_tensor_near(q, {3.5, -3.5, 1.0 / 3}, {3});
}

TEST(Binary, IntegerModuloFollowsCAndPython) {
  // fmod takes the dividend's sign (C's %), remainder the divisor's (Python's %).
  Tensor a = tensor(std::vector<int64_t>{7, -7, 7, -7, 0, std::numeric_limits<int64_t>::min()});
  Tensor b = tensor(std::vector<int64_t>{3, 3, -3, -3, 5, -1});
  EXPECT_EQ(fmod(a, b).dtype(), kInt64);
  EXPECT_EQ(test::values(fmod(a, b)), (std::vector<double>{1, -1, 1, -1, 0, 0}));
  EXPECT_EQ(test::values(remainder(a, b)), (std::vector<double>{1, 2, -2, -1, 0, 0}));
  EXPECT_EQ(test::values(remainder(tensor(std::vector<int32_t>{-1, 9}), 4)), (std::vector<double>{3, 1}));
  EXPECT_EQ(test::values(fmod(tensor(std::vector<uint8_t>{200, 7}), 6)), (std::vector<double>{2, 1}));
  test::expect_error([] { (void)remainder(tensor(std::vector<int32_t>{1, 2}), tensor(std::vector<int32_t>{1, 0})); },
                     {"remainder", "integer division by zero"});
  Tensor x = tensor(std::vector<int32_t>{5});
  test::expect_error([&] { fmod_(x, 0); }, {"fmod_", "division by zero"});
  // Floats: exact, signs as above, and x % 0 is NaN.
  test::expect_tensor_near(remainder(tensor({-7.5, 7.5}), -2.0), {-1.5, -0.5}, {2});
  test::expect_tensor_near(fmod(tensor({-7.5, 7.5}), -2.0), {-1.5, 1.5}, {2});
  EXPECT_TRUE(std::isnan(test::values(fmod(tensor({1.0}), 0.0))[0]));
  EXPECT_EQ(atan2(tensor(std::vector<int32_t>{1}), tensor(std::vector<int32_t>{1})).dtype(), kFloat32);
}

TEST(Binary, IscloseAllcloseEqual) {
  Tensor a = tensor({1.0, INFINITY, -INFINITY, NAN, 100.0, 0.0});
  Tensor b = tensor({1.0 + 1e-6, INFINITY, INFINITY, NAN, 100.002, 1e-9});
  EXPECT_EQ(test::values(isclose(a, b)), (std::vector<double>{1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(test::values(isclose(a, b, 1e-4)), (std::vector<double>{1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(test::values(isclose(a, b, 0, 0, /*equal_nan=*/true)), (std::vector<double>{0, 1, 0, 1, 0, 0}));
  EXPECT_FALSE(allclose(a, b));
  EXPECT_TRUE(allclose(a.narrow(0, 0, 2), b.narrow(0, 0, 2)));
  EXPECT_TRUE(allclose(tensor({1.0, 2.0}), tensor({1.0}).expand({2}) + tensor({0.0, 1.0})));
  EXPECT_TRUE(equal(tensor(std::vector<int32_t>{1, 2}), tensor(std::vector<int32_t>{1, 2})));
  EXPECT_FALSE(equal(tensor(std::vector<int32_t>{1, 2}), tensor(std::vector<int32_t>{1, 3})));
  EXPECT_FALSE(equal(tensor({1.0, 2.0}), tensor({1.0, 2.0}).reshape({2, 1})));  // shapes differ
  EXPECT_FALSE(equal(tensor({NAN}), tensor({NAN})));
  EXPECT_EQ(test::values(isclose(tensor(std::vector<int64_t>{3, 4}), tensor(std::vector<int64_t>{3, 5}))),
            (std::vector<double>{1, 0}));
  test::expect_error([&] { (void)isclose(a, b, -1.0); }, {"isclose", "rtol"});
}

TEST(Binary, TypePromotion) {
  Tensor i = tensor(std::vector<int32_t>{1, 2}), f16 = tensor(std::vector<float>{0.5, 0.25}).to(kFloat16);
  EXPECT_EQ((i + 1).dtype(), kInt32);
  EXPECT_EQ((i + 1.5).dtype(), kFloat32);
  test::expect_tensor_near(i + 1.5, {2.5, 3.5}, {2});
  EXPECT_EQ((i + f16).dtype(), kFloat16);
  EXPECT_EQ((f16 * 3.0).dtype(), kFloat16);
  EXPECT_EQ((f16 + tensor({1.0}).to(kBFloat16)).dtype(), kFloat32);
  EXPECT_EQ((2 - i).dtype(), kInt32);
  EXPECT_EQ(test::values(2 - i), (std::vector<double>{1, 0}));
  EXPECT_EQ(test::values(1.0 / tensor({4.0, 0.5})), (std::vector<double>{0.25, 2}));
  test::expect_error([&] { (void)add(i, i, 0.5); }, {"add", "alpha", "int32"});
}

TEST(Binary, InPlace) {
  Tensor x = zeros({2, 3});
  x += ones({3});
  x *= 2;
  x -= tensor(std::vector<float>{1, 0, 0, 0, 0, 1}, {2, 3});
  EXPECT_EQ(test::values(x), (std::vector<double>{1, 2, 2, 2, 2, 1}));
  Tensor h = ones({2}, kFloat16);
  h += tensor(std::vector<double>{0.5, 1.5});  // float64 into float16: same category, rounds once
  EXPECT_EQ(test::values(h), (std::vector<double>{1.5, 2.5}));
  Tensor i = ones({2}, kInt64);
  test::expect_error([&] { i += tensor({0.5, 0.5}); }, {"add_", "float32", "int64"});
  test::expect_error([&] { x += ones({4, 2, 3}); }, {"add_", "(4, 2, 3)", "(2, 3)"});
}

TEST(Binary, ShapeMismatchNamesOpAndShapes) {
  test::expect_error([] { (void)(ones({2, 3}) + ones({4})); }, {"add", "(2, 3)", "(4)", "3 vs 4"});
  test::expect_error([] { (void)(ones({2, 3}) < ones({2, 2})); }, {"lt", "(2, 3)", "(2, 2)"});
}

TEST(Binary, WhereMaskedFillLerp) {
  Tensor cond = tensor(std::vector<bool>{true, false, true});
  Tensor a = tensor({1.0, 2.0, 3.0}), b = tensor({-1.0});
  EXPECT_EQ(test::values(where(cond, a, b)), (std::vector<double>{1, -1, 3}));
  EXPECT_EQ(test::values(where(cond, 9.0, a)), (std::vector<double>{9, 2, 9}));
  EXPECT_EQ(where(cond, tensor(std::vector<int32_t>{1, 2, 3}), 0.5).dtype(), kFloat32);
  test::expect_error([&] { (void)where(a, a, b); }, {"where", "bool", "float32"});
  Tensor m = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(test::values(m.masked_fill(cond, 0)), (std::vector<double>{0, 2, 0, 0, 5, 0}));
  m.masked_fill_(m > 4, -1);
  EXPECT_EQ(test::values(m), (std::vector<double>{1, 2, 3, 4, -1, -1}));
  test::expect_error([&] { (void)m.masked_fill(ones({3, 2, 3}, kBool), 0); }, {"masked_fill", "(3, 2, 3)"});
  std::mt19937 rng(12);
  for (DType d : test::kFloatDTypes) {
    Tensor s = test::random_tensor({4, 5}, d, rng, Layout::Transposed);
    Tensor e = test::random_tensor({5}, d, rng);
    Tensor w = test::random_tensor({4, 1}, d, rng, Layout::Contiguous, 0, 1);
    std::vector<double> sv = test::values(s), ev = test::values(e), wv = test::values(w), want;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j) want.push_back(sv[i * 5 + j] + wv[i] * (ev[j] - sv[i * 5 + j]));
    test::expect_tensor_near(lerp(s, e, w), want, {4, 5}, 4 * test::tolerance(d), 4 * test::tolerance(d),
                             std::string("lerp ") + dtype_name(d));
  }
}

// Three inputs with broadcast scalars among them run in chunks over a buffer of the scalar: runs longer than a
// chunk and not a multiple of it, the scalar in each position, against a plain loop.
TEST(Binary, WhereAndLerpWithScalarsOverLongRuns) {
  std::mt19937 rng(13);
  const int64_t n = 1000 + 7;
  for (DType d : test::kFloatDTypes) {
    SCOPED_TRACE(dtype_name(d));
    Tensor a = test::random_tensor({n}, d, rng), b = test::random_tensor({n}, d, rng);
    Tensor cond = test::random_tensor({n}, kFloat32, rng) > 0;
    std::vector<double> av = test::values(a), bv = test::values(b), cv = test::values(cond);
    std::vector<double> w1(n), w2(n), w3(n), w4(n);
    for (int64_t i = 0; i < n; ++i) {
      w1[i] = cv[i] != 0 ? av[i] : 0;
      w2[i] = cv[i] != 0 ? -2 : bv[i];
      w3[i] = av[i] + 0.25 * (bv[i] - av[i]);
      w4[i] = 1 + bv[i] * (av[i] - 1);
    }
    EXPECT_EQ(test::values(where(cond, a, 0)), w1);
    EXPECT_EQ(test::values(where(cond, -2.0, b)), w2);
    test::expect_tensor_near(lerp(a, b, 0.25), w3, {n}, 4 * test::tolerance(d), 4 * test::tolerance(d), "lerp");
    test::expect_tensor_near(lerp(full({}, 1.0, d), a, b), w4, {n}, 8 * test::tolerance(d), 8 * test::tolerance(d),
                             "lerp, scalar start");
    // The condition itself broadcast (a scalar true, then a row against a column).
    EXPECT_EQ(test::values(where(full({}, true, kBool), a, b)), av);
    Tensor col = tensor(std::vector<bool>{true, false}).reshape({2, 1});
    std::vector<double> want;
    for (int r = 0; r < 2; ++r)
      for (int64_t i = 0; i < n; ++i) want.push_back(r == 0 ? av[i] : -1.0);
    EXPECT_EQ(test::values(where(col, a.reshape({1, n}), -1.0)), want);
  }
}

// relu's backward: 0 where relu's result is <= 0, the gradient elsewhere (NaN included, as PyTorch's
// threshold_backward); every floating dtype, a transposed operand, against the rule written out.
TEST(Binary, ReluBackwardPassesTheGradientWhereTheResultIsNotAtMostZero) {
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(d));
    Tensor y = tensor({-1.0, 0.0, 2.0, NAN, 0.5, 3.0}).to(d), g = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}).to(d);
    EXPECT_EQ(test::values(ops::relu_backward(g, y)), (std::vector<double>{0, 0, 3, 4, 5, 6}));
    std::mt19937 rng(5);
    Tensor yt = test::random_tensor({4, 3}, d, rng, test::Layout::Transposed), gt = test::random_tensor({4, 3}, d, rng);
    std::vector<double> yv = test::values(yt), gv = test::values(gt), want;
    for (size_t i = 0; i < yv.size(); ++i) want.push_back(yv[i] <= 0 ? 0.0 : gv[i]);
    EXPECT_EQ(test::values(ops::relu_backward(gt, yt)), want);
  }
  test::expect_error([] { ops::relu_backward(tensor(std::vector<int64_t>{1}), tensor(std::vector<int64_t>{1})); },
                     {"relu_backward", "floating"});
}

// gelu's fused backward against its derivative written out in float64, both forms, every floating dtype, a
// transposed operand and a broadcast gradient.
TEST(Binary, GeluBackwardIsTheGradientTimesTheDerivative) {
  const double k = std::sqrt(2.0 / M_PI);
  auto exact = [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  auto tanh_form = [k](double x) {
    const double t = std::tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
  };
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const char* form : {"none", "tanh"}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " " + form);
      std::mt19937 rng(8);
      Tensor x = test::random_tensor({5, 7}, d, rng, test::Layout::Transposed) * 2.0;
      Tensor g = test::random_tensor({7}, d, rng);  // broadcast over the rows
      std::vector<double> xv = test::values(x), gv = test::values(g), want;
      for (size_t i = 0; i < xv.size(); ++i) {
        want.push_back(gv[i % 7] * (std::string(form) == "tanh" ? tanh_form(xv[i]) : exact(xv[i])));
      }
      test::expect_tensor_near(ops::gelu_backward(g, x, form), want, {5, 7});
    }
  }
  // Far into the tails: the derivative goes to 0 below and to 1 above, without NaN.
  EXPECT_EQ(test::values(ops::gelu_backward(ones({4}), tensor({-40.0f, -1e30f, 40.0f, 1e30f}))),
            (std::vector<double>{0, 0, 1, 1}));
  test::expect_error([] { ops::gelu_backward(tensor(std::vector<int64_t>{1}), tensor(std::vector<int64_t>{1})); },
                     {"gelu_backward", "floating"});
  test::expect_error([] { ops::gelu_backward(ones({1}), ones({1}), "fast"); }, {"gelu_backward", "\"fast\""});
}

TEST(Binary, NanPropagatesThroughMaximum) {
  Tensor a = tensor({NAN, 1.0}), b = tensor({0.0, NAN});
  std::vector<double> mx = test::values(maximum(a, b)), mn = test::values(minimum(a, b));
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mn[0]) && std::isnan(mn[1]));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Binary, InPlaceWithAnOverlappingOperandUsesItsOldValues) {
  // x += x.t() must read x.t() as it was before the first write, as in NumPy's overlap-safe semantics.
  Tensor x = arange(9, kFloat32).view({3, 3});
  std::vector<double> before = test::values(x), want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(before[i * 3 + j] + before[j * 3 + i]);
  x += x.t();
  EXPECT_EQ(test::values(x), want);
  // Shifted self-copy: y[1:] = y[:-1].
  Tensor y = arange(6, kFloat64);
  y.narrow(0, 1, 5).copy_(y.narrow(0, 0, 5));
  EXPECT_EQ(test::values(y), (std::vector<double>{0, 0, 1, 2, 3, 4}));
  // The same view as both operands needs no copy and stays right.
  Tensor z = arange(4, kFloat32);
  z.mul_(z);
  EXPECT_EQ(test::values(z), (std::vector<double>{0, 1, 4, 9}));
}

TEST(Binary, WritingIntoAnExpandedTensorIsAnError) {
  Tensor e = zeros({1, 3}).expand({4, 3});
  test::expect_error([&] { e += ones({4, 3}); }, {"add_", "expanded", "clone"});
  test::expect_error([&] { e.copy_(ones({4, 3})); }, {"copy_", "expanded"});
}

}  // namespace
}  // namespace kiln
