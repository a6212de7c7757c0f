// Frontends of the element-wise unary ops: pick the dtype the op computes in, allocate the output, dispatch.
#include "kiln/tensor/views.h"
#include "kiln/tensor/ops/unary.h"

#include <cmath>
#include <limits>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"

namespace kiln::ops {
namespace {

enum class Kind {
  KeepDtype,  // neg, abs, relu: the result has the input's dtype
  FloatMath,  // exp, log, sin: integer and bool inputs compute in the default float dtype
  BoolOut,    // logical_not, isnan: any input, bool result
};

DType compute_dtype(DType in, Kind kind) {
  return (kind == Kind::FloatMath && !is_floating(in)) ? default_dtype() : in;
}

template <Op op, typename... Params>
Tensor unary(const Tensor& x, Kind kind, Params... params) {
  KILN_CHECK(x.defined(), op_name(op), ": input tensor is undefined");
  DType compute = compute_dtype(x.dtype(), kind);
  Tensor out = empty(x.sizes(), TensorOptions(kind == Kind::BoolOut ? kBool : compute).device(x.device()));
  call_kernel<op>(x.device(), out, ops::to(x, compute), params...);
  return out;
}

template <Op op, typename... Params>
Tensor& unary_(Tensor& x, Kind kind, Params... params) {
  KILN_CHECK(!x.has_internal_overlap(), op_name(op), "_: cannot write in place into a tensor of shape ",
             shape_str(x.sizes()), " whose elements repeat (it was expanded); clone() it first");
  DType compute = compute_dtype(x.dtype(), kind);
  KILN_CHECK(compute == x.dtype(), op_name(op), "_: the result has dtype ", compute,
             " and cannot be written in place into a tensor of dtype ", x.dtype());
  call_kernel<op>(x.device(), x, x, params...);
  x.bump_version(op_inplace_name(op));
  return x;
}

void check_not_bool(const Tensor& x, const char* op) {
  KILN_CHECK(x.dtype() != kBool, op, ": not supported for bool tensors", std::string(op) == "neg" ? " (use logical_not)" : "");
}

}  // namespace

#define KILN_UNARY_DEF(name, kind)                                                 \
  Tensor name(const Tensor& x) { return unary<Op::name>(x, Kind::kind); }          \
  Tensor& name##_(Tensor& x) { return unary_<Op::name>(x, Kind::kind); }
KILN_UNARY_DEF(exp, FloatMath)
KILN_UNARY_DEF(log, FloatMath)
KILN_UNARY_DEF(log1p, FloatMath)
KILN_UNARY_DEF(expm1, FloatMath)
KILN_UNARY_DEF(erf, FloatMath)
KILN_UNARY_DEF(sqrt, FloatMath)
KILN_UNARY_DEF(rsqrt, FloatMath)
KILN_UNARY_DEF(log2, FloatMath)
KILN_UNARY_DEF(log10, FloatMath)
KILN_UNARY_DEF(reciprocal, FloatMath)
KILN_UNARY_DEF(sin, FloatMath)
KILN_UNARY_DEF(cos, FloatMath)
KILN_UNARY_DEF(tan, FloatMath)
KILN_UNARY_DEF(asin, FloatMath)
KILN_UNARY_DEF(acos, FloatMath)
KILN_UNARY_DEF(atan, FloatMath)
KILN_UNARY_DEF(sinh, FloatMath)
KILN_UNARY_DEF(cosh, FloatMath)
KILN_UNARY_DEF(asinh, FloatMath)
KILN_UNARY_DEF(acosh, FloatMath)
KILN_UNARY_DEF(atanh, FloatMath)
KILN_UNARY_DEF(tanh, FloatMath)
KILN_UNARY_DEF(sigmoid, FloatMath)
KILN_UNARY_DEF(silu, FloatMath)
#undef KILN_UNARY_DEF

#define KILN_UNARY_NOBOOL_DEF(name)                                                              \
  Tensor name(const Tensor& x) {                                                                 \
    check_not_bool(x, #name);                                                                    \
    return unary<Op::name>(x, Kind::KeepDtype);                                                  \
  }                                                                                              \
  Tensor& name##_(Tensor& x) {                                                                   \
    check_not_bool(x, #name "_");                                                                \
    return unary_<Op::name>(x, Kind::KeepDtype);                                                 \
  }
KILN_UNARY_NOBOOL_DEF(neg)
KILN_UNARY_NOBOOL_DEF(abs)
KILN_UNARY_NOBOOL_DEF(sign)
KILN_UNARY_NOBOOL_DEF(relu)
KILN_UNARY_NOBOOL_DEF(floor)
KILN_UNARY_NOBOOL_DEF(ceil)
KILN_UNARY_NOBOOL_DEF(round)
KILN_UNARY_NOBOOL_DEF(trunc)
#undef KILN_UNARY_NOBOOL_DEF

Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none") return unary<Op::gelu>(x, Kind::FloatMath);
  KILN_CHECK(approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  return unary<Op::gelu_tanh>(x, Kind::FloatMath);
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  return activation(x, Activation::softplus, {.a = beta, .b = threshold});
}

namespace {
// PyTorch's threshold and hardshrink kernels cast their parameters to the input's dtype before comparing, and in
// half and bfloat16 that moves them: on half, hardshrink(x, 0.3002) sees lambd as 0.30029, so x = 0.30029 is
// inside and gives 0. kiln computes half in float, so the cast is made here. PyTorch's softshrink reads lambd in
// float for its value but casts it for its gradient (the shrinks share one backward kernel), so at that x its
// value is x - lambd and its gradient 0: kiln does the same (`backward`). The other kinds' parameters are read
// in float, as PyTorch's opmath kernels read them (for hardtanh's value the two readings agree). A parameter
// past half's range is an error, as in PyTorch.
ActivationParams in_input_dtype(Activation kind, ActivationParams p, DType dtype, bool backward) {
  const bool cast = kind == Activation::threshold || kind == Activation::hardshrink ||
                    (backward && kind == Activation::softshrink);
  if (!cast || (dtype != kFloat16 && dtype != kBFloat16)) return p;
  auto cast_to_dtype = [&](double& v, const char* name) {
    const double r = dtype == kFloat16 ? static_cast<float>(Half(static_cast<float>(v)))
                                       : static_cast<float>(BFloat16(static_cast<float>(v)));
    // softshrink's forward took this lambd; past half's range its gradient is 0 everywhere, as inf gives.
    KILN_CHECK(!std::isfinite(v) || std::isfinite(r) || kind == Activation::softshrink, activation_name(kind), ": ",
               name, " = ", v, " cannot be converted to the input's dtype ", dtype, " (expected a number in its range)");
    v = r;
  };
  cast_to_dtype(p.a, kind == Activation::threshold ? "threshold" : "lambd");
  if (kind == Activation::threshold) cast_to_dtype(p.b, "value");
  return p;
}
}  // namespace

Tensor activation(const Tensor& x, Activation kind, const ActivationParams& params) {
  if (kind == Activation::hardtanh) {
    KILN_CHECK(params.a <= params.b, "hardtanh: min_val = ", params.a, " is above max_val = ", params.b);
  }
  if (kind == Activation::softplus) {
    KILN_CHECK(params.a != 0, "softplus: beta must be nonzero");
  }
  if (kind == Activation::softshrink) {
    KILN_CHECK(params.a >= 0, "softshrink: lambd = ", params.a, ": expected >= 0");
  }
  KILN_CHECK(x.defined(), activation_name(kind), ": input tensor is undefined");
  return unary<Op::activation>(x, Kind::FloatMath, kind, in_input_dtype(kind, params, x.dtype(), false));
}

Tensor activation_backward(const Tensor& grad, const Tensor& x, Activation kind, const ActivationParams& params) {
  const char* name = activation_name(kind);
  KILN_CHECK(grad.defined() && x.defined(), name, "_backward: an input tensor is undefined");
  KILN_CHECK(grad.sizes() == x.sizes(), name, "_backward: the gradient has shape ", shape_str(grad.sizes()),
             ", the input ", shape_str(x.sizes()), "; expected one shape");
  KILN_CHECK(grad.device() == x.device(), name, "_backward: the gradient is on ", grad.device(), ", the input on ",
             x.device());
  const DType d = compute_dtype(x.dtype(), Kind::FloatMath);
  Tensor out = empty(x.sizes(), TensorOptions(d).device(x.device()));
  call_kernel<Op::activation_backward>(x.device(), out, ops::to(grad, d), ops::to(x, d), kind,
                                       in_input_dtype(kind, params, x.dtype(), true));
  return out;
}

Tensor leaky_relu(const Tensor& x, double slope) { return unary<Op::leaky_relu>(x, Kind::FloatMath, slope, 0.0); }
Tensor& leaky_relu_(Tensor& x, double slope) { return unary_<Op::leaky_relu>(x, Kind::FloatMath, slope, 0.0); }

namespace {
DType pow_dtype(const Tensor& x, const Scalar& e) {
  DType d = result_type(x, e);
  KILN_CHECK(d != kBool, "pow: not supported for bool tensors with a bool exponent");
  if (is_integral(d)) {
    KILN_CHECK(e.to_int() >= 0, "pow: integers to negative integer powers are not allowed (exponent ", e, ")");
  }
  return d;
}
}  // namespace

Tensor pow(const Tensor& x, const Scalar& e) {
  DType d = pow_dtype(x, e);
  return unary<Op::pow_scalar>(ops::to(x, d), Kind::KeepDtype, e.to_double(), 0.0);
}

Tensor& pow_(Tensor& x, const Scalar& e) {
  DType d = pow_dtype(x, e);
  KILN_CHECK(d == x.dtype(), "pow_: the result has dtype ", d, " and cannot be written in place into ", x.dtype());
  return unary_<Op::pow_scalar>(x, Kind::KeepDtype, e.to_double(), 0.0);
}

namespace {
DType clamp_dtype(const Tensor& x, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  KILN_CHECK(lo.has_value() || hi.has_value(), "clamp: at least one of min and max must be given");
  KILN_CHECK(x.dtype() != kBool, "clamp: not supported for bool tensors");
  DType d = x.dtype();
  if (lo) d = promote_types(d, result_type(x, *lo));
  if (hi) d = promote_types(d, result_type(x, *hi));
  return d;
}
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  DType d = clamp_dtype(x, lo, hi);
  return unary<Op::clamp>(ops::to(x, d), Kind::KeepDtype, lo ? lo->to_double() : -kInf, hi ? hi->to_double() : kInf);
}

Tensor& clamp_(Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  DType d = clamp_dtype(x, lo, hi);
  KILN_CHECK(d == x.dtype(), "clamp_: the result has dtype ", d, " and cannot be written in place into ", x.dtype());
  return unary_<Op::clamp>(x, Kind::KeepDtype, lo ? lo->to_double() : -kInf, hi ? hi->to_double() : kInf);
}

Tensor logical_not(const Tensor& x) { return unary<Op::logical_not>(x, Kind::BoolOut); }
Tensor isnan(const Tensor& x) { return unary<Op::isnan>(x, Kind::BoolOut); }
Tensor isinf(const Tensor& x) { return unary<Op::isinf>(x, Kind::BoolOut); }
Tensor isfinite(const Tensor& x) { return logical_not(logical_or(isnan(x), isinf(x))); }

}  // namespace kiln::ops
