// Differentiable matrix products. mm, bmm and matmul have hand-written rules (they are the hot ops); mv, dot,
// outer, addmm and baddbmm are composites of them.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {
// Saves a only when b needs a gradient, and b only when a does.
std::pair<SavedTensor, SavedTensor> save_for_product(const Tensor& a, const Tensor& b) {
  return {requires_grad(b) ? SavedTensor(a, false) : SavedTensor(),
          requires_grad(a) ? SavedTensor(b, false) : SavedTensor()};
}

// A fresh product (nothing else refers to it) under another shape, as a result rather than a view of it (PyTorch's
// _unsafe_view): in-place ops and detach_ treat it as any op's result.
Tensor reshape_result(const Tensor& product, const Shape& shape) {
  Tensor out = ops::view(product, shape);
  out.impl()->is_view = false;
  out.impl()->view_base.reset();
  if (should_record(product)) {
    record("reshape", out, {product}, [from = product.sizes()](const Tensor& g, const OpNode&) {
      return TensorList{g.reshape(from)};
    });
  }
  return out;
}

// Whether the matrix x lies in memory as its transpose does (column-major), as w.t() does in linear.
bool transposed_layout(const Tensor& x) {
  return x.dim() == 2 && x.size(0) > 1 && x.size(1) > 1 && x.stride(0) == 1 && x.stride(1) == x.size(0);
}
}  // namespace

// mm: a (M, K), b (K, N), g (M, N): da = g b^T (M, K), db = a^T g (K, N). An operand that is a transposed view
// gets its gradient as the transpose of the transposed product (db = (g^T a)^T), so that the gradient has the
// operand's layout: for linear's weight, seen here as w.t(), it then reaches w contiguous, and accumulating it
// takes the tensor instead of copying a transpose (that copy was ~15% of the W2 MLP step).
Tensor mm(const Tensor& a, const Tensor& b) {
  if (autocast::wants_lower({&a, &b})) return mm(autocast::lower(a), autocast::lower(b));
  Tensor out = ops::mm(a, b);
  if (should_record(a, b)) {
    record("mm", out, {a, b},
           [s = save_for_product(a, b), a_t = transposed_layout(a), b_t = transposed_layout(b)](const Tensor& g,
                                                                                               const OpNode& n) {
             Tensor ga, gb;
             if (n.needs_input_grad(0)) {
               Tensor b = s.second.get(n);
               ga = a_t ? mm(b, g.t()).t() : mm(g, b.t());
             }
             if (n.needs_input_grad(1)) {
               Tensor a = s.first.get(n);
               gb = b_t ? mm(g.t(), a).t() : mm(a.t(), g);
             }
             return TensorList{ga, gb};
           });
  }
  return out;
}

// bmm: a (B, M, K), b (B, K, N), g (B, M, N): da = g b^T, db = a^T g, per batch
Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast::wants_lower({&a, &b})) return bmm(autocast::lower(a), autocast::lower(b));
  Tensor out = ops::bmm(a, b);
  if (should_record(a, b)) {
    record("bmm", out, {a, b}, [s = save_for_product(a, b)](const Tensor& g, const OpNode& n) {
      return TensorList{n.needs_input_grad(0) ? bmm(g, s.second.get(n).mT()) : Tensor(),
                        n.needs_input_grad(1) ? bmm(s.first.get(n).mT(), g) : Tensor()};
    });
  }
  return out;
}

// matmul with PyTorch's rules for 1-D operands and broadcast batch dims. A 1-D a is a row (1, K) and a 1-D b a
// column (K, 1), whose added dim the output drops; the rule puts those dims back on g, computes
// da = g b^T and db = a^T g with matmul, and drops them again. Broadcast batch dims are summed by the engine.
Tensor matmul(const Tensor& a, const Tensor& b);

Tensor linear_rows(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Shape out_shape = x.sizes();
  out_shape.back() = weight.size(0);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return reshape_result(addmm(bias, x.reshape({rows, x.size(-1)}), weight.t()), out_shape);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast::wants_lower({&a, &b})) return matmul(autocast::lower(a), autocast::lower(b));
  if (a.dim() >= 3 && b.dim() == 2 && a.size(-1) == b.size(0) && (requires_grad(b) || a.is_contiguous())) {
    // (..., M, K) @ (K, N): one (rows, K) @ (K, N) product over all the leading dims, as PyTorch folds it. One
    // large GEMM instead of one per batch, and b's gradient is then a single (K, rows) @ (rows, N) product
    // rather than one (K, N) product per batch, held together and summed afterwards (a transformer's linear
    // layers on (batch, tokens, features) paid batch times each weight's size in backward). An a that cannot be
    // seen as rows without a copy is copied only when b needs that gradient, as PyTorch decides.
    Shape out_shape = a.sizes();
    out_shape.back() = b.size(1);
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.size(d);
    return reshape_result(matmul(a.reshape({rows, a.size(-1)}), b), out_shape);
  }
  Tensor out = ops::matmul(a, b);
  if (should_record(a, b)) {
    record("matmul", out, {a, b}, [s = save_for_product(a, b), a_dim = a.dim(), b_dim = b.dim()](const Tensor& g,
                                                                                                const OpNode& n) {
      Tensor g2 = g;
      if (a_dim == 1) g2 = g2.unsqueeze(b_dim == 1 ? 0 : -2);  // (..., 1, N) or, with 1-D b too, (1)
      if (b_dim == 1) g2 = g2.unsqueeze(-1);                   // (..., M, 1)
      Tensor ga, gb;
      if (n.needs_input_grad(0)) {
        Tensor b = s.second.get(n);
        Tensor b2 = b_dim == 1 ? b.unsqueeze(-1) : b;          // (K, 1)
        ga = matmul(g2, b2.mT());                              // (..., M, K)
        if (a_dim == 1) ga = ga.squeeze(-2);
      }
      if (n.needs_input_grad(1)) {
        Tensor a = s.first.get(n);
        Tensor a2 = a_dim == 1 ? a.unsqueeze(0) : a;           // (1, K)
        gb = matmul(a2.mT(), g2);                              // (..., K, N)
        if (b_dim == 1) gb = gb.squeeze(-1);
      }
      return TensorList{ga, gb};
    });
  }
  return out;
}

// The composites: their gradients come from the ops they are made of. Without recording they are the tensor
// layer's (same checks, no extra views); while recording, the same checks come first.
Tensor mv(const Tensor& a, const Tensor& v) {
  if (!should_record(a, v)) return ops::mv(a, v);
  KILN_CHECK(a.dim() == 2 && v.dim() == 1 && a.size(1) == v.size(0), "mv: expected a (M, K) matrix and a (K) vector, got ",
             shape_str(a.sizes()), " and ", shape_str(v.sizes()));
  return mm(a, v.unsqueeze(1)).squeeze(1);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  if (!should_record(a, b)) return ops::dot(a, b);
  KILN_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0), "dot: expected two 1-D tensors of one size, got ",
             shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  return mm(a.unsqueeze(0), b.unsqueeze(1)).view({});
}

Tensor outer(const Tensor& a, const Tensor& b) {
  if (!should_record(a, b)) return ops::outer(a, b);
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected 1-D tensors, got shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()));
  return a.unsqueeze(1) * b.unsqueeze(0);
}

namespace {
// beta c + alpha (a @ b), where c broadcasts to the product's shape; beta == 0 ignores c (NaN included).
Tensor add_product(const char* name, const Tensor& c, const Tensor& product, const Scalar& beta, const Scalar& alpha) {
  Shape shape = broadcast_shapes(c.sizes(), product.sizes(), name);
  KILN_CHECK(shape == product.sizes(), name, ": c of shape ", shape_str(c.sizes()),
             " does not broadcast to the product's shape ", shape_str(product.sizes()));
  Tensor p = alpha.to_double() == 1.0 ? product : product * alpha;
  if (beta.to_double() == 0.0) return p;
  return p + (beta.to_double() == 1.0 ? c : c * beta);
}
}  // namespace

Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  if (autocast::wants_lower({&c, &a, &b}))
    return addmm(autocast::lower(c), autocast::lower(a), autocast::lower(b), beta, alpha);
  if (!should_record(c, a, b)) return ops::addmm(c, a, b, beta, alpha);
  return add_product("addmm", c, mm(a, b), beta, alpha);
}

Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  if (autocast::wants_lower({&c, &a, &b}))
    return baddbmm(autocast::lower(c), autocast::lower(a), autocast::lower(b), beta, alpha);
  if (!should_record(c, a, b)) return ops::baddbmm(c, a, b, beta, alpha);
  return add_product("baddbmm", c, bmm(a, b), beta, alpha);
}

}  // namespace kiln
