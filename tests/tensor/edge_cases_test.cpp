// Edge cases found in review of the tensor layer, each once a silent wrong result or an unhelpful error.
#include <set>

#include "test_util.h"

namespace kiln {
namespace {

TEST(EdgeCases, GemmOperandsWithSizeOneDimsAndOddStrides) {
  // A one-element slice has strides no BLAS layout names directly; it once reached BLAS with ld = 0.
  Tensor v = arange(4.0, kFloat32).slice(0, 3, std::nullopt, 4);  // [3.], stride 4
  EXPECT_EQ(dot(v, v).item<float>(), 9.0f);
  Tensor m = arange(16.0, kFloat32).view({4, 4}).slice(0, 1, 2).slice(1, 1, 2);  // [[5.]], strides (4, 4)
  EXPECT_EQ(test::values(mm(m, ones({1, 3}))), (std::vector<double>{5, 5, 5}));
  Tensor p = arange(3.0, kFloat64).view({1, 1, 3}).permute({2, 1, 0});  // (3, 1, 1)
  EXPECT_EQ(test::values(bmm(p, ones({3, 1, 2}, kFloat64))), (std::vector<double>{0, 0, 1, 1, 2, 2}));
  // 1 x N and N x 1 views with non-unit strides, against a loop.
  Tensor base = arange(40.0, kFloat64).view({5, 8});
  Tensor row = base.slice(0, 2, 3).slice(1, 0, std::nullopt, 2);  // (1, 4), strides (8, 2)
  Tensor col = base.slice(1, 3, 4).slice(0, 1, 5);                // (4, 1), strides (8, 8)
  std::vector<double> r = test::values(row), c = test::values(col);
  double want = 0;
  for (int i = 0; i < 4; ++i) want += r[i] * c[i];
  EXPECT_EQ(mm(row, col).item<double>(), want);
  std::vector<double> outer_want;
  for (double x : c)
    for (double y : r) outer_want.push_back(x * y);
  EXPECT_EQ(test::values(mm(col, row)), outer_want);
}

TEST(EdgeCases, MatmulWithEmptyInnerDimAndBatch) {
  EXPECT_EQ(test::values(matmul(zeros({2, 3, 0}), zeros({0, 4}))), std::vector<double>(24, 0.0));
}

TEST(EdgeCases, InPlaceIntoExpandedTensorsIsAnError) {
  Tensor x = ones({1});
  Tensor e = x.expand({3});
  test::expect_error([&] { neg_(e); }, {"neg_", "expanded"});
  test::expect_error([&] { clamp_(e, 0.0, 0.5); }, {"clamp_", "expanded"});
  EXPECT_EQ(x.item<float>(), 1.0f);
}

TEST(EdgeCases, SizesThatOverflowAreErrors) {
  test::expect_error([] { (void)empty({int64_t{1} << 40, int64_t{1} << 40}); }, {"int64"});
  test::expect_error([] { (void)empty({int64_t{1} << 61}, kFloat64); }, {"empty", "bytes"});
  test::expect_error([] { (void)zeros({4}).narrow(0, 1, INT64_MAX); }, {"narrow", "out of range"});
  EXPECT_EQ(zeros({4}).slice(0, 1, std::nullopt, INT64_MAX).sizes(), (Shape{1}));
}

TEST(EdgeCases, SixteenBitUniformStaysBelowOne) {
  for (DType d : {kFloat16, kBFloat16}) {
    Generator g(9);
    std::vector<float> v = rand({1 << 20}, d, &g).to(kFloat32).to_vector<float>();
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0f) << d;
  }
}

TEST(EdgeCases, LargeInt64ValuesSurvivePrintingAndClamp) {
  Tensor t = tensor(std::vector<int64_t>{9007199254740993, INT64_MAX});
  EXPECT_EQ(t.str(), "tensor([   9007199254740993, 9223372036854775807])");
  EXPECT_EQ(clamp(t, 0, std::nullopt).to_vector<int64_t>(), (std::vector<int64_t>{9007199254740993, INT64_MAX}));
}

TEST(EdgeCases, LinspaceEndsExactlyOnEnd) {
  for (int64_t steps = 2; steps < 200; ++steps) {
    for (double end : {1.0, 0.3, 7.1, -2.9}) {
      std::vector<double> v = linspace(0.1, end, steps, kFloat64).to_vector<double>();
      ASSERT_EQ(v.front(), 0.1);
      ASSERT_EQ(v.back(), end) << steps;
      for (int64_t i = 0; i < steps; ++i)
        ASSERT_NEAR(v[i], 0.1 + (end - 0.1) * static_cast<double>(i) / (steps - 1), 1e-14) << steps << " " << i;
    }
  }
}

TEST(EdgeCases, IntegerProductsRejectFractionalScales) {
  Tensor i = ones({2, 2}, kInt64);
  test::expect_error([&] { (void)addmm(i, i, i, 0.5); }, {"addmm", "beta", "int64"});
}

TEST(EdgeCases, RandomIntegersMustFitTheirDtype) {
  test::expect_error([] { (void)randint(0, 1000, {5}, kUInt8); }, {"randint", "[0, 1000)", "uint8"});
  test::expect_error([] { (void)randperm(300, kUInt8); }, {"randperm", "uint8"});
  for (int64_t x : randint(250, 256, {100}, kUInt8).to_vector<int64_t>()) EXPECT_GE(x, 250);
}

TEST(EdgeCases, IntegerPowerDoesNotOverflowNeedlessly) {
  EXPECT_EQ(pow(full({2}, 50000, kInt32), 1).to_vector<int32_t>(), (std::vector<int32_t>{50000, 50000}));
  EXPECT_EQ(pow(full({1}, 3, kInt64), 5).item<int64_t>(), 243);
}

TEST(EdgeCases, PrintingWidthAndEmptyDtypes) {
  EXPECT_EQ(tensor({-INFINITY, 1.0}).str(), "tensor([-inf, 1.])");
  EXPECT_EQ(zeros({0}, kInt64).str(), "tensor([], dtype=int64)");
  EXPECT_EQ(zeros({0}, kBool).str(), "tensor([], dtype=bool)");
}

TEST(EdgeCases, ClearErrorsForBadSizes) {
  test::expect_error([] { (void)arange(5.0).unfold(0, -1, 1); }, {"unfold", "non-negative"});
  test::expect_error([] { (void)eye(2, -5); }, {"eye", "m = -5"});
  test::expect_error([] { (void)ones({1}).expand({-2}); }, {"expand", "-2"});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(EdgeCases, IntegerArangeIsExactBeyondTwoToThe53) {
  const int64_t big = int64_t{1} << 53;
  EXPECT_EQ(arange(big + 1, big + 5).to_vector<int64_t>(), (std::vector<int64_t>{big + 1, big + 2, big + 3, big + 4}));
  EXPECT_EQ(arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(arange(0, 10, 5).numel(), 2);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(EdgeCases, RandintIsExactOverTheWholeInt64Range) {
  const int64_t big = int64_t{1} << 53;
  std::vector<int64_t> v = randint(big, big + 3, {3000}).to_vector<int64_t>();
  for (int64_t x : v) ASSERT_TRUE(x >= big && x < big + 3) << x;
  EXPECT_EQ(std::set<int64_t>(v.begin(), v.end()).size(), 3u);
  std::vector<int64_t> w = randint(INT64_MIN, INT64_MAX, {1000}).to_vector<int64_t>();
  EXPECT_LT(*std::min_element(w.begin(), w.end()), 0);
  EXPECT_GT(*std::max_element(w.begin(), w.end()), 0);
}

}  // namespace
}  // namespace kiln
