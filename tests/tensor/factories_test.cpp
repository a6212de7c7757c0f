// Factories: shapes, dtypes and values of every way to make a tensor.
#include "test_util.h"

namespace kiln {
namespace {

using test::values;

TEST(Factories, ZerosOnesFull) {
  EXPECT_EQ(values(zeros({2, 2})), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(values(ones({3}, kInt32)), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(ones({3}, kInt32).dtype(), kInt32);
  EXPECT_EQ(full({2}, 7).dtype(), kInt64);  // dtype follows the value, as torch.full
  EXPECT_EQ(full({2}, 7.5).dtype(), kFloat32);
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(values(full({2}, 7.5, kFloat64)), (std::vector<double>{7.5, 7.5}));
  EXPECT_EQ(scalar_tensor(4).dim(), 0);
  test::expect_error([] { (void)zeros({2, -1}); }, {"negative size", "(2, -1)"});
}

TEST(Factories, Arange) {
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(values(arange(5)), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(arange(2, 11, 3)), (std::vector<double>{2, 5, 8}));
  EXPECT_EQ(values(arange(3, 0, -1)), (std::vector<double>{3, 2, 1}));
  Tensor f = arange(0, 1, 0.25);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(values(f), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(arange(0, 1, 0.1).numel(), 10);
  EXPECT_EQ(arange(0).numel(), 0);
  test::expect_error([] { (void)arange(0, 5, 0); }, {"arange", "step"});
  test::expect_error([] { (void)arange(5, 0, 1); }, {"arange", "[5, 0)"});
}

TEST(Factories, LinspaceAndEye) {
  Tensor l = linspace(-1, 1, 5, kFloat64);
  EXPECT_EQ(values(l), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(values(linspace(3, 3, 1)), (std::vector<double>{3}));
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  EXPECT_EQ(values(eye(2, 3)), (std::vector<double>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(values(eye(2)), (std::vector<double>{1, 0, 0, 1}));
}

TEST(Factories, LikeFactoriesFollowTheirModel) {
  Tensor x = zeros({2, 3}, kFloat64);
  EXPECT_EQ(ones_like(x).dtype(), kFloat64);
  EXPECT_EQ(ones_like(x).sizes(), x.sizes());
  EXPECT_EQ(zeros_like(x, kInt32).dtype(), kInt32);
  EXPECT_EQ(values(full_like(x, 2)), (std::vector<double>(6, 2)));
  EXPECT_EQ(empty_like(x).sizes(), x.sizes());
  EXPECT_EQ(rand_like(x).dtype(), kFloat64);
  EXPECT_EQ(randn_like(x).sizes(), x.sizes());
}

TEST(Factories, FromVectorsAndBuffers) {
  Tensor t = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.sizes(), (Shape{2, 3}));
  EXPECT_EQ(tensor(std::vector<double>{1, 2}, {}, kFloat16).dtype(), kFloat16);
  EXPECT_EQ(values(tensor(std::vector<bool>{true, false, true})), (std::vector<double>{1, 0, 1}));
  test::expect_error([] { (void)tensor(std::vector<float>{1, 2, 3}, {2, 2}); }, {"tensor", "3 values", "(2, 2)"});
  std::vector<int32_t> raw{10, 20, 30, 40, 50, 60};
  Tensor strided = from_blob(raw.data(), {3}, {2}, kInt32);
  EXPECT_EQ(values(strided), (std::vector<double>{10, 30, 50}));
  EXPECT_EQ(values(from_buffer(raw.data(), {2, 3}, kInt32, kFloat64)), (std::vector<double>{10, 20, 30, 40, 50, 60}));
}

}  // namespace
}  // namespace kiln
