// softmax and log_softmax against float64 references computed here from the input's stored values, along
// every dim (the last one takes the row loop, the others the column loop), in every layout and float dtype,
// plus the numerical edge cases: huge inputs, rows of -inf, values far below the row's max.
#include <limits>

#include "test_util.h"

namespace kiln {
namespace {

using test::Layout;
using test::kInf;
using test::kNan;

// Reference softmax (or log_softmax) of x along dim, in float64, row-major.
std::vector<double> ref_softmax(const Tensor& x, int64_t dim, bool log) {
  std::vector<double> v = test::values(x), out(v.size());
  if (x.dim() == 0) return {log ? 0.0 : 1.0};
  dim = (dim + x.dim()) % x.dim();
  int64_t n = x.size(dim), inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  // Line (o, i) holds the elements at (o * n + k) * inner + i, k < n.
  for (int64_t start = 0; start < x.numel(); ++start) {
    if ((start / inner) % n != 0) continue;  // not the first element of a line
    double mx = -kInf;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, v[start + k * inner]);
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += std::exp(v[start + k * inner] - mx);
    for (int64_t k = 0; k < n; ++k) {
      double e = v[start + k * inner] - mx;
      out[start + k * inner] = log ? e - std::log(s) : std::exp(e) / s;
    }
  }
  return out;
}

void check_against_reference(bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  std::mt19937 rng(11);
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{4, 7}, 1}, {{4, 7}, 0},  {{4, 7}, -1}, {{3, 4, 5}, 1}, {{3, 4, 5}, 0}, {{3, 4, 5}, 2},
      {{3, 4, 5}, -2}, {{9}, 0}, {{1}, 0},     {{}, 0},        {{5, 1}, 1},    {{2, 3, 70}, 1},
      {{300, 200}, 1}, {{300, 200}, 0}};
  for (DType dtype : test::kFloatDTypes) {
    for (Layout layout : test::kLayouts) {
      for (const auto& [shape, dim] : cases) {
        // Range [-10, 10]: probabilities from about e^-20 up, so a lost low-order digit would show.
        Tensor x = test::random_tensor(shape, dtype, rng, layout, -10, 10);
        Tensor got = log ? log_softmax(x, dim) : softmax(x, dim);
        std::string what = std::string(name) + " " + dtype_name(dtype) + " " + test::layout_name(layout) + " shape " +
                           shape_str(shape) + " dim " + std::to_string(dim);
        ASSERT_EQ(got.dtype(), dtype) << what;
        double tol = test::tolerance(dtype);
        // log_softmax values reach -20: their 16-bit rounding is relative to that size.
        test::expect_tensor_near(got, ref_softmax(x, dim, log), shape, tol, tol, what);
      }
    }
  }
}

TEST(Softmax, MatchesReferenceAlongEveryDimInEveryLayoutAndDtype) { check_against_reference(false); }
TEST(LogSoftmax, MatchesReferenceAlongEveryDimInEveryLayoutAndDtype) { check_against_reference(true); }

TEST(Softmax, RowsSumToOne) {
  std::mt19937 rng(5);
  Tensor x = test::random_tensor({64, 1000}, kFloat32, rng, Layout::Contiguous, -30, 30);
  Tensor p = softmax(x, 1);
  for (int64_t r = 0; r < 64; ++r) {
    double s = 0;
    for (int64_t k = 0; k < 1000; ++k) s += test::element(p, r * 1000 + k);
    EXPECT_NEAR(s, 1.0, 1e-5) << "row " << r;
  }
}

TEST(Softmax, HugeInputsDoNotOverflow) {
  Tensor x = tensor({1000.0, 1000.0, 999.0, -1000.0}, TensorOptions(kFloat32));
  double e = std::exp(-1.0), s = 2 + e;
  test::expect_tensor_near(softmax(x, 0), {1 / s, 1 / s, e / s, 0.0}, {4}, 1e-6, 1e-7, "softmax");
  test::expect_tensor_near(log_softmax(x, 0), {-std::log(s), -std::log(s), -1 - std::log(s), -2000 - std::log(s)}, {4},
                           1e-6, 1e-6, "log_softmax");
}

TEST(Softmax, HugeInputsAlongAnInnerDim) {
  // x[i][j] = 1000 j + i: every column and every row needs its own max subtracted, or exp overflows.
  std::vector<double> v;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) v.push_back(1000.0 * j + i);
  Tensor x = tensor(v, {3, 4}, kFloat32);
  for (int64_t dim : {0, 1}) {
    for (bool log : {false, true}) {
      Tensor got = log ? log_softmax(x, dim) : softmax(x, dim);
      test::expect_tensor_near(got, ref_softmax(x, dim, log), {3, 4}, 1e-5, 1e-6,
                               std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim));
    }
  }
}

TEST(Softmax, SmallProbabilitiesKeepTheirRelativeAccuracy) {
  // softmax([0, -t])[1] = e^-t / (1 + e^-t) down to the float32 denormals (t up to 103): the exp behind it is
  // checked across its whole range, to 1e-5 relative while the result is a normal float and to one
  // denormal step below that.
  for (double t = 0; t < 104; t += 0.37) {
    Tensor x = tensor({0.0, -t}, TensorOptions(kFloat32));
    double t32 = -test::element(x, 1);  // t as float32 holds it
    double want = std::exp(-t32) / (1 + std::exp(-t32));
    double got = softmax(x, 0).to_vector<double>()[1];
    double tol = want > 1.2e-38 ? 1e-5 * want : 1.5e-45;
    EXPECT_NEAR(got, want, tol) << "t = " << t32;
    EXPECT_NEAR(log_softmax(x, 0).to_vector<double>()[1], -t32 - std::log1p(std::exp(-t32)), 1e-5 * (1 + t32))
        << "t = " << t32;
  }
}

TEST(LogSoftmax, FarBelowTheMaxStaysFinite) {
  // exp(-200) underflows float32: log(softmax) would give -inf; log_softmax gives -200.
  Tensor x = tensor({0.0, -200.0}, TensorOptions(kFloat32));
  EXPECT_EQ(softmax(x, 0).to_vector<double>()[1], 0.0);
  test::expect_tensor_near(log_softmax(x, 0), {0.0, -200.0}, {2}, 1e-6, 1e-6, "log_softmax");
}

TEST(Softmax, MinusInfinityMasksAndRowsOfMinusInfinityAreNan) {
  // Row 0: a masked entry gets probability exactly 0. Row 1: every entry masked gives nan, as in PyTorch.
  Tensor x = tensor({1.0, -kInf, 1.0, -kInf, -kInf, -kInf}, TensorOptions(kFloat32)).view({2, 3});
  test::expect_tensor_near(softmax(x, 1), {0.5, 0.0, 0.5, kNan, kNan, kNan}, {2, 3}, 1e-6, 1e-7, "softmax");
  test::expect_tensor_near(log_softmax(x, 1), {-std::log(2.0), -kInf, -std::log(2.0), kNan, kNan, kNan}, {2, 3}, 1e-6,
                           1e-6, "log_softmax");
  // Along dim 0 (the column loop) the same rule holds per column.
  test::expect_tensor_near(softmax(x.t().contiguous(), 0), {0.5, kNan, 0.0, kNan, 0.5, kNan}, {3, 2}, 1e-6, 1e-7,
                           "softmax dim 0");
}

TEST(Softmax, NanInARowMakesTheRowNan) {
  Tensor x = tensor({1.0, kNan, 2.0, 1.0, 2.0, 3.0}, TensorOptions(kFloat64)).view({2, 3});
  std::vector<double> p = softmax(x, 1).to_vector<double>();
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(std::isnan(p[k])) << k;
  EXPECT_FALSE(std::isnan(p[3]));
}

TEST(Softmax, ZeroSizeTensors) {
  EXPECT_EQ(softmax(zeros({0, 3}), 1).sizes(), (Shape{0, 3}));
  EXPECT_EQ(log_softmax(zeros({3, 0}), 1).sizes(), (Shape{3, 0}));
  EXPECT_EQ(softmax(zeros({2, 0}), 0).sizes(), (Shape{2, 0}));
}

TEST(Softmax, ErrorsNameTheOpAndTheValues) {
  test::expect_error([] { (void)softmax(zeros({2, 3}), 2); }, {"softmax", "dim 2", "out of range"});
  test::expect_error([] { (void)log_softmax(zeros({2, 3}), -3); }, {"log_softmax", "dim -3", "out of range"});
  test::expect_error([] { (void)softmax(zeros({2}, kInt64), 0); }, {"softmax", "floating point", "int64"});
  test::expect_error([] { (void)log_softmax(zeros({2}, kBool), 0); }, {"log_softmax", "floating point", "bool"});
}

TEST(Softmax, SameResultForAnyThreadCount) {
  const int before = get_num_threads();
  std::mt19937 rng(8);
  Tensor x = test::random_tensor({512, 300}, kFloat32, rng);
  for (int64_t dim : {0, 1}) {
    set_num_threads(1);
    std::vector<float> one = softmax(x, dim).to_vector<float>();
    set_num_threads(2);
    std::vector<float> two = softmax(x, dim).to_vector<float>();
    set_num_threads(before);
    EXPECT_EQ(one, two) << "dim " << dim;
  }
}

}  // namespace
}  // namespace kiln
