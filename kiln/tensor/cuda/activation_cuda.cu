// CUDA kernels of the fused activations (activation_kind.h): the functors the CPU runs (activation_cpu.cpp),
// applied by cuda_kernel.
#include "kiln/tensor/cuda/loops_cuda.cuh"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"

namespace kiln {
namespace {

template <typename F>
void forward(const Tensor& out, const Tensor& x, const F& f, const char* name) {
  visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() { cuda::cuda_kernel<T, T>(name, out, f, x); });
}

template <typename F>
void backward(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const F& f, const char* name) {
  visit_dtype<kFloatingSet>(x.dtype(), name,
                            [&]<typename T>() { cuda::cuda_kernel<T, T, T>(name, grad_x, f, grad_y, x); });
}

void activation_cuda(const Tensor& out, const Tensor& x, Activation kind, const ActivationParams& p) {
  switch (kind) {
#define KILN_ACTIVATION_CASE(k, Forward, Backward) \
  case Activation::k: return forward(out, x, functors::Forward(p), #k);
    KILN_FORALL_ACTIVATIONS(KILN_ACTIVATION_CASE)
#undef KILN_ACTIVATION_CASE
  }
}

void activation_backward_cuda(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, Activation kind,
                              const ActivationParams& p) {
  switch (kind) {
#define KILN_ACTIVATION_CASE(k, Forward, Backward) \
  case Activation::k: return backward(grad_x, grad_y, x, functors::Backward(p), #k "_backward");
    KILN_FORALL_ACTIVATIONS(KILN_ACTIVATION_CASE)
#undef KILN_ACTIVATION_CASE
  }
}

}  // namespace

namespace detail {
void register_cuda_activation_kernels() {
  register_kernel<Op::activation>(DeviceType::CUDA, activation_cuda);
  register_kernel<Op::activation_backward>(DeviceType::CUDA, activation_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
