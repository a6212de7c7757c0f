// CPU kernels of the element-wise unary ops: each applies a functor from elementwise_functors.h through
// cpu_kernel (loops_cpu.h), which handles strides, threads and vectorization.
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/ops/loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

// out and x share a dtype from Set.
template <uint32_t Set, typename F>
void same_dtype(const char* name, const Tensor& out, const Tensor& x, const F& f) {
  visit_dtype<Set>(x.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<T, T>(out, f, x); });
}

// out is bool.
template <typename F>
void to_bool(const char* name, const Tensor& out, const Tensor& x, const F& f) {
  visit_dtype(x.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<bool, T>(out, f, x); });
}

#define KILN_UNARY_CPU(op, Set, Functor) \
  void op##_cpu(const Tensor& out, const Tensor& x) { same_dtype<Set>(#op, out, x, functors::Functor{}); }
KILN_UNARY_CPU(neg, kNumericSet, Neg)
KILN_UNARY_CPU(abs, kNumericSet, Abs)
KILN_UNARY_CPU(sign, kNumericSet, Sign)
KILN_UNARY_CPU(relu, kNumericSet, Relu)
KILN_UNARY_CPU(exp, kFloatingSet, Exp)
KILN_UNARY_CPU(log, kFloatingSet, Log)
KILN_UNARY_CPU(log1p, kFloatingSet, Log1p)
KILN_UNARY_CPU(expm1, kFloatingSet, Expm1)
KILN_UNARY_CPU(erf, kFloatingSet, Erf)
KILN_UNARY_CPU(sqrt, kFloatingSet, Sqrt)
KILN_UNARY_CPU(rsqrt, kFloatingSet, Rsqrt)
KILN_UNARY_CPU(sin, kFloatingSet, Sin)
KILN_UNARY_CPU(cos, kFloatingSet, Cos)
KILN_UNARY_CPU(tanh, kFloatingSet, Tanh)
KILN_UNARY_CPU(sigmoid, kFloatingSet, Sigmoid)
KILN_UNARY_CPU(gelu, kFloatingSet, Gelu)
KILN_UNARY_CPU(gelu_tanh, kFloatingSet, GeluTanh)
KILN_UNARY_CPU(silu, kFloatingSet, Silu)
#undef KILN_UNARY_CPU

void logical_not_cpu(const Tensor& out, const Tensor& x) { to_bool("logical_not", out, x, functors::LogicalNot{}); }
void isnan_cpu(const Tensor& out, const Tensor& x) { to_bool("isnan", out, x, functors::IsNan{}); }
void isinf_cpu(const Tensor& out, const Tensor& x) { to_bool("isinf", out, x, functors::IsInf{}); }

void softplus_cpu(const Tensor& out, const Tensor& x, double beta, double threshold) {
  same_dtype<kFloatingSet>("softplus", out, x, functors::Softplus{beta, threshold});
}
void pow_scalar_cpu(const Tensor& out, const Tensor& x, double exponent, double) {
  same_dtype<kNumericSet>("pow", out, x, functors::PowScalar{exponent});
}
void clamp_cpu(const Tensor& out, const Tensor& x, double lo, double hi) {
  same_dtype<kNumericSet>("clamp", out, x, functors::Clamp{lo, hi});
}
void leaky_relu_cpu(const Tensor& out, const Tensor& x, double slope, double) {
  same_dtype<kFloatingSet>("leaky_relu", out, x, functors::LeakyRelu{slope});
}

}  // namespace

namespace detail {
void register_unary_cpu_kernels() {
#define KILN_REGISTER(op) register_kernel<Op::op>(DeviceType::CPU, op##_cpu);
  KILN_REGISTER(neg)
  KILN_REGISTER(abs)
  KILN_REGISTER(sign)
  KILN_REGISTER(relu)
  KILN_REGISTER(exp)
  KILN_REGISTER(log)
  KILN_REGISTER(log1p)
  KILN_REGISTER(expm1)
  KILN_REGISTER(erf)
  KILN_REGISTER(sqrt)
  KILN_REGISTER(rsqrt)
  KILN_REGISTER(sin)
  KILN_REGISTER(cos)
  KILN_REGISTER(tanh)
  KILN_REGISTER(sigmoid)
  KILN_REGISTER(gelu)
  KILN_REGISTER(gelu_tanh)
  KILN_REGISTER(silu)
  KILN_REGISTER(logical_not)
  KILN_REGISTER(isnan)
  KILN_REGISTER(isinf)
  KILN_REGISTER(softplus)
  KILN_REGISTER(pow_scalar)
  KILN_REGISTER(clamp)
  KILN_REGISTER(leaky_relu)
#undef KILN_REGISTER
}
}  // namespace detail
}  // namespace kiln
