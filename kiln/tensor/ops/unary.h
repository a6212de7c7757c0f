// Element-wise functions of one tensor. Float math (exp, log, sin, ...) on an integer or bool tensor computes
// in the default float dtype, as in PyTorch; neg/abs/sign/relu/clamp and the rounding ops keep the input's dtype.
// Each `op_` variant writes in place and returns its argument.
#pragma once

#include <optional>
#include <string_view>

#include "kiln/tensor/ops/activation_kind.h"
#include "kiln/tensor/tensor.h"

namespace kiln::ops {

#define KILN_UNARY_DECL(name) \
  Tensor name(const Tensor& x); \
  Tensor& name##_(Tensor& x);
KILN_UNARY_DECL(neg)
KILN_UNARY_DECL(abs)
KILN_UNARY_DECL(sign)
KILN_UNARY_DECL(exp)
KILN_UNARY_DECL(log)
KILN_UNARY_DECL(log1p)
KILN_UNARY_DECL(expm1)
KILN_UNARY_DECL(erf)
KILN_UNARY_DECL(sqrt)
KILN_UNARY_DECL(rsqrt)
KILN_UNARY_DECL(log2)
KILN_UNARY_DECL(log10)
KILN_UNARY_DECL(reciprocal)  // 1 / x
KILN_UNARY_DECL(sin)
KILN_UNARY_DECL(cos)
KILN_UNARY_DECL(tan)
KILN_UNARY_DECL(asin)
KILN_UNARY_DECL(acos)
KILN_UNARY_DECL(atan)
KILN_UNARY_DECL(sinh)
KILN_UNARY_DECL(cosh)
KILN_UNARY_DECL(asinh)
KILN_UNARY_DECL(acosh)
KILN_UNARY_DECL(atanh)
// Rounding, keeping the dtype (integers unchanged): floor, ceil, round (halves to even), trunc (toward 0).
KILN_UNARY_DECL(floor)
KILN_UNARY_DECL(ceil)
KILN_UNARY_DECL(round)
KILN_UNARY_DECL(trunc)
KILN_UNARY_DECL(tanh)
KILN_UNARY_DECL(sigmoid)
KILN_UNARY_DECL(relu)
KILN_UNARY_DECL(silu)
#undef KILN_UNARY_DECL

// approximate: "none" (x * Phi(x), with erf) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor& leaky_relu_(Tensor& x, double negative_slope = 0.01);
// One of the activations of activation_kind.h (elu, hardtanh, hardsigmoid, hardswish, mish), in one pass;
// integer inputs compute in the default float dtype. activation_backward is its gradient, grad * f'(x), from
// the input x (grad: x's shape), also in one pass.
Tensor activation(const Tensor& x, Activation kind, const ActivationParams& params = {});
Tensor activation_backward(const Tensor& grad, const Tensor& x, Activation kind, const ActivationParams& params = {});
// x ** exponent. An integer tensor with an integer exponent stays integer (a negative one is an error).
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor& pow_(Tensor& x, const Scalar& exponent);
// Limits absent on one side are open; min > max gives max everywhere, as in PyTorch.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor logical_not(const Tensor& x);  // bool result
Tensor isnan(const Tensor& x);        // bool result
Tensor isinf(const Tensor& x);        // bool result
Tensor isfinite(const Tensor& x);     // bool result

}  // namespace kiln::ops
