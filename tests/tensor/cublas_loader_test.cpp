// cuBLAS is opened on first use, not linked (kiln/tensor/cuda/cublas_loader.h): CPU work in a CUDA build never
// maps it (it costs 150 MB of memory), and asking for its version opens it where the toolkit is installed,
// which also checks that every entry point kiln calls resolves. Read from /proc/self/maps, not from kiln.
#include <fstream>
#include <string>

#include "test_util.h"

namespace kiln {
namespace {

bool process_maps(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}

TEST(CublasLoader, CpuWorkLeavesItUnloadedAndItOpensOnDemand) {
#ifndef KILN_WITH_CUDA
  GTEST_SKIP() << "a build without CUDA";
#else
  Tensor a = randn({64, 64}).requires_grad_();
  Tensor loss = matmul(a, a.t()).relu().sum();
  loss.backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(process_maps("libcublas")) << "CPU work mapped cuBLAS";
  const int v = cuda::cublas_version();
  if (v == 0) GTEST_SKIP() << "no cuBLAS library on this machine";
  EXPECT_GE(v / 10000, 11) << v;
  EXPECT_TRUE(process_maps("libcublas"));
#endif
}

}  // namespace
}  // namespace kiln
