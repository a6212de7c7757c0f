// Device discovery and device memory.
//
// NOTE: on a machine without a GPU or without its driver, cudaGetDeviceCount fails ("CUDA driver version is
// insufficient for CUDA runtime version", "no CUDA-capable device is detected"). kiln treats any such
// failure as zero devices, so a CUDA build runs its CPU work anywhere.
//
// The allocator is plain cudaMalloc/cudaFree for now (never managed memory); the caching allocator with
// per-stream reuse and statistics comes with the CUDA backend.
#include <mutex>

#include "kiln/tensor/allocator.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/ops/register.h"

namespace kiln::cuda {

int device_count() {
  static int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls do not report it
      return 0;
    }
    return n;
  }();
  return count;
}

void synchronize(int device) {
  if (device_count() == 0) return;
  if (device < 0) {
    KILN_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
    return;
  }
  DeviceGuard guard(device);
  KILN_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
}

namespace {

void check_device(Device device, const char* what) {
  int n = device_count();
  KILN_CHECK(n > 0, what, ": no CUDA device is available on this machine (asked for ", device, ")");
  KILN_CHECK(device.index >= 0 && device.index < n, what, ": ", device, " does not exist (this machine has ", n,
             " CUDA device", n == 1 ? "" : "s", ")");
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    check_device(device, "allocate");
    if (nbytes == 0) return nullptr;
    DeviceGuard guard(device.index);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      detail::throw_error(detail::concat("CUDA out of memory: tried to allocate ", nbytes, " bytes on ", device, " (",
                                         free_b, " of ", total_b, " bytes free): ", cudaGetErrorString(err)));
    }
    return p;
  }
  void deallocate(void* ptr, size_t, Device device) override {
    if (ptr == nullptr) return;
    DeviceGuard guard(device.index);
    cudaFree(ptr);  // NOTE: errors here cannot be thrown (called from destructors); a later check reports them
  }
};

}  // namespace

Allocator* cuda_allocator() {
  static CudaAllocator allocator;
  return &allocator;
}

}  // namespace kiln::cuda

namespace kiln::detail {

void register_cuda_copy_kernels();  // copy_cuda.cu

void register_cuda_kernels() {
  register_cuda_copy_kernels();
}

}  // namespace kiln::detail
