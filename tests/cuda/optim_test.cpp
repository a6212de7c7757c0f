// The fused optimizer kernels on the GPU (kiln/tensor/cuda/optim_cuda.cu) against the CPU's on the same lists.
// The lists are built to reach every path of the multi-tensor launcher: more parameters than one launch holds,
// empty ones, a parameter of two chunks, and one whose chunks fill a launch's block table and carry over into the
// next launch. The two devices apply the same per-element functors, so they agree to float rounding (the CUDA
// compiler may contract a multiply and an add where the CPU's does not).
#include <random>

#include "cuda/cuda_test_util.h"
#include "kiln/optim/optim.h"
#include "kiln/tensor/ops/fused_optim.h"

namespace kiln {
namespace {

using test::CudaTest;

class FusedOptimCuda : public CudaTest {};

// Sizes: more than 32 tensors (one launch's slots), 0, 1, odd sizes, 65536 + 1 (two chunks of one block each),
// and 320 * 65536 + 5 (more chunks than one launch's 320 blocks, after the others have filled part of it).
std::vector<int64_t> list_sizes() {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back(i % 7 == 3 ? 0 : 1 + i * 37);
  sizes.push_back(65537);
  sizes.push_back(320 * 65536 + 5);
  sizes.push_back(1);
  return sizes;
}

std::vector<Tensor> random_list(const std::vector<int64_t>& sizes, DType d, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (int64_t n : sizes) out.push_back(rand({n}, TensorOptions(d), &gen) * (hi - lo) + lo);
  return out;
}

std::vector<Tensor> to_gpu(const std::vector<Tensor>& list) {
  std::vector<Tensor> out;
  for (const Tensor& t : list) out.push_back(t.to(Device::cuda()));
  return out;
}

void expect_lists_match(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu, const std::string& what) {
  for (size_t k = 0; k < cpu.size(); ++k) {
    test::expect_matches_cpu(gpu[k], cpu[k], what + " " + std::to_string(k));
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_F(FusedOptimCuda, SgdMatchesTheCpuOverEveryLauncherPath) {
  const auto sizes = list_sizes();
  for (DType d : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(d));
    std::vector<Tensor> p = random_list(sizes, d, 1, -1, 1), g = random_list(sizes, d, 2, -1, 1),
                        buf = random_list(sizes, d, 3, -1, 1);
    std::vector<Tensor> gp = to_gpu(p), gg = to_gpu(g), gbuf = to_gpu(buf);
    const SgdStepParams s{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .maximize = true};
    for (int t = 0; t < 2; ++t) {
      SgdStepParams st = s;
      st.first = t == 0;
      ops::fused_sgd_step_(p, g, buf, st);
      ops::fused_sgd_step_(gp, gg, gbuf, st);
    }
    expect_lists_match(gp, p, "parameter");
    expect_lists_match(gbuf, buf, "momentum buffer");
    // Without momentum no buffer list is passed.
    ops::fused_sgd_step_(p, g, {}, {.lr = 0.5, .nesterov = false});
    ops::fused_sgd_step_(gp, gg, {}, {.lr = 0.5, .nesterov = false});
    expect_lists_match(gp, p, "parameter after plain SGD");
  }
}

TEST_F(FusedOptimCuda, AdamMatchesTheCpuWithPerParameterStepCounts) {
  const auto sizes = list_sizes();
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    const DType d = kFloat32;
    std::vector<Tensor> p = random_list(sizes, d, 4, -1, 1), g = random_list(sizes, d, 5, -1, 1),
                        m = random_list(sizes, d, 6, -0.1, 0.1), v = random_list(sizes, d, 7, 0, 0.01);
    std::vector<Tensor> gp = to_gpu(p), gg = to_gpu(g), gm = to_gpu(m), gv = to_gpu(v);
    std::vector<double> steps;
    for (size_t k = 0; k < sizes.size(); ++k) steps.push_back(1 + static_cast<double>(k % 5));
    const AdamStepParams s{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
                           .decoupled = decoupled};
    ops::fused_adam_step_(p, g, m, v, steps, s);
    ops::fused_adam_step_(gp, gg, gm, gv, steps, s);
    expect_lists_match(gp, p, "parameter");
    expect_lists_match(gm, m, "exp_avg");
    expect_lists_match(gv, v, "exp_avg_sq");
  }
}

// Through the optimizers: a CUDA parameter list takes the fused kernel, and the result is the CPU's.
TEST_F(FusedOptimCuda, OptimizersOnTheGpuMatchTheCpu) {
  const std::vector<int64_t> sizes = {5, 300, 0, 70000};
  std::vector<Tensor> cpu = random_list(sizes, kFloat32, 8, -1, 1), gpu = to_gpu(cpu);
  for (auto& t : cpu) t.requires_grad_();
  for (auto& t : gpu) t.requires_grad_();
  optim::Adam cpu_opt(cpu, {.lr = 1e-2}), gpu_opt(gpu, {.lr = 1e-2});
  for (int t = 0; t < 3; ++t) {
    std::vector<Tensor> g = random_list(sizes, kFloat32, 9 + t, -1, 1);
    for (size_t k = 0; k < sizes.size(); ++k) {
      cpu[k].set_grad(g[k]);
      gpu[k].set_grad(g[k].to(Device::cuda()));
    }
    cpu_opt.step();
    gpu_opt.step();
  }
  for (size_t k = 0; k < sizes.size(); ++k) test::expect_matches_cpu(gpu[k].detach(), cpu[k].detach(), "Adam");
}

}  // namespace
}  // namespace kiln
