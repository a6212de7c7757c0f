// Printing: the expected strings are what PyTorch prints for the same tensors (with "torch." dropped from
// dtype names).
#include "test_util.h"

namespace kiln {
namespace {

TEST(Print, FloatsWithFourDecimals) {
  EXPECT_EQ(tensor({1.0, 2.5}).str(), "tensor([1.0000, 2.5000])");
  EXPECT_EQ(tensor({-1.5, 2.25}).str(), "tensor([-1.5000,  2.2500])");
  EXPECT_EQ(full({}, 3.5).str(), "tensor(3.5000)");
}

TEST(Print, IntegralFloatsPrintWithATrailingDot) {
  EXPECT_EQ(tensor({1.0, 2.0}).str(), "tensor([1., 2.])");
  EXPECT_EQ(tensor({1.0, 2.0}, kFloat64).str(), "tensor([1., 2.], dtype=float64)");
}

TEST(Print, ScientificWhenMagnitudesSpreadWide) {
  EXPECT_EQ(tensor({1e-5, 1.0}).str(), "tensor([1.0000e-05, 1.0000e+00])");
}

TEST(Print, IntegersAndBools) {
  EXPECT_EQ(arange(6).view({2, 3}).str(), "tensor([[0, 1, 2],\n        [3, 4, 5]])");
  EXPECT_EQ(tensor(std::vector<bool>{true, false}).str(), "tensor([ True, False])");
  EXPECT_EQ(tensor(std::vector<int32_t>{7, -12}).str(), "tensor([  7, -12], dtype=int32)");
}

TEST(Print, NonFiniteValues) {
  EXPECT_EQ(tensor({NAN, 1.5, INFINITY}).str(), "tensor([   nan, 1.5000,    inf])");
}

TEST(Print, EmptyTensorsShowTheirSize) {
  EXPECT_EQ(zeros({0}).str(), "tensor([])");
  EXPECT_EQ(zeros({0, 3}).str(), "tensor([], size=(0, 3))");
}

TEST(Print, ThreeDimsSeparateBlocksWithABlankLine) {
  EXPECT_EQ(arange(4).view({2, 1, 2}).str(), "tensor([[[0, 1]],\n\n        [[2, 3]]])");
}

TEST(Print, LargeTensorsAreSummarized) {
  EXPECT_EQ(arange(2000).str(), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  std::string two_d = zeros({2000, 2}).str();
  EXPECT_EQ(two_d,
            "tensor([[0., 0.],\n        [0., 0.],\n        [0., 0.],\n        ...,\n"
            "        [0., 0.],\n        [0., 0.],\n        [0., 0.]])");
}

TEST(Print, StreamOperatorAndUndefined) {
  std::ostringstream out;
  out << tensor({0.5});
  EXPECT_EQ(out.str(), "tensor([0.5000])");
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
}

}  // namespace
}  // namespace kiln
