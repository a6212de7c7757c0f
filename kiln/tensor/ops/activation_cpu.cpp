// CPU kernels of the fused activations (activation_kind.h): each kind's functors from elementwise_functors.h
// through cpu_kernel, one pass for the value and one for the gradient.
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/ops/loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

template <typename F>
void forward(const Tensor& out, const Tensor& x, const F& f, const char* name) {
  visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<T, T>(out, f, x); });
}

template <typename F>
void backward(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const F& f, const char* name) {
  visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<T, T, T>(grad_x, f, grad_y, x); });
}

void activation_cpu(const Tensor& out, const Tensor& x, Activation kind, const ActivationParams& p) {
  switch (kind) {
#define KILN_ACTIVATION_CASE(k, Forward, Backward) \
  case Activation::k: return forward(out, x, functors::Forward(p), #k);
    KILN_FORALL_ACTIVATIONS(KILN_ACTIVATION_CASE)
#undef KILN_ACTIVATION_CASE
  }
}

void activation_backward_cpu(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, Activation kind,
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
void register_activation_cpu_kernels() {
  register_kernel<Op::activation>(DeviceType::CPU, activation_cpu);
  register_kernel<Op::activation_backward>(DeviceType::CPU, activation_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
