// CUDA kernels of the element-wise binary and ternary ops (functors from elementwise_functors.h, shared with
// binary_cpu.cpp).
#include "kiln/tensor/cuda/loops_cuda.cuh"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"

namespace kiln {
namespace {

template <uint32_t Set, typename F>
void same_dtype(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  visit_dtype<Set>(a.dtype(), name, [&]<typename T>() { cuda::cuda_kernel<T, T, T>(name, out, f, a, b); });
}

template <typename F>
void to_bool(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  visit_dtype(a.dtype(), name, [&]<typename T>() { cuda::cuda_kernel<bool, T, T>(name, out, f, a, b); });
}

void add_cuda(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  visit_dtype(a.dtype(), "add", [&]<typename T>() {
    using M = opmath_t<T>;
    if (alpha.to_double() == 1.0) cuda::cuda_kernel<T, T, T>("add", out, functors::Add{}, a, b);
    else cuda::cuda_kernel<T, T, T>("add", out, functors::AddAlpha<M>{alpha.to<M>()}, a, b);
  });
}

void sub_cuda(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  visit_dtype<kNumericSet>(a.dtype(), "sub", [&]<typename T>() {
    using M = opmath_t<T>;
    cuda::cuda_kernel<T, T, T>("sub", out, functors::SubAlpha<M>{alpha.to<M>()}, a, b);
  });
}

#define KILN_BINARY_CUDA(op, Set, Functor) \
  void op##_cuda(const Tensor& out, const Tensor& a, const Tensor& b) { same_dtype<Set>(#op, out, a, b, functors::Functor{}); }
KILN_FORALL_BINARY_FUNCTORS(KILN_BINARY_CUDA)
#undef KILN_BINARY_CUDA

void pow_cuda(const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_dtype<kNumericSet>(a.dtype(), "pow", [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) cuda::cuda_kernel<T, T, T>("pow", out, functors::PowInt{}, a, b);
    else cuda::cuda_kernel<T, T, T>("pow", out, functors::Pow{}, a, b);
  });
}

#define KILN_BOOL_CUDA(op, Functor) \
  void op##_cuda(const Tensor& out, const Tensor& a, const Tensor& b) { to_bool(#op, out, a, b, functors::Functor{}); }
KILN_FORALL_BINARY_BOOL_FUNCTORS(KILN_BOOL_CUDA)
#undef KILN_BOOL_CUDA

void where_cuda(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  visit_dtype(a.dtype(), "where", [&]<typename T>() {
    cuda::cuda_kernel<T, bool, T, T>("where", out, functors::Where{}, cond, a, b);
  });
}

void lerp_cuda(const Tensor& out, const Tensor& start, const Tensor& end, const Tensor& w) {
  visit_dtype<kFloatingSet>(start.dtype(), "lerp", [&]<typename T>() {
    cuda::cuda_kernel<T, T, T, T>("lerp", out, functors::Lerp{}, start, end, w);
  });
}

}  // namespace

namespace detail {
void register_cuda_binary_kernels() {
#define KILN_REGISTER(op, ...) register_kernel<Op::op>(DeviceType::CUDA, op##_cuda);
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
