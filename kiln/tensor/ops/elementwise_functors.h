// The math of every element-wise op, written once as __host__ __device__ functors.
//
// The CPU loops (loops_cpu.h) and the CUDA kernels apply these same functors, so the CPU tests exercise the
// arithmetic the GPU runs. Each functor takes and returns the op-math type (float for float16/bfloat16);
// the loops do the loading and the rounding back.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/tensor/macros.h"
#include "kiln/tensor/ops/activation_kind.h"
#include "kiln/tensor/ops/fast_math.h"

namespace kiln::functors {

// e^x: for float on the CPU, the vectorizable polynomial of fast_math.h; elsewhere the math library.
template <class T>
KILN_INLINE T exp_of(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return fast_math::exp(x);
#endif
  return std::exp(x);
}

// ---- unary ----
struct Neg { template <class T> KILN_INLINE T operator()(T x) const { return -x; } };
struct Abs {
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? -x : x;  // NOTE: keeps -0.0 as -0.0 only through std::abs; 0 stays 0
  }
};
struct Sign {
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(x != T(0));
    } else {
      if constexpr (std::is_floating_point_v<T>) {
        if (x != x) return x;  // NaN stays NaN
      }
      return static_cast<T>((T(0) < x) - (x < T(0)));
    }
  }
};
struct Exp { template <class T> KILN_INLINE T operator()(T x) const { return exp_of(x); } };
// log and log(1 + x): for float on the CPU, the vectorizable forms of fast_math.h; elsewhere the math library.
template <class T>
KILN_INLINE T log_of(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return fast_math::log(x);
#endif
  return std::log(x);
}
template <class T>
KILN_INLINE T log1p_of(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return fast_math::log1p(x);
#endif
  return std::log1p(x);
}
struct Log { template <class T> KILN_INLINE T operator()(T x) const { return log_of(x); } };
struct Log1p { template <class T> KILN_INLINE T operator()(T x) const { return log1p_of(x); } };
// e^x - 1, the same way.
template <class T>
KILN_INLINE T expm1_of(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return fast_math::expm1(x);
#endif
  return std::expm1(x);
}
struct Expm1 { template <class T> KILN_INLINE T operator()(T x) const { return expm1_of(x); } };
// erf: for float on the CPU, the vectorizable polynomial of fast_math.h; elsewhere the math library.
template <class T>
KILN_INLINE T erf_of(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return fast_math::erf(x);
#endif
  return std::erf(x);
}
struct Erf { template <class T> KILN_INLINE T operator()(T x) const { return erf_of(x); } };
struct Sqrt { template <class T> KILN_INLINE T operator()(T x) const { return std::sqrt(x); } };
struct Rsqrt { template <class T> KILN_INLINE T operator()(T x) const { return T(1) / std::sqrt(x); } };
struct Log2 { template <class T> KILN_INLINE T operator()(T x) const { return std::log2(x); } };
struct Log10 { template <class T> KILN_INLINE T operator()(T x) const { return std::log10(x); } };
struct Reciprocal { template <class T> KILN_INLINE T operator()(T x) const { return T(1) / x; } };
struct Sin { template <class T> KILN_INLINE T operator()(T x) const { return std::sin(x); } };
struct Tan { template <class T> KILN_INLINE T operator()(T x) const { return std::tan(x); } };
struct Asin { template <class T> KILN_INLINE T operator()(T x) const { return std::asin(x); } };
struct Acos { template <class T> KILN_INLINE T operator()(T x) const { return std::acos(x); } };
struct Atan { template <class T> KILN_INLINE T operator()(T x) const { return std::atan(x); } };
struct Sinh { template <class T> KILN_INLINE T operator()(T x) const { return std::sinh(x); } };
struct Cosh { template <class T> KILN_INLINE T operator()(T x) const { return std::cosh(x); } };
struct Asinh { template <class T> KILN_INLINE T operator()(T x) const { return std::asinh(x); } };
struct Acosh { template <class T> KILN_INLINE T operator()(T x) const { return std::acosh(x); } };
struct Atanh { template <class T> KILN_INLINE T operator()(T x) const { return std::atanh(x); } };
// Rounding to an integer value in the input's dtype; integers are already there. round: halves to the even
// neighbour (nearbyint in the default rounding mode), as PyTorch and NumPy round.
struct Floor {
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x;
    else return std::floor(x);
  }
};
struct Ceil {
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x;
    else return std::ceil(x);
  }
};
struct Round {
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x;
    else return std::nearbyint(x);
  }
};
struct Trunc {
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x;
    else return std::trunc(x);
  }
};
struct Cos { template <class T> KILN_INLINE T operator()(T x) const { return std::cos(x); } };
// tanh: for float on the CPU, the vectorizable form of fast_math.h; elsewhere the math library.
template <class T>
KILN_INLINE T tanh_of(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return fast_math::tanh(x);
#endif
  return std::tanh(x);
}
struct Tanh { template <class T> KILN_INLINE T operator()(T x) const { return tanh_of(x); } };
struct Sigmoid {
  // NOTE: 1 / (1 + exp(-x)) is exact enough in float and saturates cleanly to 0 and 1 (exp overflow to inf
  // gives 1/inf = 0, never NaN).
  template <class T> KILN_INLINE T operator()(T x) const { return T(1) / (T(1) + exp_of(-x)); }
};
struct Relu {
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (x != x) return x;  // NaN propagates, as PyTorch's relu does
    }
    return x > T(0) ? x : T(0);
  }
};
struct Gelu {  // exact: x * Phi(x) = x/2 * (1 + erf(x / sqrt(2)))
  template <class T> KILN_INLINE T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf_of(x * T(0.70710678118654752440)));
  }
};
struct GeluTanh {  // the tanh approximation: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
  template <class T> KILN_INLINE T operator()(T x) const {
    const T k = T(0.79788456080286535588);
    return T(0.5) * x * (T(1) + tanh_of(k * (x + T(0.044715) * x * x * x)));
  }
};
struct Silu { template <class T> KILN_INLINE T operator()(T x) const { return x / (T(1) + exp_of(-x)); } };
struct LogicalNot { template <class T> KILN_INLINE bool operator()(T x) const { return !static_cast<bool>(x); } };
struct IsNan { template <class T> KILN_INLINE bool operator()(T x) const { return x != x; } };
struct IsInf {
  template <class T> KILN_INLINE bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isinf(x);
    else return false;
  }
};

// ---- unary with parameters ----
struct PowScalar {
  double exponent;
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      // Integer powers by squaring; a negative exponent is rejected by the frontend.
      T result = 1, base = x;
      for (auto e = static_cast<int64_t>(exponent); e > 0; e >>= 1) {
        if (e & 1) result *= base;
        if (e > 1) base *= base;  // not after the last bit: that square could overflow for nothing
      }
      return result;
    } else {
      if (exponent == 2.0) return x * x;
      if (exponent == 0.5) return std::sqrt(x);
      return std::pow(x, T(exponent));
    }
  }
};
struct Clamp {  // min/max absent are -inf/+inf; NaN input stays NaN
  double lo, hi;
  template <class T> KILN_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      const T l = T(lo), h = T(hi);  // read before the selects, so that the loop vectorizes (see Elu)
      const T low_clamped = x < l ? l : x;
      const T y = low_clamped > h ? h : low_clamped;
      return x != x ? x : y;
    } else {
      // Compare in double but return x itself when inside, so int64 values beyond 2^53 pass unchanged.
      if (static_cast<double>(x) < lo) return static_cast<T>(lo);
      if (static_cast<double>(x) > hi) return static_cast<T>(hi);
      return x;
    }
  }
};
struct LeakyRelu {
  double slope;
  template <class T> KILN_INLINE T operator()(T x) const {
    const T s = T(slope);  // read before the branch: see Elu
    return x > T(0) ? x : x * s;
  }
};

// ---- the activations of activation_kind.h: each value, and its gradient g f'(x) from the input ----
// The branches, the kinks and which side of a kink the gradient takes are PyTorch's, so that the numbers
// match its kernels. A NaN input gives NaN; its gradient is NaN for elu, mish, softplus and logsigmoid, and for
// the piecewise-linear ones whatever PyTorch's conditions give (g for hardtanh, hardswish and the shrinks, 0
// for hardsigmoid).
// The parameters are read into locals before any branch: a member read in one arm only is a conditional load,
// which keeps GCC from vectorizing the loop (elu ran one element at a time until it read them first).
struct Elu {  // scale x for x > 0, else scale alpha (e^(input_scale x) - 1)
  double alpha, scale, input_scale;
  explicit Elu(const ActivationParams& p) : alpha(p.a), scale(p.b), input_scale(p.c) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    const T positive = T(scale), negative = T(alpha * scale), inner = T(input_scale);
    return x > T(0) ? x * positive : expm1_of(x * inner) * negative;
  }
};
struct EluBackward {
  double alpha, scale, input_scale;
  explicit EluBackward(const ActivationParams& p) : alpha(p.a), scale(p.b), input_scale(p.c) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    const T positive = T(scale), negative = T(alpha * scale * input_scale), inner = T(input_scale);
    return x > T(0) ? g * positive : g * negative * exp_of(x * inner);
  }
};
struct Hardtanh {  // x clamped to [min_val, max_val]
  double min_val, max_val;
  explicit Hardtanh(const ActivationParams& p) : min_val(p.a), max_val(p.b) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    const T lo = T(min_val), hi = T(max_val);
    return x <= lo ? lo : (x >= hi ? hi : x);
  }
};
struct HardtanhBackward {  // no gradient at the bounds themselves, unlike clamp's
  double min_val, max_val;
  explicit HardtanhBackward(const ActivationParams& p) : min_val(p.a), max_val(p.b) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    const T lo = T(min_val), hi = T(max_val);
    return (x <= lo || x >= hi) ? T(0) : g;
  }
};
// min(max(x + 3, 0), 6): the ternaries keep NaN, as std::min and std::max in this order do.
template <class T> KILN_INLINE T relu6_of(T x) {
  const T lower = x < T(0) ? T(0) : x;
  return lower > T(6) ? T(6) : lower;
}
struct Hardsigmoid {  // relu6(x + 3) / 6
  explicit Hardsigmoid(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T x) const { return relu6_of(x + T(3)) / T(6); }
};
struct HardsigmoidBackward {
  explicit HardsigmoidBackward(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    return (x > T(-3) && x < T(3)) ? g * T(1.0 / 6.0) : T(0);
  }
};
struct Hardswish {  // x relu6(x + 3) / 6
  explicit Hardswish(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T x) const { return x * relu6_of(x + T(3)) / T(6); }
};
struct HardswishBackward {  // 0 below -3, x / 3 + 1/2 up to 3 (both ends included), 1 above
  explicit HardswishBackward(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    return x < T(-3) ? T(0) : (x <= T(3) ? g * (x / T(3) + T(0.5)) : g);
  }
};
// mish(x) = x tanh(softplus(x)). With n = e^x, tanh(log(1 + n)) = n (n + 2) / (n (n + 2) + 2): one exp and no
// log. Past x = 40 that ratio is 1 in float64 too, so x is held there and n (n + 2) never overflows.
template <class T> KILN_INLINE T tanh_softplus_of(T x, T& n) {
  n = exp_of(x < T(40) ? x : T(40));  // NaN takes the second arm; the product with x makes it NaN again
  const T a = n * (n + T(2));
  return a / (a + T(2));
}
struct Mish {
  explicit Mish(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    T n;
    return x * tanh_softplus_of(x, n);
  }
};
// d/dx x tanh(softplus(x)) = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)), sigmoid(x) = n / (n + 1).
struct MishBackward {
  explicit MishBackward(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    T n;
    const T t = tanh_softplus_of(x, n);
    return g * (t + x * (n / (n + T(1))) * (T(1) - t * t));
  }
};

// log(1 + e^z) as max(z, 0) + log(1 + e^-|z|), which never overflows; NaN stays NaN.
template <class T> KILN_INLINE T log1p_exp_of(T z) {
  const T a = z < T(0) ? -z : z;
  return (z > T(0) ? z : T(0)) + log1p_of(exp_of(-a));
}
struct Softplus {  // log(1 + e^(beta x)) / beta, x itself where beta x > threshold
  double beta, threshold;
  explicit Softplus(const ActivationParams& p) : beta(p.a), threshold(p.b) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    const T b = T(beta), t = T(threshold);
    const T bx = x * b;
    return bx > t ? x : log1p_exp_of(bx) / b;
  }
};
struct SoftplusBackward {  // g sigmoid(beta x), g where beta x > threshold
  double beta, threshold;
  explicit SoftplusBackward(const ActivationParams& p) : beta(p.a), threshold(p.b) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    const T b = T(beta), t = T(threshold);
    const T bx = x * b;
    return bx > t ? g : g / (T(1) + exp_of(-bx));
  }
};
struct Logsigmoid {  // log(1 / (1 + e^-x)) = min(x, 0) - log(1 + e^-|x|)
  explicit Logsigmoid(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    const T a = x < T(0) ? -x : x;
    return (x < T(0) ? x : T(0)) - log1p_of(exp_of(-a));
  }
};
struct LogsigmoidBackward {  // g sigmoid(-x) = g / (1 + e^x): 0 where e^x overflows
  explicit LogsigmoidBackward(const ActivationParams&) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const { return g / (T(1) + exp_of(x)); }
};
struct Softshrink {  // x - lambd above lambd, x + lambd below -lambd, 0 between (x 0, which keeps NaN)
  double lambd;
  explicit Softshrink(const ActivationParams& p) : lambd(p.a) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    const T l = T(lambd);
    return x > l ? x - l : (x < -l ? x + l : x * T(0));
  }
};
struct Hardshrink {  // 0 from -lambd to lambd (both included), else x
  double lambd;
  explicit Hardshrink(const ActivationParams& p) : lambd(p.a) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    const T l = T(lambd);
    return (x >= -l && x <= l) ? T(0) : x;
  }
};
struct ShrinkBackward {  // both shrinks: 0 from -lambd to lambd (both included), else g
  double lambd;
  explicit ShrinkBackward(const ActivationParams& p) : lambd(p.a) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    const T l = T(lambd);
    return (x >= -l && x <= l) ? T(0) : g;
  }
};

struct Threshold {  // value up to threshold (included), else x: NaN compares false and stays, as in PyTorch
  double threshold, value;
  explicit Threshold(const ActivationParams& p) : threshold(p.a), value(p.b) {}
  template <class T> KILN_INLINE T operator()(T x) const {
    const T t = T(threshold), v = T(value);  // before the select (see above: read in its arm, 45x slower)
    return x <= t ? v : x;
  }
};
struct ThresholdBackward {  // 0 up to threshold (included), else g
  double threshold;
  explicit ThresholdBackward(const ActivationParams& p) : threshold(p.a) {}
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    const T t = T(threshold);
    return x <= t ? T(0) : g;
  }
};

// Calls run(functor, name) with the value functor of `kind` (Backward false) or its gradient's (true): the one
// switch the CPU and CUDA kernels of ops::activation share.
template <bool Backward, class Run>
void visit_activation(Activation kind, const ActivationParams& p, Run&& run) {
  switch (kind) {
#define KILN_ACTIVATION_CASE(k, Forward, Gradient)                   \
  case Activation::k:                                                \
    if constexpr (Backward) return run(Gradient(p), #k "_backward"); \
    else return run(Forward(p), #k);
    KILN_FORALL_ACTIVATIONS(KILN_ACTIVATION_CASE)
#undef KILN_ACTIVATION_CASE
  }
}

// ---- binary ----
template <class T> struct AddAlpha {
  T alpha;
  KILN_INLINE T operator()(T a, T b) const { return a + alpha * b; }
};
template <class T> struct SubAlpha {
  T alpha;
  KILN_INLINE T operator()(T a, T b) const { return a - alpha * b; }
};
struct Add { template <class T> KILN_INLINE T operator()(T a, T b) const { return a + b; } };
struct Mul {
  template <class T> KILN_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else return a * b;
  }
};
struct Div { template <class T> KILN_INLINE T operator()(T a, T b) const { return a / b; } };
struct Atan2 { template <class T> KILN_INLINE T operator()(T a, T b) const { return std::atan2(a, b); } };
// fmod: a - trunc(a / b) b, the sign of a (C's %); remainder: a - floor(a / b) b, the sign of b (Python's %).
// Both exact for floats (through fmod, not the formula). Integer division by zero is refused by the frontend;
// INT_MIN % -1, which traps on x86, is 0 here.
struct Fmod {
  template <class T> KILN_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fmod(a, b);
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
      }
      return static_cast<T>(a % b);
    }
  }
};
struct Remainder {
  template <class T> KILN_INLINE T operator()(T a, T b) const {
    const T r = Fmod{}(a, b);
    if constexpr (std::is_unsigned_v<T>) {
      return r;
    } else {
      return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? static_cast<T>(r + b) : r;
    }
  }
};
struct Pow { template <class T> KILN_INLINE T operator()(T a, T b) const { return std::pow(a, b); } };
// Integer powers by squaring; a negative exponent gives what the exact result truncates to (1, -1 or 0),
// as PyTorch does.
struct PowInt {
  template <class T> KILN_INLINE T operator()(T x, T e) const {
    if constexpr (std::is_signed_v<T>) {
      if (e < 0) return static_cast<T>(x == 1 ? 1 : (x == -1 ? ((e & 1) ? -1 : 1) : 0));
    }
    return PowScalar{static_cast<double>(e)}(x);
  }
};
// gelu's gradients, g times the derivative at x, in one pass (composed of ops they were five to seven passes
// and as many temporaries). Exact: Phi(x) + x phi(x), Phi the normal CDF and phi its density.
struct GeluBackward {
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    const T cdf = T(0.5) * (T(1) + erf_of(x * T(0.70710678118654752440)));
    const T pdf = exp_of(T(-0.5) * x * x) * T(0.39894228040143267794);
    return g * (cdf + x * pdf);
  }
};
// tanh form: y = x/2 (1 + t), t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3);
// dy/dx = (1 + t) / 2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// Where t has saturated to +-1 the second term is 0 (its limit): computed, it would be 0 * inf = NaN once x^2
// overflows (|x| > 1.8e19 in float32), which PyTorch's formula gives there.
struct GeluTanhBackward {
  template <class T> KILN_INLINE T operator()(T g, T x) const {
    const T k = T(0.79788456080286535588);
    const T x2 = x * x;
    const T t = tanh_of(k * (x + T(0.044715) * x2 * x));
    const T sech2 = T(1) - t * t;
    const T tail = sech2 == T(0) ? T(0) : T(0.5) * x * sech2 * k * (T(1) + T(0.134145) * x2);
    return g * (T(0.5) * (T(1) + t) + tail);
  }
};
struct ReluBackward {  // relu's gradient from its result y: 0 where y <= 0, else g (g at NaN, as PyTorch)
  template <class T> KILN_INLINE T operator()(T g, T y) const { return y <= T(0) ? T(0) : g; }
};
struct Maximum {  // NaN wins, as in PyTorch
  template <class T> KILN_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a > b ? a : b;
  }
};
struct Minimum {
  template <class T> KILN_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? a : b;
  }
};
struct Eq { template <class T> KILN_INLINE bool operator()(T a, T b) const { return a == b; } };
struct Ne { template <class T> KILN_INLINE bool operator()(T a, T b) const { return a != b; } };
struct Lt { template <class T> KILN_INLINE bool operator()(T a, T b) const { return a < b; } };
struct Le { template <class T> KILN_INLINE bool operator()(T a, T b) const { return a <= b; } };
struct Gt { template <class T> KILN_INLINE bool operator()(T a, T b) const { return a > b; } };
struct Ge { template <class T> KILN_INLINE bool operator()(T a, T b) const { return a >= b; } };
struct LogicalAnd {
  template <class T> KILN_INLINE bool operator()(T a, T b) const { return static_cast<bool>(a) && static_cast<bool>(b); }
};
struct LogicalOr {
  template <class T> KILN_INLINE bool operator()(T a, T b) const { return static_cast<bool>(a) || static_cast<bool>(b); }
};
struct LogicalXor {
  template <class T> KILN_INLINE bool operator()(T a, T b) const { return static_cast<bool>(a) != static_cast<bool>(b); }
};

// Copy with conversion: the loops convert on load and store.
struct Identity { template <class T> KILN_INLINE T operator()(T x) const { return x; } };

// pow(x, e) for the exponents with a cheaper form (PyTorch's list): x, x^2, x^3, sqrt(x), 1/x, 1/sqrt(x), 1/x^2.
// with_pow_functor hands run the functor for e, PyTorch's special forms for a floating x, or PowScalar: picked
// once per call, outside the loop, so the loop vectorizes (std::pow, per element, does not: pow's own gradient,
// x^(e-1), cost lp_pool2d 70% of its time in powf). Integer x keeps PowScalar's exact squaring, so a caller
// instantiates the special forms for floating dtypes only (kPowSpecialForm), PowScalar for every numeric one.
struct PowTwo { template <class T> KILN_INLINE T operator()(T x) const { return x * x; } };
struct PowThree { template <class T> KILN_INLINE T operator()(T x) const { return x * x * x; } };
struct PowMinusTwo { template <class T> KILN_INLINE T operator()(T x) const { return T(1) / (x * x); } };
template <class F>
inline constexpr bool kPowSpecialForm = !std::is_same_v<F, PowScalar>;
template <class Run>
inline void with_pow_functor(double e, bool floating, Run&& run) {
  if (floating) {
    if (e == 1.0) return run(Identity{});
    if (e == 2.0) return run(PowTwo{});
    if (e == 3.0) return run(PowThree{});
    if (e == 0.5) return run(Sqrt{});
    if (e == -1.0) return run(Reciprocal{});
    if (e == -0.5) return run(Rsqrt{});
    if (e == -2.0) return run(PowMinusTwo{});
  }
  run(PowScalar{e});
}

// ---- ternary ----
struct Where {
  template <class T> KILN_INLINE T operator()(bool c, T a, T b) const { return c ? a : b; }
};
struct Lerp {  // start + weight * (end - start), in the form PyTorch uses for weight >= 0.5 to hit end exactly
  template <class T> KILN_INLINE T operator()(T start, T end, T w) const {
    T diff = end - start;
    return (w < T(0.5)) ? start + w * diff : end - diff * (T(1) - w);
  }
};

}  // namespace kiln::functors

// The element-wise ops that apply one functor with no parameters, and the dtypes each accepts. The CPU and the
// CUDA kernel files both expand these lists, so the two devices run the same functor on the same dtypes.
// X(op, dtype set of the inputs, functor)
#define KILN_FORALL_UNARY_FUNCTORS(X) \
  X(neg, kNumericSet, Neg)            \
  X(abs, kNumericSet, Abs)            \
  X(sign, kNumericSet, Sign)          \
  X(relu, kNumericSet, Relu)          \
  X(exp, kFloatingSet, Exp)           \
  X(log, kFloatingSet, Log)           \
  X(log1p, kFloatingSet, Log1p)       \
  X(expm1, kFloatingSet, Expm1)       \
  X(erf, kFloatingSet, Erf)           \
  X(sqrt, kFloatingSet, Sqrt)         \
  X(rsqrt, kFloatingSet, Rsqrt)       \
  X(log2, kFloatingSet, Log2)         \
  X(log10, kFloatingSet, Log10)       \
  X(reciprocal, kFloatingSet, Reciprocal) \
  X(sin, kFloatingSet, Sin)           \
  X(cos, kFloatingSet, Cos)           \
  X(tan, kFloatingSet, Tan)           \
  X(asin, kFloatingSet, Asin)         \
  X(acos, kFloatingSet, Acos)         \
  X(atan, kFloatingSet, Atan)         \
  X(sinh, kFloatingSet, Sinh)          \
  X(cosh, kFloatingSet, Cosh)          \
  X(asinh, kFloatingSet, Asinh)        \
  X(acosh, kFloatingSet, Acosh)        \
  X(atanh, kFloatingSet, Atanh)        \
  X(floor, kNumericSet, Floor)        \
  X(ceil, kNumericSet, Ceil)          \
  X(round, kNumericSet, Round)        \
  X(trunc, kNumericSet, Trunc)        \
  X(tanh, kFloatingSet, Tanh)         \
  X(sigmoid, kFloatingSet, Sigmoid)   \
  X(gelu, kFloatingSet, Gelu)         \
  X(gelu_tanh, kFloatingSet, GeluTanh) \
  X(silu, kFloatingSet, Silu)
// Unary ops with a bool result, on every dtype: X(op, functor)
#define KILN_FORALL_UNARY_BOOL_FUNCTORS(X) \
  X(logical_not, LogicalNot)               \
  X(isnan, IsNan)                          \
  X(isinf, IsInf)
// Binary ops on two operands of one dtype with a result of that dtype: X(op, dtype set, functor)
#define KILN_FORALL_BINARY_FUNCTORS(X) \
  X(mul, kAllSet, Mul)                 \
  X(div, kFloatingSet, Div)            \
  X(atan2, kFloatingSet, Atan2)        \
  X(fmod, kNumericSet, Fmod)           \
  X(remainder, kNumericSet, Remainder) \
  X(maximum, kAllSet, Maximum)         \
  X(minimum, kAllSet, Minimum)         \
  X(relu_backward, kFloatingSet, ReluBackward)  \
  X(gelu_backward, kFloatingSet, GeluBackward)  \
  X(gelu_tanh_backward, kFloatingSet, GeluTanhBackward)
// Binary ops with a bool result, on every dtype: X(op, functor)
#define KILN_FORALL_BINARY_BOOL_FUNCTORS(X) \
  X(eq, Eq)                                 \
  X(ne, Ne)                                 \
  X(lt, Lt)                                 \
  X(le, Le)                                 \
  X(gt, Gt)                                 \
  X(ge, Ge)                                 \
  X(logical_and, LogicalAnd)                \
  X(logical_or, LogicalOr)                  \
  X(logical_xor, LogicalXor)
