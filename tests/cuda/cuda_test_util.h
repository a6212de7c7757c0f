// What the GPU tests share: a fixture that skips without a device and poisons fresh device memory, and the
// comparison of a CUDA result with the CPU kernel's result on the same inputs.
#pragma once

#include <cmath>
#include <random>
#include <string>

#include "kiln/tensor/cuda/cuda.h"
#include "tensor/test_util.h"

namespace kiln::test {

// A new seed per run, so runs cover more inputs over time; a test names it in its failure messages.
inline uint32_t fresh_seed() {
  static std::random_device device;
  return device();
}

// Skips where no CUDA device is present. Every allocation on the device is filled with 0xFF bytes first
// (NaN for floats, -1 for integers), so a kernel that leaves part of its output unwritten fails the comparison.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    cuda::set_poison_allocations(true);
  }
  void TearDown() override {
    if (!cuda::is_available()) return;
    cuda::synchronize();  // a fault inside a kernel surfaces here, in the test that caused it
    cuda::set_poison_allocations(false);
  }
};

// Default tolerances of a CUDA result against the CPU's: the GPU's math library and summation order differ from
// the CPU's by a few ulps in float32; 16-bit floats by one rounding of the output.
inline double cuda_rtol(DType d) {
  switch (d) {
    case kFloat64: return 1e-12;
    case kFloat32: return 1e-5;
    case kFloat16: return 2e-3;
    case kBFloat16: return 1.6e-2;
    default: return 0;
  }
}

// gpu (on a CUDA device) equals cpu (the CPU kernel's answer): same shape and dtype; integers and bools exactly,
// floats within rtol * max(1, |cpu|) + atol; NaN where and only where the CPU has NaN; infinities exactly.
inline void expect_matches_cpu(const Tensor& gpu, const Tensor& cpu, const std::string& context, double rtol = -1,
                               double atol = 0) {
  ASSERT_TRUE(gpu.is_cuda()) << context << ": the result is not on the GPU";
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << context;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << context;
  if (rtol < 0) rtol = cuda_rtol(cpu.dtype());
  std::vector<double> g = values(gpu.cpu()), c = values(cpu);
  int bad = 0;
  for (size_t i = 0; i < c.size() && bad < 5; ++i) {
    bool ok;
    if (std::isnan(c[i])) ok = std::isnan(g[i]);
    else if (std::isinf(c[i])) ok = g[i] == c[i];
    else ok = std::abs(g[i] - c[i]) <= rtol * std::max(1.0, std::abs(c[i])) + atol;
    if (!ok) {
      ++bad;
      ADD_FAILURE() << context << ": element " << i << " is " << g[i] << " on the GPU, " << c[i] << " on the CPU";
    }
  }
}

// x's copy on the GPU with x's very layout (strides and storage offset): the whole storage is copied and viewed
// the same way, so strided and transposed inputs reach the CUDA kernels as they are.
inline Tensor same_layout_on_gpu(const Tensor& x) {
  int64_t span = x.storage_offset() + 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 0) return empty(x.sizes(), TensorOptions(x.dtype()).device(Device::cuda()));
    span += (x.size(d) - 1) * x.stride(d);
  }
  Tensor base = x.as_strided({span}, {1}, 0).to(Device::cuda());
  return base.as_strided(x.sizes(), x.strides(), x.storage_offset());
}

}  // namespace kiln::test
