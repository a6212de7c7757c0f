// Differentiable element-wise binary and ternary ops. Gradients are returned with the output's (broadcast)
// shape; the engine sums each back to its input's shape, so no rule here deals with broadcasting.
// A rule computes a gradient only when that input needs one (n.needs_input_grad(i)).
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::requires_grad;
using autograd::record;
using autograd::record_inplace;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

// add: da = g, db = alpha g
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  Tensor out = ops::add(a, b, alpha);
  if (should_record(a, b)) {
    record("add", out, {a, b}, [alpha](const Tensor& g, const OpNode& n) {
      bool one = !alpha.is_floating() && alpha.to_int() == 1;
      return TensorList{g, n.needs_input_grad(1) ? (one ? g : g * alpha) : Tensor()};
    });
  }
  return out;
}
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  Tensor out = ops::add(a, b, alpha);
  if (should_record(a)) record("add", out, {a}, [](const Tensor& g, const OpNode&) { return TensorList{g}; });
  return out;
}

// sub: da = g, db = -alpha g
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  Tensor out = ops::sub(a, b, alpha);
  if (should_record(a, b)) {
    record("sub", out, {a, b}, [alpha](const Tensor& g, const OpNode& n) {
      return TensorList{g, n.needs_input_grad(1) ? g * -alpha.to_double() : Tensor()};
    });
  }
  return out;
}
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  Tensor out = ops::sub(a, b, alpha);
  if (should_record(a)) record("sub", out, {a}, [](const Tensor& g, const OpNode&) { return TensorList{g}; });
  return out;
}

// The in-place forms of add and sub never read self's old value in backward: no copy of it is kept.
Tensor& add_(Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (!should_record(a, b)) return ops::add_(a, b, alpha);
  return record_inplace("add_", a, [&](const Tensor& old) { return add(old, b, alpha); }, /*reads_self=*/false);
}
Tensor& add_(Tensor& a, const Scalar& b, const Scalar& alpha) {
  if (!should_record(a)) return ops::add_(a, b, alpha);
  return record_inplace("add_", a, [&](const Tensor& old) { return add(old, b, alpha); }, false);
}
Tensor& sub_(Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (!should_record(a, b)) return ops::sub_(a, b, alpha);
  return record_inplace("sub_", a, [&](const Tensor& old) { return sub(old, b, alpha); }, false);
}
Tensor& sub_(Tensor& a, const Scalar& b, const Scalar& alpha) {
  if (!should_record(a)) return ops::sub_(a, b, alpha);
  return record_inplace("sub_", a, [&](const Tensor& old) { return sub(old, b, alpha); }, false);
}

// mul: da = g b, db = g a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = ops::mul(a, b);
  if (should_record(a, b)) {
    bool need_a = requires_grad(a), need_b = requires_grad(b);
    // Each input is saved only if the other one's gradient needs it.
    record("mul", out, {a, b},
           [sa = need_b ? SavedTensor(a, false) : SavedTensor(), sb = need_a ? SavedTensor(b, false) : SavedTensor()](
               const Tensor& g, const OpNode& n) {
             return TensorList{n.needs_input_grad(0) ? g * sb.get(n) : Tensor(),
                               n.needs_input_grad(1) ? g * sa.get(n) : Tensor()};
           });
  }
  return out;
}
// mul by a number: da = g s
Tensor mul(const Tensor& a, const Scalar& s) {
  Tensor out = ops::mul(a, s);
  if (should_record(a)) record("mul", out, {a}, [s](const Tensor& g, const OpNode&) { return TensorList{g * s}; });
  return out;
}

// div: da = g / b, db = -g a / b^2
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = ops::div(a, b);
  if (should_record(a, b)) {
    bool need_b = requires_grad(b);
    record("div", out, {a, b},
           [sa = need_b ? SavedTensor(a, false) : SavedTensor(), sb = SavedTensor(b, false)](const Tensor& g,
                                                                                           const OpNode& n) {
             Tensor b = sb.get(n);
             return TensorList{n.needs_input_grad(0) ? g / b : Tensor(),
                               n.needs_input_grad(1) ? -(g * sa.get(n)) / (b * b) : Tensor()};
           });
  }
  return out;
}
Tensor div(const Tensor& a, const Scalar& s) {
  Tensor out = ops::div(a, s);
  if (should_record(a)) record("div", out, {a}, [s](const Tensor& g, const OpNode&) { return TensorList{g / s}; });
  return out;
}

// maximum / minimum: the gradient goes to the input that won; a tie splits it in halves, as PyTorch does.
namespace {
template <bool is_max>
Tensor extremum(const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = is_max ? ops::maximum(a, b) : ops::minimum(a, b);
  if (should_record(a, b)) {
    record(name, out, {a, b}, [sa = SavedTensor(a, false), sb = SavedTensor(b, false)](const Tensor& g, const OpNode& n) {
      Tensor a = sa.get(n), b = sb.get(n);
      Tensor wins = is_max ? ops::gt(a, b) : ops::lt(a, b);
      Tensor w = ops::where(ops::eq(a, b), 0.5, ops::to(wins, g.dtype()));  // a's share
      return TensorList{n.needs_input_grad(0) ? g * w : Tensor(), n.needs_input_grad(1) ? g * (1 - w) : Tensor()};
    });
  }
  return out;
}
}  // namespace
Tensor maximum(const Tensor& a, const Tensor& b) { return extremum<true>("maximum", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum<false>("minimum", a, b); }
Tensor maximum(const Tensor& a, const Scalar& b) { return maximum(a, ops::scalar_to_tensor(b, a.device())); }
Tensor minimum(const Tensor& a, const Scalar& b) { return minimum(a, ops::scalar_to_tensor(b, a.device())); }

// atan2(a, b), the angle of (b, a): da = g b / (a^2 + b^2), db = -g a / (a^2 + b^2)
Tensor atan2(const Tensor& a, const Tensor& b) {
  Tensor out = ops::atan2(a, b);
  if (should_record(a, b)) {
    record("atan2", out, {a, b}, [sa = SavedTensor(a, false), sb = SavedTensor(b, false)](const Tensor& g,
                                                                                          const OpNode& n) {
      Tensor a = sa.get(n), b = sb.get(n);
      Tensor scale = g / (a * a + b * b);
      return TensorList{n.needs_input_grad(0) ? scale * b : Tensor(), n.needs_input_grad(1) ? -(scale * a) : Tensor()};
    });
  }
  return out;
}
Tensor atan2(const Tensor& a, const Scalar& b) { return atan2(a, ops::scalar_to_tensor(b, a.device())); }

// fmod(a, b) = a - trunc(a / b) b: da = g, db = -g trunc(a / b); remainder the same with floor (the quotient is
// piecewise constant, so its own derivative is 0)
namespace {
template <bool is_fmod>
Tensor modulo(const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = is_fmod ? ops::fmod(a, b) : ops::remainder(a, b);
  if (should_record(a, b)) {
    const bool need_b = requires_grad(b);
    record(name, out, {a, b},
           [sa = need_b ? SavedTensor(a, false) : SavedTensor(), sb = need_b ? SavedTensor(b, false) : SavedTensor()](
               const Tensor& g, const OpNode& n) {
             Tensor db;
             if (n.needs_input_grad(1)) {
               Tensor q = ops::div(sa.get(n), sb.get(n));
               db = -(g * (is_fmod ? ops::trunc(q) : ops::floor(q)));
             }
             return TensorList{n.needs_input_grad(0) ? g : Tensor(), db};
           });
  }
  return out;
}
}  // namespace
Tensor fmod(const Tensor& a, const Tensor& b) { return modulo<true>("fmod", a, b); }
Tensor remainder(const Tensor& a, const Tensor& b) { return modulo<false>("remainder", a, b); }
Tensor fmod(const Tensor& a, const Scalar& b) { return fmod(a, ops::scalar_to_tensor(b, a.device())); }
Tensor remainder(const Tensor& a, const Scalar& b) { return remainder(a, ops::scalar_to_tensor(b, a.device())); }

#define KILN_BINARY_INPLACE(name)                                                                          \
  Tensor& name##_(Tensor& a, const Tensor& b) {                                                            \
    if (!should_record(a, b)) return ops::name##_(a, b);                                                   \
    return record_inplace(#name "_", a, [&](const Tensor& old) { return name(old, b); });                  \
  }                                                                                                        \
  Tensor& name##_(Tensor& a, const Scalar& b) {                                                            \
    if (!should_record(a)) return ops::name##_(a, b);                                                      \
    return record_inplace(#name "_", a, [&](const Tensor& old) { return name(old, b); });                  \
  }
KILN_BINARY_INPLACE(mul)
KILN_BINARY_INPLACE(div)
KILN_BINARY_INPLACE(maximum)
KILN_BINARY_INPLACE(minimum)
KILN_BINARY_INPLACE(atan2)
KILN_BINARY_INPLACE(fmod)
KILN_BINARY_INPLACE(remainder)
#undef KILN_BINARY_INPLACE

// pow(a, b) = a^b: da = g b a^(b-1), db = g a^b log(a) (0 where a == 0 and b >= 0, the limit PyTorch takes)
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = ops::pow(a, b);
  if (should_record(a, b)) {
    record("pow", out, {a, b},
           [sa = SavedTensor(a, false), sb = SavedTensor(b, false), so = SavedTensor(out, true)](const Tensor& g,
                                                                                                const OpNode& n) {
             Tensor a = sa.get(n), b = sb.get(n);
             Tensor ga, gb;
             if (n.needs_input_grad(0)) ga = where(ops::eq(b, 0), 0.0, g * b * pow(a, b - 1));
             if (n.needs_input_grad(1)) {
               Tensor zero_base = ops::logical_and(ops::eq(a, 0), ops::ge(b, 0));
               gb = where(zero_base, 0.0, g * so.get(n) * log(a));
             }
             return TensorList{ga, gb};
           });
  }
  return out;
}
Tensor& pow_(Tensor& a, const Tensor& b) {
  if (!should_record(a, b)) return ops::pow_(a, b);
  return record_inplace("pow_", a, [&](const Tensor& old) { return pow(old, b); });
}
// pow(s, b) = s^b: db = g s^b log(s)
Tensor pow(const Scalar& s, const Tensor& b) {
  Tensor out = ops::pow(s, b);
  if (should_record(b)) {
    double log_s = std::log(s.to_double());
    record("pow", out, {b}, [so = SavedTensor(out, true), log_s](const Tensor& g, const OpNode& n) {
      return TensorList{g * so.get(n) * log_s};
    });
  }
  return out;
}

// where(cond, a, b): da = g where cond, db = g elsewhere
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = ops::where(cond, a, b);
  if (should_record(a, b)) {
    record("where", out, {a, b}, [cond](const Tensor& g, const OpNode& n) {
      return TensorList{n.needs_input_grad(0) ? where(cond, g, 0.0) : Tensor(),
                        n.needs_input_grad(1) ? where(cond, 0.0, g) : Tensor()};
    });
  }
  return out;
}
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) {
  Tensor out = ops::where(cond, a, b);
  if (should_record(b))
    record("where", out, {b}, [cond](const Tensor& g, const OpNode&) { return TensorList{where(cond, 0.0, g)}; });
  return out;
}
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) {
  Tensor out = ops::where(cond, a, b);
  if (should_record(a))
    record("where", out, {a}, [cond](const Tensor& g, const OpNode&) { return TensorList{where(cond, g, 0.0)}; });
  return out;
}

// masked_fill: dx = g where the mask is false
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  Tensor out = ops::masked_fill(x, mask, value);
  if (should_record(x))
    record("masked_fill", out, {x}, [mask](const Tensor& g, const OpNode&) { return TensorList{where(mask, 0.0, g)}; });
  return out;
}
Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value) {
  if (!should_record(x)) return ops::masked_fill_(x, mask, value);
  return record_inplace("masked_fill_", x, [&](const Tensor& old) { return masked_fill(old, mask, value); }, false);
}

// lerp: out = s + w (e - s); ds = g (1 - w), de = g w, dw = g (e - s)
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  Tensor out = ops::lerp(start, end, weight);
  if (should_record(start, end, weight)) {
    record("lerp", out, {start, end, weight},
           [ss = SavedTensor(start, false), se = SavedTensor(end, false), sw = SavedTensor(weight, false)](
               const Tensor& g, const OpNode& n) {
             Tensor w = sw.get(n);
             return TensorList{n.needs_input_grad(0) ? g * (1 - w) : Tensor(),
                               n.needs_input_grad(1) ? g * w : Tensor(),
                               n.needs_input_grad(2) ? g * (se.get(n) - ss.get(n)) : Tensor()};
           });
  }
  return out;
}
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight) {
  Tensor out = ops::lerp(start, end, weight);
  if (should_record(start, end)) {
    double w = weight.to_double();
    record("lerp", out, {start, end}, [w](const Tensor& g, const OpNode& n) {
      return TensorList{n.needs_input_grad(0) ? g * (1 - w) : Tensor(), n.needs_input_grad(1) ? g * w : Tensor()};
    });
  }
  return out;
}

}  // namespace kiln
