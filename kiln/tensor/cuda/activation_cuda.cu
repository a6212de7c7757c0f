// CUDA kernels of the fused activations (activation_kind.h): the functors the CPU runs (activation_cpu.cpp),
// applied by cuda_kernel.
#include "kiln/tensor/cuda/loops_cuda.cuh"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"

namespace kiln {
namespace {

void activation_cuda(const Tensor& out, const Tensor& x, Activation kind, const ActivationParams& p) {
  functors::visit_activation<false>(kind, p, [&](const auto& f, const char* name) {
    visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() { cuda::cuda_kernel<T, T>(name, out, f, x); });
  });
}

void activation_backward_cuda(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, Activation kind,
                              const ActivationParams& p) {
  functors::visit_activation<true>(kind, p, [&](const auto& f, const char* name) {
    visit_dtype<kFloatingSet>(x.dtype(), name,
                              [&]<typename T>() { cuda::cuda_kernel<T, T, T>(name, grad_x, f, grad_y, x); });
  });
}

}  // namespace

namespace detail {
void register_cuda_activation_kernels() {
  register_kernel<Op::activation>(DeviceType::CUDA, activation_cuda);
  register_kernel<Op::activation_backward>(DeviceType::CUDA, activation_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
