// What kiln reports about the CUDA stack it runs on (see cuda.h: runtime_info).
#include <cstdio>
#include <string>

#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/cuda_check.h"

namespace kiln::cuda {

namespace {
// 13000 -> "13.0"; CUDA encodes major * 1000 + minor * 10.
std::string cuda_version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
// cuBLAS and cuDNN: major * 10000 + minor * 100 + patch (cuDNN 9 uses the same layout).
std::string library_version_str(int v) {
  if (v <= 0) return "not found";
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}
}  // namespace

std::string runtime_info() {
  std::string s;
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  if (cudaDriverGetVersion(&driver) != cudaSuccess) cudaGetLastError();
  s += "CUDA runtime " + cuda_version_str(runtime) + " (built with " + cuda_version_str(CUDART_VERSION) + ")\n";
  s += "CUDA driver " + (driver > 0 ? cuda_version_str(driver) : std::string("none")) + "\n";
  s += "cuBLAS " + library_version_str(cublas_version()) + "\n";
  s += "cuDNN " + library_version_str(cudnn_version()) + "\n";
  int n = device_count();
  s += "devices: " + std::to_string(n) + "\n";
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, d), "runtime_info");
    char line[256];
    std::snprintf(line, sizeof line, "  cuda:%d %s, sm_%d%d, %d multiprocessors, %.1f GiB\n", d, prop.name, prop.major,
                  prop.minor, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1 << 30));
    s += line;
  }
  return s;
}

}  // namespace kiln::cuda
