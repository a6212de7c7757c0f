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
KILN_FORALL_UNARY_FUNCTORS(KILN_UNARY_CPU)
#undef KILN_UNARY_CPU

#define KILN_UNARY_BOOL_CPU(op, Functor) \
  void op##_cpu(const Tensor& out, const Tensor& x) { to_bool(#op, out, x, functors::Functor{}); }
KILN_FORALL_UNARY_BOOL_FUNCTORS(KILN_UNARY_BOOL_CPU)
#undef KILN_UNARY_BOOL_CPU

void pow_scalar_cpu(const Tensor& out, const Tensor& x, double exponent, double) {
  functors::with_pow_functor(exponent, is_floating(out.dtype()), [&](auto f) {
    if constexpr (functors::kPowSpecialForm<decltype(f)>) same_dtype<kFloatingSet>("pow", out, x, f);
    else same_dtype<kNumericSet>("pow", out, x, f);
  });
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
#define KILN_REGISTER(op, ...) register_kernel<Op::op>(DeviceType::CPU, op##_cpu);
  KILN_FORALL_UNARY_FUNCTORS(KILN_REGISTER)
  KILN_FORALL_UNARY_BOOL_FUNCTORS(KILN_REGISTER)
  KILN_REGISTER(pow_scalar)
  KILN_REGISTER(clamp)
  KILN_REGISTER(leaky_relu)
#undef KILN_REGISTER
}
}  // namespace detail
}  // namespace kiln
