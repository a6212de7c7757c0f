// Differentiable element-wise unary ops: each op, then right under it the gradient of its input.
// x is the input, y the output, g the gradient of y. Rules that need y save the output (cheaper to keep than
// to recompute, and exact: d/dx exp(x) = exp(x) = y).
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::requires_grad;
using autograd::record;
using autograd::record_inplace;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2OverPi = 0.79788456080286535588;   // sqrt(2 / pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)

// The op's output from x, with its backward recorded from what `rule` needs: the rule gets (g, x, y).
template <typename Raw, typename Rule>
Tensor unary_op(const char* name, const Tensor& x, Raw raw, Rule rule, bool save_x, bool save_y) {
  Tensor y = raw(x);
  if (should_record(x)) {
    SavedTensor sx = save_x ? SavedTensor(x, false) : SavedTensor();
    SavedTensor sy = save_y ? SavedTensor(y, true) : SavedTensor();
    record(name, y, {x}, [sx, sy, rule](const Tensor& g, const OpNode& n) {
      return TensorList{rule(g, sx.get(n), sy.get(n))};
    });
  }
  return y;
}
}  // namespace

// The in-place forms: under no grad they run the raw in-place op, else the recorded op through
// record_inplace (see record.h).
#define KILN_UNARY_INPLACE(name)                                                                \
  Tensor& name##_(Tensor& x) {                                                                  \
    if (!should_record(x)) return ops::name##_(x);                                              \
    return autograd::record_inplace(#name "_", x, [](const Tensor& old) { return name(old); }); \
  }

// neg: dx = -g
Tensor neg(const Tensor& x) {
  return unary_op("neg", x, ops::neg, [](const Tensor& g, const Tensor&, const Tensor&) { return -g; }, false, false);
}
KILN_UNARY_INPLACE(neg)

// abs: dx = g * sign(x) (0 at 0, as PyTorch)
Tensor abs(const Tensor& x) {
  return unary_op("abs", x, ops::abs, [](const Tensor& g, const Tensor& x, const Tensor&) { return g * ops::sign(x); },
                  true, false);
}
KILN_UNARY_INPLACE(abs)

// sign: piecewise constant, dx = 0
Tensor sign(const Tensor& x) {
  return unary_op("sign", x, ops::sign, [](const Tensor&, const Tensor&, const Tensor&) { return Tensor(); }, false,
                  false);
}
KILN_UNARY_INPLACE(sign)

// exp: dx = g * y
Tensor exp(const Tensor& x) {
  return unary_op("exp", x, ops::exp, [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y; }, false,
                  true);
}
KILN_UNARY_INPLACE(exp)

// log: dx = g / x
Tensor log(const Tensor& x) {
  return unary_op("log", x, ops::log, [](const Tensor& g, const Tensor& x, const Tensor&) { return g / x; }, true,
                  false);
}
KILN_UNARY_INPLACE(log)

// log1p: dx = g / (1 + x)
Tensor log1p(const Tensor& x) {
  return unary_op("log1p", x, ops::log1p, [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x + 1); },
                  true, false);
}
KILN_UNARY_INPLACE(log1p)

// expm1: dx = g * (y + 1)
Tensor expm1(const Tensor& x) {
  return unary_op("expm1", x, ops::expm1, [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y + 1); },
                  false, true);
}
KILN_UNARY_INPLACE(expm1)

// sqrt: dx = g / (2 y)
Tensor sqrt(const Tensor& x) {
  return unary_op("sqrt", x, ops::sqrt, [](const Tensor& g, const Tensor&, const Tensor& y) { return g / (y * 2); },
                  false, true);
}
KILN_UNARY_INPLACE(sqrt)

// rsqrt: y = x^(-1/2), dx = -g y^3 / 2
Tensor rsqrt(const Tensor& x) {
  return unary_op("rsqrt", x, ops::rsqrt,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y * y * y * -0.5; }, false, true);
}
KILN_UNARY_INPLACE(rsqrt)

// sin: dx = g cos(x)
Tensor sin(const Tensor& x) {
  return unary_op("sin", x, ops::sin, [](const Tensor& g, const Tensor& x, const Tensor&) { return g * cos(x); }, true,
                  false);
}
KILN_UNARY_INPLACE(sin)

// cos: dx = -g sin(x)
Tensor cos(const Tensor& x) {
  return unary_op("cos", x, ops::cos, [](const Tensor& g, const Tensor& x, const Tensor&) { return -(g * sin(x)); },
                  true, false);
}
KILN_UNARY_INPLACE(cos)

// tan: dx = g (1 + y^2)
Tensor tan(const Tensor& x) {
  return unary_op("tan", x, ops::tan, [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (1 + y * y); },
                  false, true);
}
KILN_UNARY_INPLACE(tan)

// asin: dx = g / sqrt(1 - x^2)
Tensor asin(const Tensor& x) {
  return unary_op("asin", x, ops::asin,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g * rsqrt(1 - x * x); }, true, false);
}
KILN_UNARY_INPLACE(asin)

// acos: dx = -g / sqrt(1 - x^2)
Tensor acos(const Tensor& x) {
  return unary_op("acos", x, ops::acos,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return -(g * rsqrt(1 - x * x)); }, true, false);
}
KILN_UNARY_INPLACE(acos)

// atan: dx = g / (1 + x^2)
Tensor atan(const Tensor& x) {
  return unary_op("atan", x, ops::atan, [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (1 + x * x); },
                  true, false);
}
KILN_UNARY_INPLACE(atan)

// sinh: dx = g cosh(x)
Tensor sinh(const Tensor& x) {
  return unary_op("sinh", x, ops::sinh, [](const Tensor& g, const Tensor& x, const Tensor&) { return g * cosh(x); },
                  true, false);
}
KILN_UNARY_INPLACE(sinh)

// cosh: dx = g sinh(x)
Tensor cosh(const Tensor& x) {
  return unary_op("cosh", x, ops::cosh, [](const Tensor& g, const Tensor& x, const Tensor&) { return g * sinh(x); },
                  true, false);
}
KILN_UNARY_INPLACE(cosh)

// asinh: dx = g / sqrt(x^2 + 1)
Tensor asinh(const Tensor& x) {
  return unary_op("asinh", x, ops::asinh,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g * rsqrt(x * x + 1); }, true, false);
}
KILN_UNARY_INPLACE(asinh)

// acosh: dx = g / sqrt(x^2 - 1)
Tensor acosh(const Tensor& x) {
  return unary_op("acosh", x, ops::acosh,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g * rsqrt(x * x - 1); }, true, false);
}
KILN_UNARY_INPLACE(acosh)

// atanh: dx = g / (1 - x^2)
Tensor atanh(const Tensor& x) {
  return unary_op("atanh", x, ops::atanh,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (1 - x * x); }, true, false);
}
KILN_UNARY_INPLACE(atanh)

// log2: dx = g / (x ln 2); log10: dx = g / (x ln 10)
Tensor log2(const Tensor& x) {
  return unary_op("log2", x, ops::log2,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x * 0.69314718055994530942); }, true,
                  false);
}
KILN_UNARY_INPLACE(log2)
Tensor log10(const Tensor& x) {
  return unary_op("log10", x, ops::log10,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x * 2.30258509299404568402); }, true,
                  false);
}
KILN_UNARY_INPLACE(log10)

// reciprocal: y = 1 / x, dx = -g y^2
Tensor reciprocal(const Tensor& x) {
  return unary_op("reciprocal", x, ops::reciprocal,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return -(g * y * y); }, false, true);
}
KILN_UNARY_INPLACE(reciprocal)

// floor, ceil, round, trunc: piecewise constant, dx = 0
#define KILN_ROUNDING(name)                                                                                   \
  Tensor name(const Tensor& x) {                                                                              \
    return unary_op(#name, x, ops::name, [](const Tensor&, const Tensor&, const Tensor&) { return Tensor(); }, \
                    false, false);                                                                            \
  }                                                                                                           \
  KILN_UNARY_INPLACE(name)
KILN_ROUNDING(floor)
KILN_ROUNDING(ceil)
KILN_ROUNDING(round)
KILN_ROUNDING(trunc)
#undef KILN_ROUNDING

// tanh: dx = g (1 - y^2)
Tensor tanh(const Tensor& x) {
  return unary_op("tanh", x, ops::tanh, [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (1 - y * y); },
                  false, true);
}
KILN_UNARY_INPLACE(tanh)

// sigmoid: dx = g y (1 - y)
Tensor sigmoid(const Tensor& x) {
  return unary_op("sigmoid", x, ops::sigmoid,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y * (1 - y); }, false, true);
}
KILN_UNARY_INPLACE(sigmoid)

namespace {
// relu's backward, 0 where y <= 0 else g, as one kernel (where(y > 0, g, 0) took two and a bool tensor). It is
// linear in g, so its own gradient (double backward) is the same mask on the incoming gradient; y gets none.
Tensor relu_backward(const Tensor& g, const Tensor& y) {
  Tensor dx = ops::relu_backward(g, y);
  if (should_record(g)) {
    record("relu_backward", dx, {g}, [sy = SavedTensor(y, false)](const Tensor& gg, const OpNode& n) {
      return TensorList{relu_backward(gg, sy.get(n))};
    });
  }
  return dx;
}
}  // namespace

// relu: dx = g where y > 0 (0 at 0; g where y is NaN, as PyTorch)
Tensor relu(const Tensor& x) {
  return unary_op("relu", x, ops::relu,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return relu_backward(g, y); }, false, true);
}
KILN_UNARY_INPLACE(relu)

// silu: y = x s with s = sigmoid(x); dx = g s (1 + x (1 - s))
Tensor silu(const Tensor& x) {
  return unary_op("silu", x, ops::silu,
                  [](const Tensor& g, const Tensor& x, const Tensor&) {
                    Tensor s = sigmoid(x);
                    return g * s * (1 + x * (1 - s));
                  },
                  true, false);
}
KILN_UNARY_INPLACE(silu)

// erf: dx = g 2/sqrt(pi) exp(-x^2)
Tensor erf(const Tensor& x) {
  return unary_op("erf", x, ops::erf,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g * exp(-(x * x)) * (2 * kInvSqrt2Pi * kSqrt2); },
                  true, false);
}
KILN_UNARY_INPLACE(erf)

#undef KILN_UNARY_INPLACE

// gelu (exact): y = x Phi(x); dx = g (Phi(x) + x phi(x)), Phi the normal CDF and phi its density
// (ops::gelu_backward computes either form in one pass).
// gelu (tanh): y = x/2 (1 + t), t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3);
//   dx = g (1/2 (1 + t) + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
Tensor gelu(const Tensor& x, std::string_view approximate) {
  bool tanh_approx = approximate == "tanh";
  Tensor y = ops::gelu(x, approximate);
  if (should_record(x)) {
    record(tanh_approx ? "gelu_tanh" : "gelu", y, {x}, [sx = SavedTensor(x, false), tanh_approx](const Tensor& g, const OpNode& n) {
      Tensor x = sx.get(n);
      // One fused pass, unless a second derivative is wanted (create_graph): then the differentiable form.
      if (!autograd::GradMode::is_enabled()) return TensorList{ops::gelu_backward(g, x, tanh_approx ? "tanh" : "none")};
      if (tanh_approx) {
        // The second term is 0 where t has saturated, as in the fused pass (there it would be 0 * inf once
        // x^2 overflows).
        Tensor t = tanh((x + x * x * x * 0.044715) * kSqrt2OverPi);
        Tensor sech2 = 1 - t * t;
        Tensor tail = where(ops::eq(sech2, 0.0), 0.0, x * 0.5 * sech2 * kSqrt2OverPi * (1 + x * x * (3 * 0.044715)));
        return TensorList{g * ((1 + t) * 0.5 + tail)};
      }
      Tensor cdf = (1 + erf(x / kSqrt2)) * 0.5;
      Tensor pdf = exp(x * x * -0.5) * kInvSqrt2Pi;
      return TensorList{g * (cdf + x * pdf)};
    });
  }
  return y;
}

// softplus: y = log(1 + exp(beta x)) / beta, x itself above the threshold: one of the fused activations below.
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return activation(x, Activation::softplus, {.a = beta, .b = threshold});
}

// leaky_relu: dx = g for x > 0, g * slope otherwise
Tensor leaky_relu(const Tensor& x, double slope) {
  Tensor y = ops::leaky_relu(x, slope);
  if (should_record(x)) {
    record("leaky_relu", y, {x}, [sx = SavedTensor(x, false), slope](const Tensor& g, const OpNode& n) {
      return TensorList{where(ops::gt(sx.get(n), 0), g, g * slope)};
    });
  }
  return y;
}
Tensor& leaky_relu_(Tensor& x, double slope) {
  if (!should_record(x)) return ops::leaky_relu_(x, slope);
  return record_inplace("leaky_relu_", x, [slope](const Tensor& old) { return leaky_relu(old, slope); });
}

// The fused activations (activation_kind.h): dx = g f'(x) in one pass (ops::activation_backward), or, when a
// second derivative is wanted (create_graph), from differentiable ops that compute the same thing:
//   elu:         g scale for x > 0, else g scale alpha input_scale e^(input_scale x)
//   hardswish:   0 below -3, g (x / 3 + 1/2) from -3 to 3, g above
//   mish:        g (t + x sigmoid(x) (1 - t^2)), t = tanh(softplus(x))
//   softplus:    g sigmoid(beta x) where beta x <= threshold, else g
//   logsigmoid:  g sigmoid(-x)
//   hardsigmoid: g / 6 strictly between -3 and 3, else 0
//   hardtanh, the shrinks, threshold: g where the first-order kernel's f' (0 or 1) is 1, else 0
namespace {
Tensor activation_gradient_graph(const Tensor& g, const Tensor& x, Activation kind, const ActivationParams& p) {
  switch (kind) {
    case Activation::elu: {
      // The exponential's input held at 0 where x > 0: e^(input_scale x) of a large x would be inf there, and
      // where() passes 0 times that to it.
      const Tensor negative = clamp(x, std::nullopt, Scalar(0.0));
      return where(ops::gt(x, 0.0), g * p.b, g * exp(negative * p.c) * (p.a * p.b * p.c));
    }
    case Activation::hardsigmoid:  // its kinks, -3 and 3, are exact in every dtype
      return where(ops::logical_and(ops::gt(x, -3.0), ops::lt(x, 3.0)), g / 6.0, Scalar(0.0));
    case Activation::hardtanh:
    case Activation::softshrink:
    case Activation::hardshrink:
    case Activation::threshold:
      // f' is 0 or 1: g where the first-order kernel passes a gradient, else 0 (also where g is inf or NaN,
      // as there). Taken from that kernel, the pieces are its very comparisons, made in its precision with its
      // parameters (for half, in float, with threshold's and hardshrink's rounded to half), which comparisons
      // made here in the tensor's dtype would not be.
      return where(ops::ne(ops::activation_backward(ones_like(x), x, kind, p), 0.0), g, Scalar(0.0));
    case Activation::hardswish:
      return where(ops::lt(x, -3.0), Scalar(0.0), where(ops::le(x, 3.0), g * (x / 3.0 + 0.5), g));
    case Activation::mish: {
      const Tensor t = tanh(softplus(x));
      return g * (t + x * sigmoid(x) * (1 - t * t));
    }
    case Activation::softplus: {
      const Tensor bx = x * p.a;
      return where(ops::gt(bx, p.b), g, g * sigmoid(bx));
    }
    case Activation::logsigmoid:
      return g * sigmoid(-x);
  }
  KILN_CHECK(false, "activation: unknown kind ", static_cast<int>(kind));
  return {};
}
}  // namespace

Tensor activation(const Tensor& x, Activation kind, const ActivationParams& params) {
  Tensor y = ops::activation(x, kind, params);
  if (should_record(x)) {
    record(activation_name(kind), y, {x}, [sx = SavedTensor(x, false), kind, params](const Tensor& g, const OpNode& n) {
      const Tensor x = sx.get(n);
      if (!autograd::GradMode::is_enabled()) return TensorList{ops::activation_backward(g, x, kind, params)};
      return TensorList{activation_gradient_graph(g, x, kind, params)};
    });
  }
  return y;
}

// pow(x, e): dx = g e x^(e-1) (0 for e == 0)
Tensor pow(const Tensor& x, const Scalar& exponent) {
  Tensor y = ops::pow(x, exponent);
  if (should_record(x)) {
    double e = exponent.to_double();
    record("pow", y, {x}, [sx = SavedTensor(x, false), e](const Tensor& g, const OpNode& n) {
      if (e == 0.0) return TensorList{Tensor()};
      return TensorList{g * e * pow(sx.get(n), e - 1.0)};
    });
  }
  return y;
}
Tensor& pow_(Tensor& x, const Scalar& exponent) {
  if (!should_record(x)) return ops::pow_(x, exponent);
  return record_inplace("pow_", x, [&](const Tensor& old) { return pow(old, exponent); });
}

// clamp: dx = g where min <= x <= max, else 0
Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  Tensor y = ops::clamp(x, lo, hi);
  if (should_record(x)) {
    record("clamp", y, {x}, [sx = SavedTensor(x, false), lo, hi](const Tensor& g, const OpNode& n) {
      Tensor x = sx.get(n);
      Tensor keep;
      if (lo) keep = ops::ge(x, *lo);
      if (hi) keep = keep.defined() ? ops::logical_and(keep, ops::le(x, *hi)) : ops::le(x, *hi);
      return TensorList{keep.defined() ? where(keep, g, 0) : g};
    });
  }
  return y;
}
Tensor& clamp_(Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  if (!should_record(x)) return ops::clamp_(x, lo, hi);
  return record_inplace("clamp_", x, [&](const Tensor& old) { return clamp(old, lo, hi); });
}

}  // namespace kiln
