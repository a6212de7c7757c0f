// CUDA kernels for copy and fill: enough for tensors to live on a GPU and move between devices.
//
// Same-dtype copies of contiguous tensors are one cudaMemcpy in any direction. Everything else (a dtype
// conversion, a strided view) goes through the CPU for now: the storage is brought over whole, the CPU copy
// kernel does the work on views with the same offsets and strides, and the result goes back. Correct for
// every layout, but slow; the element-wise CUDA kernels (the CUDA backend issue) replace it.
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

// A CPU tensor viewing a CPU copy of x's whole storage with x's offset and strides (x on a GPU).
Tensor storage_to_cpu(const Tensor& x) {
  size_t nbytes = x.storage()->nbytes();
  auto host = std::make_shared<StorageImpl>(nbytes, kCPU);
  if (nbytes > 0) {
    cuda::DeviceGuard guard(x.device().index);
    KILN_CUDA_CHECK(cudaMemcpy(host->data(), x.storage()->data(), nbytes, cudaMemcpyDeviceToHost), "copy");
  }
  return Tensor(std::make_shared<TensorImpl>(host, x.dtype(), x.sizes(), x.strides(), x.storage_offset()));
}

void storage_to_device(const Tensor& host_view, const Tensor& device_tensor) {
  size_t nbytes = device_tensor.storage()->nbytes();
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(device_tensor.device().index);
  KILN_CUDA_CHECK(cudaMemcpy(device_tensor.storage()->data(), host_view.storage()->data(), nbytes, cudaMemcpyHostToDevice),
                  "copy");
}

// out and x have one shape; at least one is on a GPU.
void copy_cuda(const Tensor& out, const Tensor& x) {
  if (out.dtype() == x.dtype() && out.is_contiguous() && x.is_contiguous()) {
    int dev = out.device().is_cuda() ? out.device().index : x.device().index;
    cuda::DeviceGuard guard(dev);
    KILN_CUDA_CHECK(cudaMemcpy(out.raw_data_ptr(), x.raw_data_ptr(), out.nbytes(), cudaMemcpyDefault), "copy");
    return;
  }
  Tensor src = x.device().is_cpu() ? x : storage_to_cpu(x);
  Tensor dst = out.device().is_cpu() ? out : storage_to_cpu(out);
  get_kernel<Op::copy>(kCPU)(dst, src);
  if (out.device().is_cuda()) storage_to_device(dst, out);
}

template <typename T>
__global__ void fill_contiguous_kernel(T* out, int64_t n, T value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    out[i] = value;
}

void fill_cuda(const Tensor& out, const Scalar& value) {
  if (!out.is_contiguous()) {
    Tensor host = storage_to_cpu(out);
    get_kernel<Op::fill>(kCPU)(host, value);
    storage_to_device(host, out);
    return;
  }
  cuda::DeviceGuard guard(out.device().index);
  visit_dtype(out.dtype(), "fill", [&]<typename T>() {
    int64_t n = out.numel();
    int threads = 256;
    int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    fill_contiguous_kernel<T><<<blocks, threads>>>(static_cast<T*>(out.raw_data_ptr()), n, value.to<T>());
    KILN_CUDA_CHECK_LAUNCH("fill");
  });
}

}  // namespace

namespace detail {
void register_cuda_copy_kernels() {
  register_kernel<Op::copy>(DeviceType::CUDA, copy_cuda);
  register_kernel<Op::fill>(DeviceType::CUDA, fill_cuda);
}
}  // namespace detail
}  // namespace kiln
