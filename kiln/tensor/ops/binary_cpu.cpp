// CPU kernels of the element-wise binary and ternary ops (functors from elementwise_functors.h).
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/ops/loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

template <uint32_t Set, typename F>
void same_dtype(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  visit_dtype<Set>(a.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<T, T, T>(out, f, a, b); });
}

template <typename F>
void to_bool(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  visit_dtype(a.dtype(), name, [&]<typename T>() { cpu::cpu_kernel<bool, T, T>(out, f, a, b); });
}

void add_cpu(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  visit_dtype(a.dtype(), "add", [&]<typename T>() {
    using M = opmath_t<T>;
    if (alpha.to_double() == 1.0) cpu::cpu_kernel<T, T, T>(out, functors::Add{}, a, b);
    else cpu::cpu_kernel<T, T, T>(out, functors::AddAlpha<M>{alpha.to<M>()}, a, b);
  });
}

void sub_cpu(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  visit_dtype<kNumericSet>(a.dtype(), "sub", [&]<typename T>() {
    using M = opmath_t<T>;
    cpu::cpu_kernel<T, T, T>(out, functors::SubAlpha<M>{alpha.to<M>()}, a, b);
  });
}

#define KILN_BINARY_CPU(op, Set, Functor) \
  void op##_cpu(const Tensor& out, const Tensor& a, const Tensor& b) { same_dtype<Set>(#op, out, a, b, functors::Functor{}); }
KILN_FORALL_BINARY_FUNCTORS(KILN_BINARY_CPU)
#undef KILN_BINARY_CPU

void pow_cpu(const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_dtype<kNumericSet>(a.dtype(), "pow", [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      cpu::cpu_kernel<T, T, T>(out, functors::PowInt{}, a, b);
    } else {
      cpu::cpu_kernel<T, T, T>(out, functors::Pow{}, a, b);
    }
  });
}

#define KILN_BOOL_CPU(op, Functor) \
  void op##_cpu(const Tensor& out, const Tensor& a, const Tensor& b) { to_bool(#op, out, a, b, functors::Functor{}); }
KILN_FORALL_BINARY_BOOL_FUNCTORS(KILN_BOOL_CPU)
#undef KILN_BOOL_CPU

void where_cpu(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  visit_dtype(a.dtype(), "where", [&]<typename T>() { cpu::cpu_kernel<T, bool, T, T>(out, functors::Where{}, cond, a, b); });
}

void lerp_cpu(const Tensor& out, const Tensor& start, const Tensor& end, const Tensor& w) {
  visit_dtype<kFloatingSet>(start.dtype(), "lerp", [&]<typename T>() {
    cpu::cpu_kernel<T, T, T, T>(out, functors::Lerp{}, start, end, w);
  });
}

}  // namespace

namespace detail {
void register_binary_cpu_kernels() {
#define KILN_REGISTER(op, ...) register_kernel<Op::op>(DeviceType::CPU, op##_cpu);
  KILN_REGISTER(add)
  KILN_REGISTER(sub)
  KILN_REGISTER(pow)
  KILN_FORALL_BINARY_FUNCTORS(KILN_REGISTER)
  KILN_FORALL_BINARY_BOOL_FUNCTORS(KILN_REGISTER)
  KILN_REGISTER(where)
  KILN_REGISTER(lerp)
#undef KILN_REGISTER
}
}  // namespace detail
}  // namespace kiln
