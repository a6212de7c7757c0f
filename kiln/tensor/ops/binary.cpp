// Frontends of the element-wise binary and ternary ops: type promotion (PyTorch's result_type), broadcasting,
// output allocation, in-place checks, dispatch.
#include "kiln/tensor/views.h"
#include "kiln/tensor/ops/binary.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/reduce.h"
#include "kiln/tensor/ops/unary.h"

namespace kiln::ops {

// ---- type promotion ----
//
// Operands fall into three priority classes: tensors with dims, 0-dim tensors, and wrapped numbers (C++ scalars).
// The result starts from the dimensioned tensors; a lower class changes it only when it is of a higher
// category (bool < integral < floating): float32 tensor + float64 0-dim tensor stays float32, int tensor +
// 2.5 becomes the default float dtype.
namespace {

struct Promotion {
  std::optional<DType> dimensioned, zero_dim, wrapped;
  void add(const Tensor& t) {
    auto& slot = t.impl()->is_wrapped_number ? wrapped : (t.dim() == 0 ? zero_dim : dimensioned);
    DType d = t.dtype();
    // A wrapped float number counts as the default float dtype, whatever precision it was stored in.
    if (t.impl()->is_wrapped_number && is_floating(d)) d = default_dtype();
    slot = slot ? promote_types(*slot, d) : d;
  }
  DType result() const {
    std::optional<DType> r = dimensioned;
    for (const auto& lower : {zero_dim, wrapped}) {
      if (!lower) continue;
      if (!r || dtype_category(*lower) > dtype_category(*r)) r = r ? promote_types(*r, *lower) : *lower;
    }
    return *r;
  }
};

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  Promotion p;
  p.add(a);
  p.add(b);
  return p.result();
}

DType result_type(const Tensor& a, const Scalar& b) { return result_type(a, scalar_to_tensor(b)); }

Tensor scalar_to_tensor(const Scalar& s, Device device) {
  // Stored at full precision (float64/int64/bool); promotion treats it by category only.
  DType d = s.is_floating() ? kFloat64 : s.dtype();
  Tensor t = full({}, s, TensorOptions(d).device(device));
  t.impl()->is_wrapped_number = true;
  return t;
}

namespace {

enum class Kind {
  Arith,      // result in the common dtype
  TrueDiv,    // integer and bool inputs divide in the default float dtype
  Compare,    // compute in the common dtype, bool result
  Logical,    // any dtypes, bool result
};

// The device the op runs on: the one of the tensor(s) with dims. 0-dim CPU tensors (and wrapped numbers)
// follow the other operand to its device, as in PyTorch.
Device common_device(const char* op, std::initializer_list<const Tensor*> ts) {
  std::optional<Device> dev;
  for (const Tensor* t : ts) {
    KILN_CHECK(t->defined(), op, ": an input tensor is undefined");
    if (t->dim() == 0 && t->device().is_cpu()) continue;
    if (!dev) dev = t->device();
    KILN_CHECK(*dev == t->device(), op, ": expected all tensors on one device, got ", *dev, " and ", t->device());
  }
  return dev.value_or(kCPU);
}

struct Prepared {
  Tensor a, b;
  Shape shape;
  Device device;
  DType compute;
  DType out;
};

Prepared prepare(const char* op, const Tensor& a, const Tensor& b, Kind kind) {
  Prepared p;
  p.device = common_device(op, {&a, &b});
  p.shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  p.compute = result_type(a, b);
  if (kind == Kind::TrueDiv && !is_floating(p.compute)) p.compute = default_dtype();
  p.out = (kind == Kind::Compare || kind == Kind::Logical) ? kBool : p.compute;
  p.a = ops::expand(ops::to(a, p.device, p.compute), p.shape);
  p.b = ops::expand(ops::to(b, p.device, p.compute), p.shape);
  return p;
}

template <Op op, typename... Extra>
Tensor binary(const Tensor& a, const Tensor& b, Kind kind, Extra... extra) {
  Prepared p = prepare(op_name(op), a, b, kind);
  Tensor out = empty(p.shape, TensorOptions(p.out).device(p.device));
  call_kernel<op>(p.device, out, p.a, p.b, extra...);
  return out;
}

// PyTorch's can_cast: the in-place result may not move down a category (float into int, int into bool).
void check_inplace(const char* op, const Tensor& self, DType result, IntArrayRef shape) {
  KILN_CHECK(dtype_category(result) <= dtype_category(self.dtype()), op, ": the result has dtype ", result,
             ", which cannot be written in place into a tensor of dtype ", self.dtype());
  KILN_CHECK(shape.vec() == self.sizes(), op, ": the result has the broadcast shape ", shape_str(shape),
             ", which does not match the in-place tensor's shape ", shape_str(self.sizes()));
}

template <Op op, typename... Extra>
Tensor& binary_(Tensor& self, const Tensor& b_in, Kind kind, Extra... extra) {
  std::string name = std::string(op_name(op)) + "_";
  KILN_CHECK(!self.has_internal_overlap(), name, ": cannot write in place into a tensor of shape ",
             shape_str(self.sizes()), " whose elements repeat (it was expanded); clone() it first");
  // An operand that partly overlaps self (x.add_(x.t())) would be read after being written: copy it first.
  // The very same view is fine: each element is read before it is written, by the same iteration.
  Tensor b = (b_in.may_overlap(self) && !b_in.is_same_view(self)) ? ops::clone(b_in) : b_in;
  Prepared p = prepare(name.c_str(), self, b, kind);
  check_inplace(name.c_str(), self, p.compute, p.shape);
  if (p.compute == self.dtype()) {
    call_kernel<op>(p.device, self, p.a, p.b, extra...);
  } else {  // e.g. float16 += float32: compute in float32, round once into self
    Tensor tmp = empty(p.shape, TensorOptions(p.compute).device(p.device));
    call_kernel<op>(p.device, tmp, p.a, p.b, extra...);
    ops::copy_(self, tmp);
  }
  self.bump_version(op_inplace_name(op));
  return self;
}

void check_alpha(const char* op, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  DType d = result_type(a, b);
  KILN_CHECK(is_floating(d) || !alpha.is_floating(), op, ": alpha must be an integer for ", d, " inputs, got ", alpha);
  KILN_CHECK(d != kBool || alpha.is_bool() || alpha.to_int() == 1 || alpha.to_int() == 0, op,
             ": alpha must be a bool for bool inputs, got ", alpha);
}

Tensor wrap(const Scalar& s) { return scalar_to_tensor(s); }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  check_alpha("add", a, b, alpha);
  return binary<Op::add>(a, b, Kind::Arith, alpha);
}
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) { return add(a, wrap(b), alpha); }
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  KILN_CHECK(result_type(a, b) != kBool, "sub: subtracting bool tensors is not supported (use logical_xor)");
  check_alpha("sub", a, b, alpha);
  return binary<Op::sub>(a, b, Kind::Arith, alpha);
}
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) { return sub(a, wrap(b), alpha); }
Tensor& add_(Tensor& a, const Tensor& b, const Scalar& alpha) {
  check_alpha("add_", a, b, alpha);
  return binary_<Op::add>(a, b, Kind::Arith, alpha);
}
Tensor& add_(Tensor& a, const Scalar& b, const Scalar& alpha) { return add_(a, wrap(b), alpha); }
Tensor& sub_(Tensor& a, const Tensor& b, const Scalar& alpha) {
  KILN_CHECK(result_type(a, b) != kBool, "sub_: subtracting bool tensors is not supported (use logical_xor)");
  check_alpha("sub_", a, b, alpha);
  return binary_<Op::sub>(a, b, Kind::Arith, alpha);
}
Tensor& sub_(Tensor& a, const Scalar& b, const Scalar& alpha) { return sub_(a, wrap(b), alpha); }

#define KILN_BINARY_DEF(name, kind)                                                                 \
  Tensor name(const Tensor& a, const Tensor& b) { return binary<Op::name>(a, b, Kind::kind); }      \
  Tensor name(const Tensor& a, const Scalar& b) { return name(a, wrap(b)); }                        \
  Tensor& name##_(Tensor& a, const Tensor& b) { return binary_<Op::name>(a, b, Kind::kind); }       \
  Tensor& name##_(Tensor& a, const Scalar& b) { return name##_(a, wrap(b)); }
KILN_BINARY_DEF(mul, Arith)
KILN_BINARY_DEF(div, TrueDiv)
KILN_BINARY_DEF(maximum, Arith)
KILN_BINARY_DEF(minimum, Arith)
KILN_BINARY_DEF(atan2, TrueDiv)
#undef KILN_BINARY_DEF

namespace {
// An integer divisor of 0 has no result (the division traps on x86): an error, as in PyTorch. Costs a
// synchronization on a GPU, for integer operands only.
void check_integer_divisor(const char* op, const Tensor& a, const Tensor& b) {
  if (is_floating(result_type(a, b))) return;
  KILN_CHECK(!ops::any(ops::eq(b, 0)).item<bool>(), op, ": integer division by zero (the divisor of shape ",
             shape_str(b.sizes()), " holds a 0)");
}
}  // namespace

#define KILN_MODULO_DEF(name)                                                                                 \
  Tensor name(const Tensor& a, const Tensor& b) {                                                             \
    check_integer_divisor(#name, a, b);                                                                       \
    return binary<Op::name>(a, b, Kind::Arith);                                                               \
  }                                                                                                           \
  Tensor name(const Tensor& a, const Scalar& b) { return name(a, wrap(b)); }                                  \
  Tensor& name##_(Tensor& a, const Tensor& b) {                                                               \
    check_integer_divisor(#name "_", a, b);                                                                   \
    return binary_<Op::name>(a, b, Kind::Arith);                                                              \
  }                                                                                                           \
  Tensor& name##_(Tensor& a, const Scalar& b) { return name##_(a, wrap(b)); }
KILN_MODULO_DEF(fmod)
KILN_MODULO_DEF(remainder)
#undef KILN_MODULO_DEF

Tensor relu_backward(const Tensor& grad, const Tensor& result) {
  KILN_CHECK(is_floating(grad.dtype()) && is_floating(result.dtype()), "relu_backward: expected floating tensors, got ",
             grad.dtype(), " and ", result.dtype());
  return binary<Op::relu_backward>(grad, result, Kind::Arith);
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate) {
  KILN_CHECK(is_floating(grad.dtype()) && is_floating(x.dtype()), "gelu_backward: expected floating tensors, got ",
             grad.dtype(), " and ", x.dtype());
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu_backward: approximate must be \"none\" or ",
             "\"tanh\", got \"", approximate, "\"");
  return approximate == "tanh" ? binary<Op::gelu_tanh_backward>(grad, x, Kind::Arith)
                               : binary<Op::gelu_backward>(grad, x, Kind::Arith);
}

// pow(Tensor, Scalar) is a unary op (unary.cpp); these take a tensor exponent.
Tensor pow(const Tensor& a, const Tensor& b) { return binary<Op::pow>(a, b, Kind::Arith); }
Tensor& pow_(Tensor& a, const Tensor& b) { return binary_<Op::pow>(a, b, Kind::Arith); }
Tensor pow(const Scalar& a, const Tensor& b) { return pow(wrap(a), b); }

#define KILN_COMPARE_DEF(name)                                                                      \
  Tensor name(const Tensor& a, const Tensor& b) { return binary<Op::name>(a, b, Kind::Compare); }   \
  Tensor name(const Tensor& a, const Scalar& b) { return name(a, wrap(b)); }
KILN_COMPARE_DEF(eq)
KILN_COMPARE_DEF(ne)
KILN_COMPARE_DEF(lt)
KILN_COMPARE_DEF(le)
KILN_COMPARE_DEF(gt)
KILN_COMPARE_DEF(ge)
#undef KILN_COMPARE_DEF

Tensor logical_and(const Tensor& a, const Tensor& b) { return binary<Op::logical_and>(a, b, Kind::Logical); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary<Op::logical_or>(a, b, Kind::Logical); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return binary<Op::logical_xor>(a, b, Kind::Logical); }

// ---- ternary ----

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Device dev = common_device("where", {&cond, &a, &b});
  KILN_CHECK(cond.dtype() == kBool, "where: condition must be a bool tensor, got ", cond.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  DType d = result_type(a, b);
  Tensor out = empty(shape, TensorOptions(d).device(dev));
  call_kernel<Op::where>(dev, out, ops::expand(ops::to(cond, dev), shape), ops::expand(ops::to(a, dev, d), shape),
                         ops::expand(ops::to(b, dev, d), shape));
  return out;
}
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) { return where(cond, wrap(a), b); }
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) { return where(cond, a, wrap(b)); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  KILN_CHECK(mask.dtype() == kBool, "masked_fill: mask must be a bool tensor, got ", mask.dtype());
  Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  KILN_CHECK(shape == x.sizes(), "masked_fill: mask of shape ", shape_str(mask.sizes()),
             " does not broadcast to the tensor's shape ", shape_str(x.sizes()));
  return where(mask, full({}, value, TensorOptions(x.dtype()).device(x.device())), x);
}

Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value) {
  ops::copy_(x, masked_fill(x, mask, value));
  return x;
}

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  Device dev = common_device("lerp", {&start, &end, &weight});
  DType d = result_type(start, end);
  KILN_CHECK(is_floating(d), "lerp: expected float tensors, got ", start.dtype(), " and ", end.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(start.sizes(), end.sizes(), "lerp"), weight.sizes(), "lerp");
  Tensor out = empty(shape, TensorOptions(d).device(dev));
  call_kernel<Op::lerp>(dev, out, ops::expand(ops::to(start, dev, d), shape), ops::expand(ops::to(end, dev, d), shape),
                        ops::expand(ops::to(weight, dev, d), shape));
  return out;
}
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight) { return lerp(start, end, wrap(weight)); }

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  KILN_CHECK(rtol >= 0 && atol >= 0, "isclose: rtol and atol must be >= 0, got ", rtol, " and ", atol);
  const DType d = result_type(a, b);
  if (!is_floating(d)) return eq(a, b);
  const Tensor fa = ops::to(a, d), fb = ops::to(b, d);
  // Equal elements (infinities among them) are close, and others whose difference is finite and within the
  // tolerance (an infinite difference is not, though an infinite b makes the tolerance infinite too).
  const Tensor error = abs(sub(fa, fb));
  Tensor close = logical_or(eq(fa, fb), logical_and(isfinite(error), le(error, add(mul(abs(fb), rtol), atol))));
  if (equal_nan) close = logical_or(close, logical_and(isnan(fa), isnan(fb)));
  return close;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return all(isclose(a, b, rtol, atol, equal_nan)).item<bool>();
}

bool equal(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "equal: an input tensor is undefined");
  return a.sizes() == b.sizes() && all(eq(a, b)).item<bool>();
}

}  // namespace kiln::ops
