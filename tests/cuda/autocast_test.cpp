// Mixed precision on the GPU: autocast's policy for CUDA tensors, a float16 training loop with a GradScaler
// against the same loop on the CPU (same policy, same casts; the devices differ in their 16-bit products'
// summation order), and the scaler's skipped step on an overflow. The CPU-side logic is tested in
// tests/nn/autocast_test.cpp and tests/optim/grad_scaler_test.cpp.
#include "cuda/cuda_test_util.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

using test::CudaTest;
namespace F = nn::functional;

TEST_F(CudaTest, AutocastPolicyOnCudaTensors) {
  Tensor a = randn({8, 16}).to(Device::cuda()), b = randn({16, 4}).to(Device::cuda());
  AutocastGuard ac(DeviceType::CUDA, kFloat16);
  Tensor h = mm(a, b);
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_EQ(relu(h).dtype(), kFloat16);
  EXPECT_EQ(log_softmax(h, 1).dtype(), kFloat32);
  EXPECT_EQ(F::cross_entropy(h, tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}).to(Device::cuda())).dtype(), kFloat32);
  EXPECT_EQ(mm(a.cpu(), b.cpu()).dtype(), kFloat32);  // a CUDA guard leaves CPU tensors alone
}

TEST_F(CudaTest, Float16TrainingWithAScalerMatchesTheCpu) {
  manual_seed(3);
  auto make = [] { return nn::Sequential(nn::Linear(32, 64), nn::ReLU(), nn::Linear(64, 5)); };
  auto cpu = make();
  auto gpu = make();
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(Device::cuda());
  optim::Adam cpu_opt(cpu->parameters(), {.lr = 1e-2}), gpu_opt(gpu->parameters(), {.lr = 1e-2});
  optim::GradScaler cpu_scaler, gpu_scaler;
  Generator g(11);
  Tensor x = randn({64, 32}, {}, &g), y = randint(5, {64}, kInt64, &g);
  for (int step = 0; step < 5; ++step) {
    for (auto [model, opt, scaler, dev] : {std::tuple{&cpu, &cpu_opt, &cpu_scaler, Device(kCPU)},
                                           std::tuple{&gpu, &gpu_opt, &gpu_scaler, Device::cuda()}}) {
      opt->zero_grad();
      Tensor loss;
      {
        AutocastGuard ac(dev.type, kFloat16);
        loss = F::cross_entropy((*model)(x.to(dev)), y.to(dev));
      }
      EXPECT_EQ(loss.dtype(), kFloat32);
      scaler->scale(loss).backward();
      scaler->step(*opt);
      scaler->update();
    }
  }
  EXPECT_EQ(gpu_scaler.get_scale(), cpu_scaler.get_scale());
  auto gp = gpu->named_parameters(), cp = cpu->named_parameters();
  for (size_t i = 0; i < gp.size(); ++i) {
    EXPECT_EQ(gp[i].second.dtype(), kFloat32);
    test::expect_matches_cpu(gp[i].second.detach(), cp[i].second.detach(), cp[i].first, 2e-2, 2e-3);
  }
}

TEST_F(CudaTest, ScalerSkipsTheStepOnAnOverflowedCudaGradient) {
  Tensor p = tensor(std::vector<float>{1.0f, 2.0f}).to(Device::cuda()).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 1024.0});
  p.set_grad(tensor(std::vector<float>{INFINITY, 1.0f}).to(Device::cuda()));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(test::values(p.cpu()), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(scaler.get_scale(), 512.0);
}

}  // namespace
}  // namespace kiln
