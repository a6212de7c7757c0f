// CUDA kernels of the element-wise unary ops: the functors of elementwise_functors.h, the same ones the CPU
// runs, applied by cuda_kernel (loops_cuda.cuh). The binary and ternary ops are in binary_cuda.cu.
#include "kiln/tensor/cuda/loops_cuda.cuh"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"

namespace kiln {
namespace {

template <uint32_t Set, typename F>
void same_dtype(const char* name, const Tensor& out, const Tensor& x, const F& f) {
  visit_dtype<Set>(x.dtype(), name, [&]<typename T>() { cuda::cuda_kernel<T, T>(name, out, f, x); });
}

template <typename F>
void to_bool(const char* name, const Tensor& out, const Tensor& x, const F& f) {
  visit_dtype(x.dtype(), name, [&]<typename T>() { cuda::cuda_kernel<bool, T>(name, out, f, x); });
}

#define KILN_UNARY_CUDA(op, Set, Functor) \
  void op##_cuda(const Tensor& out, const Tensor& x) { same_dtype<Set>(#op, out, x, functors::Functor{}); }
KILN_FORALL_UNARY_FUNCTORS(KILN_UNARY_CUDA)
#undef KILN_UNARY_CUDA

#define KILN_UNARY_BOOL_CUDA(op, Functor) \
  void op##_cuda(const Tensor& out, const Tensor& x) { to_bool(#op, out, x, functors::Functor{}); }
KILN_FORALL_UNARY_BOOL_FUNCTORS(KILN_UNARY_BOOL_CUDA)
#undef KILN_UNARY_BOOL_CUDA

void pow_scalar_cuda(const Tensor& out, const Tensor& x, double exponent, double) {
  functors::with_pow_functor(exponent, is_floating(out.dtype()), [&](auto f) {
    if constexpr (functors::kPowSpecialForm<decltype(f)>) same_dtype<kFloatingSet>("pow", out, x, f);
    else same_dtype<kNumericSet>("pow", out, x, f);
  });
}
void clamp_cuda(const Tensor& out, const Tensor& x, double lo, double hi) {
  same_dtype<kNumericSet>("clamp", out, x, functors::Clamp{lo, hi});
}
void leaky_relu_cuda(const Tensor& out, const Tensor& x, double slope, double) {
  same_dtype<kFloatingSet>("leaky_relu", out, x, functors::LeakyRelu{slope});
}

}  // namespace

namespace detail {
void register_cuda_binary_kernels();  // binary_cuda.cu

void register_cuda_elementwise_kernels() {
#define KILN_REGISTER(op, ...) register_kernel<Op::op>(DeviceType::CUDA, op##_cuda);
  KILN_FORALL_UNARY_FUNCTORS(KILN_REGISTER)
  KILN_FORALL_UNARY_BOOL_FUNCTORS(KILN_REGISTER)
  KILN_REGISTER(pow_scalar)
  KILN_REGISTER(clamp)
  KILN_REGISTER(leaky_relu)
#undef KILN_REGISTER
  register_cuda_binary_kernels();
}
}  // namespace detail
}  // namespace kiln
