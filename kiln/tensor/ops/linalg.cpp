// Frontends of the matrix products: shape rules (PyTorch's matmul), type promotion, and the reduction of
// every case to one batched kernel, bmm: out (B, M, N) = beta * out + alpha * a (B, M, K) @ b (B, K, N).
#include "kiln/tensor/views.h"
#include "kiln/tensor/ops/linalg.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"

namespace kiln::ops {
namespace {

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), op, ": an input tensor is undefined");
  KILN_CHECK(a.device() == b.device(), op, ": expected both tensors on one device, got ", a.device(), " and ", b.device());
  KILN_CHECK(a.dtype() != kBool && b.dtype() != kBool, op, ": bool tensors are not supported");
}

// out: (B, M, N) contiguous, freshly allocated unless beta != 0.
void run_bmm(const Tensor& out, const Tensor& a, const Tensor& b, double beta, double alpha) {
  if (out.numel() == 0) return;
  call_kernel<Op::bmm>(out.device(), out, a, b, beta, alpha);
}

}  // namespace

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_pair("bmm", a, b);
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()));
  KILN_CHECK(a.size(0) == b.size(0), "bmm: batch sizes of ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " do not match: ", a.size(0), " != ", b.size(0));
  KILN_CHECK(a.size(2) == b.size(1), "bmm: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " do not match: ", a.size(2), " != ", b.size(1));
  DType d = result_type(a, b);
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, TensorOptions(d).device(a.device()));
  if (a.size(2) == 0) return ops::fill_(out, 0);
  run_bmm(out, ops::to(a, d), ops::to(b, d), 0.0, 1.0);
  return out;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_pair("mm", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()));
  KILN_CHECK(a.size(1) == b.size(0), "mm: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " do not match: ", a.size(1), " != ", b.size(0));
  return ops::squeeze(bmm(ops::unsqueeze(a, 0), ops::unsqueeze(b, 0)), 0);
}

Tensor mv(const Tensor& a, const Tensor& v) {
  check_pair("mv", a, v);
  KILN_CHECK(a.dim() == 2 && v.dim() == 1, "mv: expected a 2-D and a 1-D tensor, got shapes ", shape_str(a.sizes()),
             " and ", shape_str(v.sizes()));
  KILN_CHECK(a.size(1) == v.size(0), "mv: shapes ", shape_str(a.sizes()), " and ", shape_str(v.sizes()),
             " do not match: ", a.size(1), " != ", v.size(0));
  return ops::squeeze(mm(a, ops::unsqueeze(v, 1)), 1);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_pair("dot", a, b);
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "dot: expected 1-D tensors, got shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()));
  KILN_CHECK(a.size(0) == b.size(0), "dot: sizes do not match: ", a.size(0), " != ", b.size(0));
  return ops::view(mm(ops::unsqueeze(a, 0), ops::unsqueeze(b, 1)), {});
}

Tensor outer(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected 1-D tensors, got shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()));
  return mul(ops::unsqueeze(a, 1), ops::unsqueeze(b, 0));
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_pair("matmul", a, b);
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got shapes ",
             shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  if (a.dim() == 1 && b.dim() == 1) return dot(a, b);
  if (a.dim() == 2 && b.dim() == 1) return mv(a, b);
  if (a.dim() == 1 && b.dim() == 2) return ops::squeeze(mm(ops::unsqueeze(a, 0), b), 0);
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  int64_t k_a = a.size(-1), k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  KILN_CHECK(k_a == k_b, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()), " do not match: ", k_a,
             " != ", k_b);
  // (..., M, K) @ (K, N) or (K): fold the batch dims into M and do one matrix product.
  if (a.dim() >= 3 && b.dim() <= 2) {
    Shape out_shape(a.sizes().begin(), a.sizes().end() - 1);
    Tensor b2 = b.dim() == 1 ? ops::unsqueeze(b, 1) : b;
    if (b.dim() == 2) out_shape.push_back(b.size(1));
    int64_t rows = shape_numel(IntArrayRef(a.sizes().data(), a.sizes().size() - 1));  // not -1: k_a may be 0
    return ops::reshape(mm(ops::reshape(a, {rows, k_a}), b2), out_shape);
  }
  // General case: broadcast the batch dims, then bmm.
  Tensor a3 = a.dim() == 1 ? ops::unsqueeze(a, 0) : a;
  Tensor b3 = b.dim() == 1 ? ops::unsqueeze(b, 1) : b;
  Shape batch_a(a3.sizes().begin(), a3.sizes().end() - 2), batch_b(b3.sizes().begin(), b3.sizes().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  int64_t m = a3.size(-2), n = b3.size(-1);
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {m, k_a});
  eb.insert(eb.end(), {k_a, n});
  int64_t nb = shape_numel(batch);
  Tensor out = bmm(ops::reshape(ops::expand(a3, ea), {nb, m, k_a}), ops::reshape(ops::expand(b3, eb), {nb, k_a, n}));
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  if (b.dim() > 1) out_shape.push_back(n);
  return ops::view(out, out_shape);
}

namespace {

Tensor add_product(const char* op, const Tensor& c, const Tensor& a3, const Tensor& b3, const Scalar& beta,
                   const Scalar& alpha, bool batched) {
  DType d = promote_types(result_type(a3, b3), c.dtype());
  KILN_CHECK(is_floating(d) || (!beta.is_floating() && !alpha.is_floating()), op,
             ": beta and alpha must be integers for ", d, " inputs, got ", beta, " and ", alpha);
  Shape shape{a3.size(0), a3.size(1), b3.size(2)};
  Shape c_shape = batched ? shape : Shape{shape[1], shape[2]};
  KILN_CHECK(broadcast_shapes(c.sizes(), c_shape, op) == c_shape, op, ": c of shape ", shape_str(c.sizes()),
             " does not broadcast to the product's shape ", shape_str(c_shape));
  Tensor out = empty(shape, TensorOptions(d).device(a3.device()));
  double be = beta.to_double();
  if (be != 0.0) ops::copy_(ops::view(out, c_shape), c);
  if (a3.size(2) == 0) {  // an empty sum: the product is zero
    if (be == 0.0) ops::fill_(out, 0);
    else ops::mul_(out, beta);
  } else {
    run_bmm(out, ops::to(a3, d), ops::to(b3, d), be, alpha.to_double());
  }
  return batched ? out : ops::squeeze(out, 0);
}

}  // namespace

Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  check_pair("addmm", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "addmm: shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()), " cannot be multiplied");
  return add_product("addmm", c, ops::unsqueeze(a, 0), ops::unsqueeze(b, 0), beta, alpha, false);
}

Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  check_pair("baddbmm", a, b);
  KILN_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1), "baddbmm: shapes ",
             shape_str(a.sizes()), " and ", shape_str(b.sizes()), " cannot be batch-multiplied");
  return add_product("baddbmm", c, a, b, beta, alpha, true);
}

}  // namespace kiln::ops
