// Tensors on a GPU: allocation, copies in every direction, conversion and fill, compared with the same work on
// the CPU. Labeled `gpu`; every test skips where no CUDA device is present.
#include "kiln/tensor/dispatch.h"
#include "test_util.h"

namespace kiln {
namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(Cuda, RoundTripKeepsEveryDtypeAndLayout) {
  std::mt19937 rng(30);
  for (DType d : test::kAllDTypes) {
    for (test::Layout layout : test::kLayouts) {
      Tensor x = test::random_tensor({5, 7}, d, rng, layout);
      Tensor g = x.to(Device::cuda());
      EXPECT_TRUE(g.is_cuda());
      EXPECT_EQ(test::values(g.cpu()), test::values(x)) << d << " " << test::layout_name(layout);
    }
  }
}

TEST_F(Cuda, ConversionAndStridedCopiesOnTheDevice) {
  std::mt19937 rng(31);
  Tensor x = test::random_tensor({6, 4}, kFloat32, rng);
  Tensor g = x.to(Device::cuda());
  EXPECT_EQ(test::values(g.to(kFloat64).cpu()), test::values(x.to(kFloat64)));
  Tensor gt = g.t().contiguous();  // strided device-to-device copy
  EXPECT_EQ(test::values(gt.cpu()), test::values(x.t()));
  Tensor z = zeros({4, 6}, Device::cuda());
  z.narrow(0, 1, 2).copy_(x.t().narrow(0, 1, 2));
  std::vector<double> want(24, 0.0), xt = test::values(x.t());
  for (int i = 6; i < 18; ++i) want[i] = xt[i];
  EXPECT_EQ(test::values(z.cpu()), want);
}

TEST_F(Cuda, FillAndFactories) {
  EXPECT_EQ(test::values(full({3}, 2.5, Device::cuda()).cpu()), (std::vector<double>{2.5, 2.5, 2.5}));
  EXPECT_EQ(test::values(ones({2}, TensorOptions(kInt32).device(Device::cuda())).cpu()), (std::vector<double>{1, 1}));
  EXPECT_EQ(full({2}, 1.0, Device::cuda()).str(), "tensor([1., 1.], device='cuda:0')");
}

TEST_F(Cuda, OpsWithoutACudaKernelSayWhich) {
  Tensor g = ones({2}, Device::cuda());
  auto previous = register_kernel<Op::exp>(DeviceType::CUDA, nullptr);  // as if exp had no CUDA kernel
  test::expect_error([&] { (void)exp(g); }, {"exp", "CUDA"});
  register_kernel<Op::exp>(DeviceType::CUDA, previous);
}

TEST_F(Cuda, RuntimeInfoNamesTheStackAndEveryDevice) {
  std::string info = cuda::runtime_info();
  for (const char* part : {"CUDA runtime", "CUDA driver", "cuBLAS", "cuDNN", "cuda:0", "sm_"})
    EXPECT_NE(info.find(part), std::string::npos) << part << " missing from:\n" << info;
}

TEST_F(Cuda, MissingDeviceIsAClearError) {
  test::expect_error([] { (void)empty({1}, Device::cuda(63)); }, {"cuda:63", "does not exist"});
}

}  // namespace
}  // namespace kiln
