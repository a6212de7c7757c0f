// Element-wise functions of two (or three) tensors, with NumPy/PyTorch broadcasting and type promotion.
// A Scalar operand behaves as a 0-dim tensor that yields to the tensor's dtype unless it is of a higher
// category (int tensor + 2.5 is float, float16 tensor + 2.5 stays float16).
#pragma once

#include <string_view>

#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// The dtype an op on these operands computes in and returns (PyTorch's result_type).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);
// A 0-dim CPU tensor holding s, marked as a wrapped number for type promotion.
Tensor scalar_to_tensor(const Scalar& s, Device device = kCPU);

// a + alpha * b, a - alpha * b
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor& add_(Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor& add_(Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor& sub_(Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor& sub_(Tensor& a, const Scalar& b, const Scalar& alpha = 1);

#define KILN_BINARY_DECL(name)                          \
  Tensor name(const Tensor& a, const Tensor& b);        \
  Tensor name(const Tensor& a, const Scalar& b);        \
  Tensor& name##_(Tensor& a, const Tensor& b);          \
  Tensor& name##_(Tensor& a, const Scalar& b);
KILN_BINARY_DECL(mul)
KILN_BINARY_DECL(div)  // true division: integer inputs give a float result
KILN_BINARY_DECL(maximum)
KILN_BINARY_DECL(minimum)
KILN_BINARY_DECL(atan2)      // the angle of the point (b, a), in (-pi, pi]; integer inputs give a float result
KILN_BINARY_DECL(fmod)       // a - trunc(a / b) * b: the sign of a (C's %)
KILN_BINARY_DECL(remainder)  // a - floor(a / b) * b: the sign of b (Python's %); integer division by 0 is an error
#undef KILN_BINARY_DECL
// relu's backward in one pass: 0 where result <= 0, else grad (result: relu's output, grad: its gradient). A NaN
// result passes the gradient, as PyTorch's threshold_backward does.
Tensor relu_backward(const Tensor& grad, const Tensor& result);
// gelu's backward in one pass: grad times gelu's derivative at x (x: gelu's input; approximate "none" or
// "tanh", as gelu's). Broadcasts as any binary op; the result has the promoted floating dtype.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate = "none");
Tensor pow(const Tensor& a, const Tensor& b);  // pow(Tensor, Scalar) is in unary.h
Tensor& pow_(Tensor& a, const Tensor& b);
Tensor pow(const Scalar& a, const Tensor& b);

// Comparisons and logical ops return bool tensors.
#define KILN_COMPARE_DECL(name)                  \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, const Scalar& b);
KILN_COMPARE_DECL(eq)
KILN_COMPARE_DECL(ne)
KILN_COMPARE_DECL(lt)
KILN_COMPARE_DECL(le)
KILN_COMPARE_DECL(gt)
KILN_COMPARE_DECL(ge)
#undef KILN_COMPARE_DECL
// |a - b| <= atol + rtol |b| element-wise (bool), as PyTorch's isclose: equal infinities are close, NaN is close
// to NaN only with equal_nan. allclose: all of them. equal: the same shape and equal elements (NaN is unequal).
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
bool equal(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

// cond ? a : b element-wise (cond is bool), all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
// x with value where mask (bool, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value);
// start + weight * (end - start); float dtypes only.
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight);

}  // namespace kiln::ops
