// Element-wise unary ops against float64 references computed here with <cmath>, for every float dtype, every
// memory layout, and the edge shapes (0-dim, empty, one element).
#include <cstring>
#include <limits>

#include "kiln/tensor/ops/fast_math.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::Layout;

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo = -3, hi = 3;  // input range (inside the function's domain)
};

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> float_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }, [](double x) { return double((x > 0) - (x < 0)); }},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.05, 5},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, -0.9, 3},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 9},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.05, 9},
      {"log2", [](const Tensor& x) { return log2(x); }, [](double x) { return std::log(x) / std::log(2.0); }, 0.05, 5},
      {"log10", [](const Tensor& x) { return log10(x); }, [](double x) { return std::log(x) / std::log(10.0); }, 0.05,
       5},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, 0.2, 3},
      {"tan", [](const Tensor& x) { return tan(x); }, [](double x) { return std::sin(x) / std::cos(x); }, -1.3, 1.3},
      {"asin", [](const Tensor& x) { return asin(x); }, [](double x) { return std::atan2(x, std::sqrt(1 - x * x)); },
       -0.95, 0.95},
      {"acos", [](const Tensor& x) { return acos(x); }, [](double x) { return std::atan2(std::sqrt(1 - x * x), x); },
       -0.95, 0.95},
      {"atan", [](const Tensor& x) { return atan(x); }, [](double x) { return std::atan2(x, 1.0); }},
      {"floor", [](const Tensor& x) { return floor(x); }, [](double x) { return std::floor(x); }},
      {"ceil", [](const Tensor& x) { return ceil(x); }, [](double x) { return -std::floor(-x); }},
      {"trunc", [](const Tensor& x) { return trunc(x); }, [](double x) { return x < 0 ? std::ceil(x) : std::floor(x); }},
      // Halves to even, written out: r = floor(x + 0.5), one less where x + 0.5 was an odd integer.
      {"round", [](const Tensor& x) { return round(x); },
       [](double x) {
         double r = std::floor(x + 0.5);
         return (r - x == 0.5 && std::fmod(r, 2.0) != 0) ? r - 1 : r;
       }},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 4.0); },
       [](double x) { return 2 * x > 4 ? x : std::log1p(std::exp(2 * x)) / 2; }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, [](double x) { return x > 0 ? x : 0.1 * x; }},
      {"pow_2.5", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 0, 3},
      {"pow_2", [](const Tensor& x) { return pow(x, 2); }, [](double x) { return x * x; }},
      // The exponents with a form of their own (functors::with_pow_functor), against std::pow itself.
      {"pow_1", [](const Tensor& x) { return pow(x, 1.0); }, [](double x) { return std::pow(x, 1.0); }},
      {"pow_3", [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return std::pow(x, 3.0); }},
      {"pow_0.5", [](const Tensor& x) { return pow(x, 0.5); }, [](double x) { return std::pow(x, 0.5); }, 0, 3},
      {"pow_-1", [](const Tensor& x) { return pow(x, -1.0); }, [](double x) { return std::pow(x, -1.0); }, 0.2, 3},
      {"pow_-0.5", [](const Tensor& x) { return pow(x, -0.5); }, [](double x) { return std::pow(x, -0.5); }, 0.2, 3},
      {"pow_-2", [](const Tensor& x) { return pow(x, -2.0); }, [](double x) { return std::pow(x, -2.0); }, 0.2, 3},
      {"clamp", [](const Tensor& x) { return clamp(x, -1.0, 0.5); }, [](double x) { return std::clamp(x, -1.0, 0.5); }},
      {"clamp_min", [](const Tensor& x) { return clamp(x, 0.25, std::nullopt); }, [](double x) { return std::max(x, 0.25); }},
  };
}

const std::vector<Shape> kShapes = {{3, 5}, {2, 3, 4}, {1}, {}, {0}, {4, 0}, {1000}};

TEST(Unary, EveryFloatOpMatchesFloat64Reference) {
  std::mt19937 rng(1);
  for (const auto& c : float_cases()) {
    for (DType d : test::kFloatDTypes) {
      for (Layout layout : test::kLayouts) {
        for (const Shape& shape : kShapes) {
          Tensor x = test::random_tensor(shape, d, rng, layout, c.lo, c.hi);
          std::vector<double> want;
          for (double v : test::values(x)) want.push_back(c.ref(v));
          Tensor y = c.op(x);
          EXPECT_EQ(y.dtype(), d) << c.name;
          double tol = test::tolerance(d);
          test::expect_tensor_near(y, want, shape, tol, tol,
                                   std::string(c.name) + " " + dtype_name(d) + " " + test::layout_name(layout) + " " +
                                       shape_str(shape));
        }
      }
    }
  }
}

TEST(Unary, InPlaceVariantsWriteTheirArgument) {
  std::mt19937 rng(2);
  Tensor x = test::random_tensor({4, 3}, kFloat32, rng, Layout::Transposed);
  std::vector<double> want;
  for (double v : test::values(x)) want.push_back(std::exp(v));
  Tensor same = x;
  uint64_t version = x.version();
  exp_(same);
  EXPECT_GT(x.version(), version);
  test::expect_tensor_near(x, want, {4, 3});
  Tensor y = tensor({-1.0, 2.0, -3.0});
  relu_(y);
  EXPECT_EQ(test::values(y), (std::vector<double>{0, 2, 0}));
  clamp_(y, std::nullopt, 1.0);
  EXPECT_EQ(test::values(y), (std::vector<double>{0, 1, 0}));
  Tensor i = arange(3);
  test::expect_error([&] { exp_(i); }, {"exp_", "float32", "int64"});
}

TEST(Unary, IntegerInputs) {
  Tensor i = tensor(std::vector<int32_t>{-3, 0, 4});
  EXPECT_EQ(neg(i).dtype(), kInt32);
  EXPECT_EQ(test::values(neg(i)), (std::vector<double>{3, 0, -4}));
  EXPECT_EQ(test::values(abs(i)), (std::vector<double>{3, 0, 4}));
  EXPECT_EQ(test::values(sign(i)), (std::vector<double>{-1, 0, 1}));
  EXPECT_EQ(test::values(relu(i)), (std::vector<double>{0, 0, 4}));
  EXPECT_EQ(test::values(clamp(i, -1, 2)), (std::vector<double>{-1, 0, 2}));
  EXPECT_EQ(clamp(i, -1, 2).dtype(), kInt32);
  EXPECT_EQ(clamp(i, 0.5, std::nullopt).dtype(), kFloat32);  // a float bound promotes, as in PyTorch
  EXPECT_EQ(test::values(pow(i, 3)), (std::vector<double>{-27, 0, 64}));
  EXPECT_EQ(pow(i, 3).dtype(), kInt32);
  test::expect_error([&] { (void)pow(i, -1); }, {"pow", "negative"});
  Tensor e = exp(i);  // float math on integers computes in the default float dtype
  EXPECT_EQ(e.dtype(), kFloat32);
  test::expect_tensor_near(e, {std::exp(-3.0), 1.0, std::exp(4.0)}, {3});
  test::expect_error([] { (void)neg(tensor(std::vector<bool>{true})); }, {"neg", "bool", "logical_not"});
  // Rounding keeps integers as they are, and their dtype; reciprocal is float math.
  using Rounding = Tensor (*)(const Tensor&);
  for (Rounding f : {Rounding(floor), Rounding(ceil), Rounding(round), Rounding(trunc)}) {
    EXPECT_EQ(f(i).dtype(), kInt32);
    EXPECT_EQ(test::values(f(i)), (std::vector<double>{-3, 0, 4}));
  }
  EXPECT_EQ(reciprocal(i).dtype(), kFloat32);
  test::expect_error([] { (void)floor(tensor(std::vector<bool>{true})); }, {"floor", "bool"});
}

TEST(Unary, RoundingAtHalvesAndSignedZeros) {
  // round halves to even, as PyTorch and NumPy; the others by their definitions, -0.0 where the result is a
  // negative zero (trunc(-0.5), ceil(-0.5), round(-0.5)).
  Tensor x = tensor({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -2.7, 2.7});
  EXPECT_EQ(test::values(round(x)), (std::vector<double>{-2, -2, -0.0, 0, 2, 2, -3, 3}));
  EXPECT_EQ(test::values(floor(x)), (std::vector<double>{-3, -2, -1, 0, 1, 2, -3, 2}));
  EXPECT_EQ(test::values(ceil(x)), (std::vector<double>{-2, -1, -0.0, 1, 2, 3, -2, 3}));
  EXPECT_EQ(test::values(trunc(x)), (std::vector<double>{-2, -1, -0.0, 0, 1, 2, -2, 2}));
  EXPECT_TRUE(std::signbit(test::values(trunc(x))[2]));
  Tensor big = tensor({1e300, -INFINITY, NAN}, TensorOptions(kFloat64));
  EXPECT_EQ(test::values(floor(big))[0], 1e300);
  EXPECT_EQ(test::values(round(big))[1], -INFINITY);
  EXPECT_TRUE(std::isnan(test::values(ceil(big))[2]));
}

TEST(Unary, NanAndInfinityHandling) {
  Tensor x = tensor({NAN, INFINITY, -INFINITY, 1.0});
  EXPECT_TRUE(std::isnan(test::values(relu(x))[0]));
  EXPECT_TRUE(std::isnan(test::values(clamp(x, 0.0, 1.0))[0]));
  EXPECT_EQ(test::values(sigmoid(x))[1], 1.0);
  EXPECT_EQ(test::values(sigmoid(x))[2], 0.0);
  EXPECT_EQ(test::values(isnan(x)), (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(test::values(isinf(x)), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(test::values(isfinite(x)), (std::vector<double>{0, 0, 0, 1}));
  EXPECT_EQ(isnan(x).dtype(), kBool);
  EXPECT_EQ(test::values(logical_not(tensor({0.0, 2.0}))), (std::vector<double>{1, 0}));
}

TEST(Unary, GeluRejectsUnknownApproximation) {
  test::expect_error([] { (void)gelu(ones({1}), "fast"); }, {"gelu", "\"fast\"", "tanh"});
}

TEST(Unary, ResultsIdenticalOnOneAndTwoThreads) {
  std::mt19937 rng(3);
  Tensor x = test::random_tensor({513, 257}, kFloat32, rng, Layout::Transposed);
  int saved = get_num_threads();
  set_num_threads(1);
  std::vector<float> one = tanh(x).to_vector<float>();
  set_num_threads(2);
  std::vector<float> two = tanh(x).to_vector<float>();
  set_num_threads(saved);
  EXPECT_EQ(one, two);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Distance in units in the last place between two finite floats of one sign.
int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

// The largest ulp error of f against float64 `ref` rounded to float, over every 1009th float bit pattern
// of magnitude from `from` up to (not including) `to`, with both signs unless `positive_only`: about a million
// values per sign for |x| < 110, two million from the smallest denormal to the largest float.
struct UlpError {
  int64_t ulps = 0;
  float at = 0;
};
template <typename F, typename R>
UlpError max_ulp_error(F f, R ref, float from, float to, bool positive_only = false) {
  uint32_t begin, end;
  std::memcpy(&begin, &from, 4);
  std::memcpy(&end, &to, 4);
  UlpError worst;
  for (uint32_t bits = begin; bits < end; bits += 1009) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      if (sign != 0 && positive_only) continue;
      uint32_t b = bits | sign;
      float x;
      std::memcpy(&x, &b, 4);
      int64_t d = ulp_distance(f(x), static_cast<float>(ref(static_cast<double>(x))));
      if (d > worst.ulps) worst = {d, x};
    }
  }
  return worst;
}
template <typename F, typename R>
UlpError max_ulp_error(F f, R ref, float limit) {
  return max_ulp_error(f, ref, 0.0f, limit);
}

TEST(FastExp, WithinTwoUlpOfFloat64ExpOverTheWholeRange) {
  // |x| < 110 covers overflow (x > 88.7) and denormal results (x < -87.3).
  UlpError e = max_ulp_error([](float x) { return fast_math::exp(x); }, [](double x) { return std::exp(x); }, 110.0f);
  EXPECT_LE(e.ulps, 2) << "at x = " << e.at;
  EXPECT_EQ(fast_math::exp(-INFINITY), 0.0f);
  EXPECT_EQ(fast_math::exp(INFINITY), INFINITY);
  EXPECT_EQ(fast_math::exp(89.0f), INFINITY);
  EXPECT_EQ(fast_math::exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(fast_math::exp(NAN)));
  EXPECT_GT(fast_math::exp(-103.0f), 0.0f);  // a denormal, not flushed to zero
}

TEST(FastExpm1, WithinOneUlpOfFloat64Expm1) {
  // |x| < 110 covers the switch to exp at 20, its overflow, and the rounding to -1 below -17.
  UlpError e =
      max_ulp_error([](float x) { return fast_math::expm1(x); }, [](double x) { return std::expm1(x); }, 110.0f);
  EXPECT_LE(e.ulps, 1) << "at x = " << e.at;
  // Near 0, where e^x - 1 computed directly would lose most digits.
  for (float x : {1e-3f, -1e-3f, 3e-6f, -3e-6f, 1e-9f, 0.3465f, -0.3466f, 19.99f, 20.0f, 20.01f}) {
    EXPECT_LE(ulp_distance(fast_math::expm1(x), static_cast<float>(std::expm1(static_cast<double>(x)))), 1) << x;
  }
  EXPECT_EQ(fast_math::expm1(-INFINITY), -1.0f);
  EXPECT_EQ(fast_math::expm1(INFINITY), INFINITY);
  EXPECT_EQ(fast_math::expm1(89.0f), INFINITY);
  EXPECT_EQ(fast_math::expm1(1e-30f), 1e-30f);
  EXPECT_EQ(std::signbit(fast_math::expm1(-0.0f)), true);
  EXPECT_TRUE(std::isnan(fast_math::expm1(NAN)));
}

TEST(FastLog, WithinOneUlpOfFloat64LogOnEveryPositiveFloat) {
  UlpError e = max_ulp_error([](float x) { return fast_math::log(x); }, [](double x) { return std::log(x); },
                              std::numeric_limits<float>::denorm_min(), INFINITY, /*positive_only=*/true);
  EXPECT_LE(e.ulps, 1) << "at x = " << e.at;
  // Where the mantissa's range wraps (sqrt(1/2) and its neighbours), powers of two, denormals.
  for (float x : {0.70710677f, 0.70710671f, 0.70710683f, 1.4142135f, 1.0f, 2.0f, 0.5f, 1.0000001f, 0.99999994f,
                  3e-39f, 1e-45f, 3.4e38f}) {
    EXPECT_LE(ulp_distance(fast_math::log(x), static_cast<float>(std::log(static_cast<double>(x)))), 1) << x;
  }
  EXPECT_EQ(fast_math::log(1.0f), 0.0f);
  EXPECT_EQ(fast_math::log(0.0f), -INFINITY);
  EXPECT_EQ(fast_math::log(-0.0f), -INFINITY);
  EXPECT_EQ(fast_math::log(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(fast_math::log(-1.0f)));
  EXPECT_TRUE(std::isnan(fast_math::log(-INFINITY)));
  EXPECT_TRUE(std::isnan(fast_math::log(NAN)));
}

TEST(FastLog1p, WithinOneUlpOfFloat64Log1p) {
  // -1 < x < 1 (both signs), then every positive float from 1 up.
  auto f = [](float x) { return fast_math::log1p(x); };
  auto ref = [](double x) { return std::log1p(x); };
  UlpError near = max_ulp_error(f, ref, 1.0f);
  EXPECT_LE(near.ulps, 1) << "at x = " << near.at;
  UlpError far = max_ulp_error(f, ref, 1.0f, INFINITY, /*positive_only=*/true);
  EXPECT_LE(far.ulps, 1) << "at x = " << far.at;
  // Near 0, where log(1 + x) computed directly would lose most digits, and near -1.
  for (float x : {1e-3f, -1e-3f, 3e-8f, -3e-8f, 1e-30f, -0.99999994f, -0.5f, 0.5f}) {
    EXPECT_LE(ulp_distance(fast_math::log1p(x), static_cast<float>(std::log1p(static_cast<double>(x)))), 1) << x;
  }
  EXPECT_EQ(fast_math::log1p(-1.0f), -INFINITY);
  EXPECT_EQ(fast_math::log1p(INFINITY), INFINITY);
  EXPECT_EQ(std::signbit(fast_math::log1p(-0.0f)), true);
  EXPECT_TRUE(std::isnan(fast_math::log1p(-2.0f)));
  EXPECT_TRUE(std::isnan(fast_math::log1p(NAN)));
}

TEST(FastErf, WithinThreeUlpOfFloat64Erf) {
  // Beyond |x| = 3.92, erf is +-1 in float; the polynomials change at |x| = 1 and 4.
  UlpError e = max_ulp_error([](float x) { return fast_math::erf(x); }, [](double x) { return std::erf(x); }, 6.0f);
  EXPECT_LE(e.ulps, 3) << "at x = " << e.at;
  for (float x : {0.999999f, 1.0f, 1.000001f, 3.999999f, 4.0f, 4.000001f}) {
    EXPECT_LE(ulp_distance(fast_math::erf(x), static_cast<float>(std::erf(static_cast<double>(x)))), 3) << x;
  }
  EXPECT_EQ(fast_math::erf(INFINITY), 1.0f);
  EXPECT_EQ(fast_math::erf(-INFINITY), -1.0f);
  EXPECT_EQ(fast_math::erf(1e30f), 1.0f);
  EXPECT_EQ(std::signbit(fast_math::erf(-0.0f)), true);
  EXPECT_NEAR(fast_math::erf(1e-30f), 1.1283791670955126e-30, 1e-37);  // 2x / sqrt(pi) near 0, no underflow
  EXPECT_TRUE(std::isnan(fast_math::erf(NAN)));
}

TEST(FastTanh, WithinThreeUlpOfFloat64Tanh) {
  // Beyond |x| = 11, tanh is +-1 in float.
  UlpError e = max_ulp_error([](float x) { return fast_math::tanh(x); }, [](double x) { return std::tanh(x); }, 11.0f);
  EXPECT_LE(e.ulps, 3) << "at x = " << e.at;
  EXPECT_EQ(fast_math::tanh(INFINITY), 1.0f);
  EXPECT_EQ(fast_math::tanh(-INFINITY), -1.0f);
  EXPECT_EQ(fast_math::tanh(30.0f), 1.0f);
  EXPECT_EQ(std::signbit(fast_math::tanh(-0.0f)), true);
  EXPECT_TRUE(std::isnan(fast_math::tanh(NAN)));
}

}  // namespace
}  // namespace kiln
