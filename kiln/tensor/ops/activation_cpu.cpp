// CPU kernels of the fused activations (activation_kind.h): each kind's functors from elementwise_functors.h
// through cpu_kernel, one pass for the value and one for the gradient.
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/ops/loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

void activation_cpu(const Tensor& out, const Tensor& x, Activation kind, const ActivationParams& p) {
  functors::visit_activation<false>(kind, p, [&](const auto& f, const char* name) {
    visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<T, T>(out, f, x); });
  });
}

void activation_backward_cpu(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, Activation kind,
                             const ActivationParams& p) {
  functors::visit_activation<true>(kind, p, [&](const auto& f, const char* name) {
    visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<T, T, T>(grad_x, f, grad_y, x); });
  });
}

}  // namespace

namespace detail {
void register_activation_cpu_kernels() {
  register_kernel<Op::activation>(DeviceType::CPU, activation_cpu);
  register_kernel<Op::activation_backward>(DeviceType::CPU, activation_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
