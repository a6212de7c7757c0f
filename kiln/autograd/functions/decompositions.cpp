// Differentiable matrix factorizations (kiln/autograd/linalg.h). The forward is the ops layer's
// (kiln/tensor/ops/decompositions.h); the backward rules are the standard ones for real matrices, written with
// differentiable ops (matmul, solve_triangular, ...), so that backward recorded under create_graph is a graph
// too. The derivations are short and given beside each rule.
#include "kiln/autograd/linalg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/record.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/ops/decompositions.h"
#include "kiln/tensor/ops/linalg.h"
#include "kiln/tensor/ops/reduce.h"
#include "kiln/tensor/views.h"

namespace kiln::linalg {

using autograd::GradMode;
using autograd::OpNode;
using autograd::record;
using autograd::record_outputs;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {

// Under autocast the factorizations run in float32 (they are in PyTorch's float32 list too).
Tensor for_autocast(const Tensor& a) { return autocast::wants_float32({&a}) ? autocast::float32(a) : a; }

TensorOptions options_of(const Tensor& x) { return TensorOptions(x.dtype()).device(x.device()); }

void check_matrix(const char* op, const Tensor& a) {
  KILN_CHECK(a.defined(), op, ": the input is undefined");
  KILN_CHECK(a.dim() >= 2, op, ": expected a matrix or a batch of them, (..., m, n); got shape ",
             shape_str(a.sizes()));
}

// The checks of a square (..., n, n) float32/float64 matrix argument, under the name of the function called.
void check_square(const char* op, const Tensor& a) {
  check_matrix(op, a);
  KILN_CHECK(a.size(-1) == a.size(-2), op, ": expected square matrices (..., n, n); got shape ", shape_str(a.sizes()));
  KILN_CHECK(a.dtype() == kFloat32 || a.dtype() == kFloat64, op, ": expected a float32 or float64 input, got ",
             dtype_name(a.dtype()), " (convert it with .to(kFloat32))");
}

// b beside a (..., n, n): one dtype and device, and `size` (b's dim that meets a's n) equal to n.
void check_rhs(const char* op, const Tensor& a, const Tensor& b, int64_t size, const char* which) {
  KILN_CHECK(a.dtype() == b.dtype(), op, ": a is ", dtype_name(a.dtype()), " but b is ", dtype_name(b.dtype()),
             "; expected one dtype");
  KILN_CHECK(a.device() == b.device(), op, ": a is on ", a.device().str(), " but b is on ", b.device().str());
  KILN_CHECK(size == a.size(-1), op, ": b of shape ", shape_str(b.sizes()), " has ", size, " ", which, "; a of shape ",
             shape_str(a.sizes()), " needs ", a.size(-1));
}

Shape batch_of(const Tensor& a) { return Shape(a.sizes().begin(), a.sizes().end() - 2); }

Shape with(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// The (n, n) identity as a bool mask on x's device.
Tensor diagonal_mask(int64_t n, const Tensor& x) { return ops::to(eye(n, n, options_of(x)), kBool); }

// diag(v) for v (..., n): (..., n, n), v on the diagonal.
Tensor diag_embed(const Tensor& v) { return v.unsqueeze(-1) * eye(v.size(-1), v.size(-1), options_of(v)); }

// 1 / gaps off the diagonal and 0 on it, for the (..., n, n) differences of eigenvalues (or of squared singular
// values), whose diagonal is 0. The diagonal is replaced before dividing, so no 0/0 enters the graph.
Tensor inverse_gaps(const Tensor& gaps) {
  const Tensor diag = diagonal_mask(gaps.size(-1), gaps);
  return where(diag, Scalar(0.0), 1.0 / where(diag, Scalar(1.0), gaps));
}

// g, or an undefined tensor when g is all zeros. The engine hands a multi-output node zeros for the outputs no
// gradient reached: eigh's and svd's rules must then leave out the vectors' terms, whose factors 1 / (w_j - w_i)
// are infinite at repeated eigenvalues (0 * inf would make eigvalsh's gradient at the identity NaN).
Tensor unless_zero(const Tensor& g) {
  if (!g.defined() || !ops::any(ops::ne(g, Scalar(0.0))).item<bool>()) return Tensor();
  return g;
}

// x = a^-1 b for a (..., n, n) and b (..., n, k), batch dims broadcast (a is factored once, at its own shape; the
// engine sums gradients of the broadcast shape back to each input's).
//   a x = b: da x + a dx = db, so dx = a^-1 (db - da x) and <g, dx> = <a^-T g, db> - <a^-T g x^T, da>:
//   gb = a^-T g, ga = -gb x^T.
// a^-T g reuses the forward's LU factors; under create_graph it is a solve of its own instead, recorded.
Tensor solve_left(const Tensor& a, const Tensor& b, const char* op) {
  const ops::LuFactors f = ops::lu_factor_invertible(a, op);
  Tensor x = ops::lu_solve(f, b);
  if (should_record(a, b)) {
    record("linalg_solve", x, {a, b},
           [sa = SavedTensor(a, false), sx = SavedTensor(x, true), f, op](const Tensor& g, const OpNode& n) {
             Tensor gb = GradMode::is_enabled() ? solve_left(sa.get(n).mT(), g, op) : ops::lu_solve(f, g, true);
             Tensor ga = n.needs_input_grad(0) ? -matmul(gb, sx.get(n).mT()) : Tensor();
             return TensorList{ga, gb};
           });
  }
  return x;
}

// x with a x = b, a triangular; batch dims broadcast. As solve_left, with ga kept to the triangle a's values are
// read from (its other entries are not inputs of the op).
Tensor triangular_left(const Tensor& a, const Tensor& b, bool upper, bool unit) {
  Tensor x = ops::solve_triangular(a, b, upper, unit);
  if (should_record(a, b)) {
    record("linalg_solve_triangular", x, {a, b},
           [sa = SavedTensor(a, false), sx = SavedTensor(x, true), upper, unit](const Tensor& g, const OpNode& n) {
             Tensor gb = triangular_left(sa.get(n).mT(), g, !upper, unit);
             Tensor ga;
             if (n.needs_input_grad(0)) {
               ga = -matmul(gb, sx.get(n).mT());
               ga = upper ? triu(ga, unit ? 1 : 0) : tril(ga, unit ? -1 : 0);
             }
             return TensorList{ga, gb};
           });
  }
  return x;
}

}  // namespace

Tensor solve(const Tensor& a_in, const Tensor& b_in, bool left) {
  KILN_CHECK(a_in.defined() && b_in.defined() && b_in.dim() >= 1,
             "solve: expected a square a and b a vector (n), a matrix or a batch of them");
  const Tensor a = for_autocast(a_in), b = for_autocast(b_in);
  check_square("solve", a);
  // b is a vector (or a batch of vectors) when it is 1-D or has a's shape without the last dim, as in PyTorch.
  const bool vector =
      b.dim() == 1 || (b.dim() == a.dim() - 1 && b.sizes() == Shape(a.sizes().begin(), a.sizes().end() - 1));
  KILN_CHECK(vector || b.dim() >= 2, "solve: b of shape ", shape_str(b.sizes()), " is neither a vector of a's size ",
             a.size(-1), " nor a matrix");
  check_rhs("solve", a, b, vector || !left ? b.size(-1) : b.size(-2), vector ? "elements" : left ? "rows" : "columns");
  // x a = b is a^T x^T = b^T (for a vector x, a^T x = b).
  const Tensor m = left ? a : a.mT();
  if (vector) return solve_left(m, b.unsqueeze(-1), "solve").squeeze(-1);
  Tensor x = solve_left(m, left ? b : b.mT(), "solve");
  return left ? x : x.mT();
}

Tensor solve_triangular(const Tensor& a_in, const Tensor& b_in, bool upper, bool left, bool unitriangular) {
  KILN_CHECK(a_in.defined() && b_in.defined() && b_in.dim() >= 2, "solve_triangular: expected b to be a matrix or a batch of them, ",
             left ? "(..., n, k)" : "(..., k, n)", "; got ", b_in.defined() ? shape_str(b_in.sizes()) : "undefined");
  const Tensor a = for_autocast(a_in), b = for_autocast(b_in);
  check_square("solve_triangular", a);
  check_rhs("solve_triangular", a, b, left ? b.size(-2) : b.size(-1), left ? "rows" : "columns");
  // x a = b is a^T x^T = b^T, and a^T is lower where a is upper.
  Tensor x = triangular_left(left ? a : a.mT(), left ? b : b.mT(), left ? upper : !upper, unitriangular);
  return left ? x : x.mT();
}

Tensor inv(const Tensor& a_in) {
  KILN_CHECK(a_in.defined(), "inv: the input is undefined");
  const Tensor a = for_autocast(a_in);
  check_square("inv", a);
  const Tensor identity = eye(a.size(-1), a.size(-1), options_of(a)).expand(a.sizes());
  return solve_left(a, identity, "inv");
}

// a = l l^T. With dl = l X, X lower triangular: l^-1 da l^-T = X + X^T, so X = phi(l^-1 da l^-T), phi taking the
// lower triangle with the diagonal halved. Then <g, dl> = <phi(l^T g), l^-1 da l^-T> = <l^-T phi(l^T g) l^-1, da>,
// and over symmetric da only the symmetric part of that matrix counts.
Tensor cholesky(const Tensor& a_in, bool upper) {
  check_matrix("cholesky", a_in);
  const Tensor a = for_autocast(a_in);
  Tensor l = ops::cholesky(a);
  if (should_record(a)) {
    record("linalg_cholesky", l, {a}, [sl = SavedTensor(l, true)](const Tensor& g, const OpNode& n) {
      const Tensor lo = sl.get(n);
      const Tensor half_diagonal = 1.0 - 0.5 * eye(lo.size(-1), lo.size(-1), options_of(lo));
      const Tensor phi = tril(matmul(lo.mT(), tril(g))) * half_diagonal;
      Tensor s = triangular_left(lo.mT(), phi, /*upper=*/true, false);           // l^-T phi
      s = triangular_left(lo.mT(), s.mT(), /*upper=*/true, false).mT();           // (l^-T phi) l^-1
      return TensorList{0.5 * (s + s.mT())};
    });
  }
  return upper ? l.mT() : l;
}

namespace {
// det(a) a^-T, the cofactor matrix, for singular a too: with a = u diag(s) vh,
// cof(a) = det(u) det(vh) u diag(prod_{j != i} s_j) vh. Not recorded (not differentiable again).
Tensor cofactor_by_svd(const Tensor& a) {
  const ops::SvdFactors f = ops::svd(a, false);
  const int64_t n = a.size(-1);
  const Tensor others = ops::where(ops::to(eye(n, n, options_of(a)), kBool), Scalar(1.0),
                                   ops::expand(ops::unsqueeze(f.s, -2), with(batch_of(a), n, n)));
  const Tensor scale = ops::prod(others, {-1});  // (..., n): the product of all singular values but the i-th
  const Tensor sign = ops::mul(ops::det(f.u), ops::det(f.vh));
  return ops::mul(ops::matmul(ops::mul(f.u, ops::unsqueeze(scale, -2)), f.vh),
                  ops::unsqueeze(ops::unsqueeze(sign, -1), -1));
}
}  // namespace

namespace {
// a^-T for invertible a from its LU factors; under create_graph, inv(a)^T, recorded (differentiable again).
Tensor inverse_transposed(const Tensor& a, const ops::LuFactors& f) {
  if (GradMode::is_enabled()) return inv(a).mT();
  const int64_t n = a.size(-1);
  return ops::lu_solve(f, eye(n, n, options_of(a)).expand(a.sizes()), /*transpose=*/true);
}
}  // namespace

// d det(a) = det(a) tr(a^-1 da): the gradient is g det(a) a^-T, the cofactor matrix times g.
Tensor det(const Tensor& a_in) {
  KILN_CHECK(a_in.defined(), "det: the input is undefined");
  const Tensor a = for_autocast(a_in);
  check_square("det", a);
  const ops::LuFactors f = ops::lu_factor(a);
  Tensor d = ops::det(f);
  if (should_record(a)) {
    record("linalg_det", d, {a}, [sa = SavedTensor(a, false), sd = SavedTensor(d, true), f](const Tensor& g,
                                                                                            const OpNode& n) {
      const Tensor m = sa.get(n), value = sd.get(n);
      const Tensor singular = ops::eq(value, Scalar(0.0));
      Tensor cofactor;
      if (!ops::any(singular).item<bool>()) {
        cofactor = value.unsqueeze(-1).unsqueeze(-1) * inverse_transposed(m, f);
      } else {
        KILN_CHECK(!GradMode::is_enabled(), "det: backward: a matrix of the input is singular, where det's gradient "
                   "(its cofactor matrix) comes from an SVD and is not differentiable again; create_graph needs "
                   "invertible matrices");
        // The invertible matrices as usual (the singular ones swapped for I there), the singular from the SVD.
        const Tensor mask = ops::unsqueeze(ops::unsqueeze(singular, -1), -1);
        const Tensor safe = ops::where(mask, eye(m.size(-1), m.size(-1), options_of(m)), m);
        const Tensor regular = ops::mul(ops::unsqueeze(ops::unsqueeze(value, -1), -1),
                                        inverse_transposed(safe, ops::lu_factor(safe)));
        cofactor = ops::where(mask, cofactor_by_svd(m), regular);
      }
      return TensorList{g.unsqueeze(-1).unsqueeze(-1) * cofactor};
    });
  }
  return d;
}

// d log|det(a)| = tr(a^-1 da): the gradient is g a^-T.
SlogdetResult slogdet(const Tensor& a_in) {
  KILN_CHECK(a_in.defined(), "slogdet: the input is undefined");
  const Tensor a = for_autocast(a_in);
  check_square("slogdet", a);
  const ops::LuFactors f = ops::lu_factor(a);
  auto [sign, logabs] = ops::slogdet(f);
  if (should_record(a)) {
    record("linalg_slogdet", logabs, {a},
           [sa = SavedTensor(a, false), sl = SavedTensor(logabs, true), f](const Tensor& g, const OpNode& n) {
             KILN_CHECK(!ops::any(ops::isinf(sl.get(n))).item<bool>(),
                        "slogdet: backward: a matrix of the input is singular (log|det| = -inf), where log|det| "
                        "has no gradient");
             return TensorList{g.unsqueeze(-1).unsqueeze(-1) * inverse_transposed(sa.get(n), f)};
           });
  }
  return {sign, logabs};
}

// a = v diag(w) v^T with v orthogonal. v^T dv = Omega is antisymmetric, and v^T da v = Omega diag(w) - diag(w)
// Omega + diag(dw): dw is its diagonal and Omega_ij = (v^T da v)_ij / (w_j - w_i) off it. Backward:
// ga = v (diag(gw) + skew(v^T gv) / (w_j - w_i)) v^T, skew(M) = (M - M^T) / 2; symmetric.
EighResult eigh(const Tensor& a_in) {
  check_matrix("eigh", a_in);
  const Tensor a = for_autocast(a_in);
  auto [w, v] = ops::eigh(a);
  if (should_record(a)) {
    auto saved = std::make_shared<std::array<SavedTensor, 2>>();
    record_outputs("linalg_eigh", {w, v}, {a}, [saved](const TensorList& grads, const OpNode& n) {
      const Tensor values = (*saved)[0].get(n), vectors = (*saved)[1].get(n), gv = unless_zero(grads[1]);
      Tensor inner;
      if (gv.defined()) {
        const Tensor vtgv = matmul(vectors.mT(), gv);
        inner = 0.5 * (vtgv - vtgv.mT()) * inverse_gaps(values.unsqueeze(-2) - values.unsqueeze(-1));
      }
      if (grads[0].defined()) inner = inner.defined() ? inner + diag_embed(grads[0]) : diag_embed(grads[0]);
      if (!inner.defined()) return TensorList{Tensor()};
      return TensorList{matmul(matmul(vectors, inner), vectors.mT())};
    });
    // Saved after recording, so that each knows which output of the node it is (create_graph).
    (*saved)[0] = SavedTensor(w, true);
    (*saved)[1] = SavedTensor(v, true);
  }
  return {w, v};
}

Tensor eigvalsh(const Tensor& a_in) {
  check_matrix("eigvalsh", a_in);
  const Tensor a = for_autocast(a_in);
  if (should_record(a)) return eigh(a).eigenvalues;  // the gradient needs the eigenvectors
  return ops::eigvalsh(a);
}

namespace {
// a = q r, m >= n, q (m, n), r (n, n) upper. q^T dq + dq^T q = 0 and dr r^-1 upper give, for the cotangents gq
// and gr: M = r gr^T - gq^T q, ga = (gq + q copyltu(M)) r^-T, copyltu(M) the symmetric matrix with M's lower
// triangle.
Tensor qr_backward_tall(const Tensor& q, const Tensor& r, const Tensor& gq, const Tensor& gr) {
  const Tensor m = matmul(r, gr.mT()) - matmul(gq.mT(), q);
  const Tensor sym = tril(m) + tril(m, -1).mT();
  const Tensor b = gq + matmul(q, sym);
  return triangular_left(r, b.mT(), /*upper=*/true, false).mT();  // b r^-T: solve r x^T = b^T
}

// m < n: a = [x | y] with x = q u square and y = q v (u, v the first m and last n - m columns of r). v = q^T y
// ties v to q: q's cotangent gains y gv^T, and gy = q gv.
Tensor qr_backward(const Tensor& q, const Tensor& r, const Tensor& gq, const Tensor& gr) {
  const int64_t m = q.size(-2), n = r.size(-1);
  if (m >= n) return qr_backward_tall(q, r, gq, gr);
  const Tensor u = r.narrow(-1, 0, m), v = r.narrow(-1, m, n - m);
  const Tensor gu = gr.narrow(-1, 0, m), gv = gr.narrow(-1, m, n - m);
  const Tensor y = matmul(q, v);
  const Tensor gx = qr_backward_tall(q, u, gq + matmul(y, gv.mT()), gu);
  return cat({gx, matmul(q, gv)}, -1);
}
}  // namespace

QrResult qr(const Tensor& a_in, std::string_view mode) {
  check_matrix("qr", a_in);
  KILN_CHECK(mode == "reduced" || mode == "complete" || mode == "r", "qr: mode \"", mode,
             "\"; expected \"reduced\", \"complete\" or \"r\"");
  const Tensor a = for_autocast(a_in);
  const bool complete = mode == "complete";
  if (!should_record(a)) {
    auto [q, r] = ops::qr(a, complete, /*with_q=*/mode != "r");
    return {q, r};
  }
  auto [q, r] = ops::qr(a, complete);  // "r" records through q too: its gradient needs it
  const int64_t m = a.size(-2), n = a.size(-1);
  auto saved = std::make_shared<std::array<SavedTensor, 2>>();
  record_outputs("linalg_qr", {q, r}, {a}, [saved, m, n, complete](const TensorList& grads, const OpNode& node) {
    Tensor qv = (*saved)[0].get(node), rv = (*saved)[1].get(node);
    Tensor gq = grads[0], gr = grads[1];
    if (complete && m > n) {
      // q's last m - n columns are any basis of what q's first n leave out: a does not determine them, and a loss
      // that depends on them has no gradient. (R's last m - n rows are zeros.)
      KILN_CHECK(!unless_zero(gq.narrow(-1, n, m - n)).defined(), "qr: backward: with mode \"complete\" and more rows than columns (",
                 m, " > ", n, ") Q's last ", m - n,
                 " columns are not determined by the input, so they have no gradient; use mode \"reduced\"");
      qv = qv.narrow(-1, 0, n);
      rv = rv.narrow(-2, 0, n);
      gq = gq.narrow(-1, 0, n);
      gr = gr.narrow(-2, 0, n);
    }
    if (!gq.defined() && !gr.defined()) return TensorList{Tensor()};
    if (!gq.defined()) gq = zeros(qv.sizes(), options_of(qv));
    if (!gr.defined()) gr = zeros(rv.sizes(), options_of(rv));
    return TensorList{qr_backward(qv, rv, gq, gr)};
  });
  (*saved)[0] = SavedTensor(q, true);
  (*saved)[1] = SavedTensor(r, true);
  return mode == "r" ? QrResult{Tensor(), r} : QrResult{q, r};
}

namespace {
// a = u diag(s) vh (reduced, k = min(m, n)), v = vh^T. With F_ij = 1 / (s_j^2 - s_i^2) off the diagonal:
//   ga = u [ (F o (u^T gu - gu^T u)) S + diag(gs) + S (F o (v^T gv - gv^T v)) ] vh
//        + (I - u u^T) gu S^-1 vh + u S^-1 gv^T (I - v v^T),
// the last two terms only when u (v) is not square (m > k, n > k); gv = gvh^T.
Tensor svd_backward(const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& gu, const Tensor& gs,
                    const Tensor& gvh) {
  if (!gu.defined() && !gvh.defined()) {
    if (!gs.defined()) return Tensor();
    return matmul(u * gs.unsqueeze(-2), vh);
  }
  const int64_t m = u.size(-2), n = vh.size(-1), k = s.size(-1);
  const Tensor s2 = s * s;
  const Tensor f = inverse_gaps(s2.unsqueeze(-2) - s2.unsqueeze(-1));
  Tensor inner = gs.defined() ? diag_embed(gs) : zeros(with(batch_of(u), k, k), options_of(u));
  Tensor utgu, vtgv;
  if (gu.defined()) {
    utgu = matmul(u.mT(), gu);
    inner = inner + f * (utgu - utgu.mT()) * s.unsqueeze(-2);
  }
  if (gvh.defined()) {
    vtgv = matmul(vh, gvh.mT());
    inner = inner + s.unsqueeze(-1) * (f * (vtgv - vtgv.mT()));
  }
  Tensor ga = matmul(matmul(u, inner), vh);
  if (gu.defined() && m > k) ga = ga + matmul((gu - matmul(u, utgu)) / s.unsqueeze(-2), vh);
  if (gvh.defined() && n > k) ga = ga + matmul(u, (gvh - matmul(matmul(gvh, vh.mT()), vh)) / s.unsqueeze(-1));
  return ga;
}
}  // namespace

SvdResult svd(const Tensor& a_in, bool full_matrices) {
  check_matrix("svd", a_in);
  const Tensor a = for_autocast(a_in);
  ops::SvdFactors f = ops::svd(a, full_matrices);
  if (should_record(a)) {
    const int64_t k = std::min(a.size(-2), a.size(-1));
    auto saved = std::make_shared<std::array<SavedTensor, 3>>();
    record_outputs("linalg_svd", {f.u, f.s, f.vh}, {a}, [saved, k](const TensorList& grads, const OpNode& n) {
      // With full_matrices, U's columns and Vh's rows past k are any basis of what the first k leave out: their
      // gradients are ignored, as in PyTorch.
      Tensor u = (*saved)[0].get(n), vh = (*saved)[2].get(n), gu = grads[0], gvh = grads[2];
      if (u.size(-1) > k) {
        u = u.narrow(-1, 0, k);
        gu = gu.narrow(-1, 0, k);
      }
      if (vh.size(-2) > k) {
        vh = vh.narrow(-2, 0, k);
        gvh = gvh.narrow(-2, 0, k);
      }
      return TensorList{svd_backward(u, (*saved)[1].get(n), vh, unless_zero(gu), grads[1], unless_zero(gvh))};
    });
    (*saved)[0] = SavedTensor(f.u, true);
    (*saved)[1] = SavedTensor(f.s, true);
    (*saved)[2] = SavedTensor(f.vh, true);
  }
  return {f.u, f.s, f.vh};
}

Tensor svdvals(const Tensor& a_in) {
  check_matrix("svdvals", a_in);
  const Tensor a = for_autocast(a_in);
  if (should_record(a)) return svd(a, false).S;  // the gradient u diag(gs) vh needs the vectors
  return ops::svdvals(a);
}

namespace {
// The threshold below which pinv and matrix_rank count a singular value as zero, per matrix (..., 1), from the
// singular values s (..., k) in descending order.
Tensor zero_threshold(const Tensor& s, int64_t m, int64_t n, double atol, double rtol) {
  if (rtol < 0) {
    const double eps = s.dtype() == kFloat32 ? std::numeric_limits<float>::epsilon()
                                             : std::numeric_limits<double>::epsilon();
    rtol = atol > 0 ? 0.0 : static_cast<double>(std::max(m, n)) * eps;
  }
  return ops::clamp(ops::mul(ops::narrow(s, -1, 0, 1), Scalar(rtol)), Scalar(atol), std::nullopt);
}

struct PseudoInverse {
  Tensor p, s, rank;
};

// pinv from a's SVD, with the singular values and the rank it saw. a^+ = v diag(1/s, 0 past the rank) u^T.
// Gradient (Golub and Pereyra): with P = a^+ and g the gradient of P,
//   ga = -P^T g P^T + (I - a P) g^T P P^T + P^T P g^T (I - P a).
PseudoInverse pinv_impl(const Tensor& a, double atol, double rtol) {
  const int64_t m = a.size(-2), n = a.size(-1);
  const ops::SvdFactors f = ops::svd(a, false);
  Tensor p, rank;
  if (f.s.size(-1) == 0) {
    p = zeros(with(batch_of(a), n, m), options_of(a));
    rank = zeros(batch_of(a), TensorOptions(kInt64).device(a.device()));
  } else {
    const Tensor kept = ops::gt(f.s, zero_threshold(f.s, m, n, atol, rtol));
    const Tensor inverse = ops::where(kept, ops::reciprocal(f.s), Scalar(0.0));
    p = ops::matmul(ops::mul(ops::transpose(f.vh, -2, -1), ops::unsqueeze(inverse, -2)),
                    ops::transpose(f.u, -2, -1));
    rank = ops::sum(kept, {-1});
  }
  if (should_record(a)) {
    record("linalg_pinv", p, {a}, [sa = SavedTensor(a, false), sp = SavedTensor(p, true)](const Tensor& g,
                                                                                         const OpNode& node) {
      const Tensor x = sa.get(node), pi = sp.get(node);
      const int64_t rows = x.size(-2), cols = x.size(-1);
      const Tensor left = eye(rows, rows, options_of(x)) - matmul(x, pi);   // I - a P (m, m)
      const Tensor right = eye(cols, cols, options_of(x)) - matmul(pi, x);  // I - P a (n, n)
      const Tensor gt = g.mT();
      return TensorList{-matmul(matmul(pi.mT(), g), pi.mT()) + matmul(matmul(left, gt), matmul(pi, pi.mT())) +
                        matmul(matmul(matmul(pi.mT(), pi), gt), right)};
    });
  }
  return {p, f.s, rank};
}
}  // namespace

Tensor pinv(const Tensor& a_in, double atol, double rtol) {
  check_matrix("pinv", a_in);
  KILN_CHECK(atol >= 0, "pinv: atol = ", atol, "; expected at least 0");
  return pinv_impl(for_autocast(a_in), atol, rtol).p;
}

LstsqResult lstsq(const Tensor& a_in, const Tensor& b_in, double rcond) {
  check_matrix("lstsq", a_in);
  KILN_CHECK(b_in.defined() && b_in.dim() >= 2, "lstsq: expected b to be a matrix or a batch of them, (..., m, k); got ",
             b_in.defined() ? shape_str(b_in.sizes()) : "undefined");
  KILN_CHECK(b_in.size(-2) == a_in.size(-2), "lstsq: b of shape ", shape_str(b_in.sizes()), " has ", b_in.size(-2),
             " rows; a of shape ", shape_str(a_in.sizes()), " has ", a_in.size(-2));
  const PseudoInverse pi = pinv_impl(for_autocast(a_in), 0.0, rcond);
  return {matmul(pi.p, for_autocast(b_in)), pi.rank, pi.s};
}

Tensor cholesky_solve(const Tensor& b, const Tensor& l, bool upper) {
  check_matrix("cholesky_solve", l);
  // a = l l^T: l y = b, then l^T x = y. (upper: a = u^T u: u^T y = b, then u x = y.)
  const Tensor y = solve_triangular(upper ? l.mT() : l, b, /*upper=*/false);
  return solve_triangular(upper ? l : l.mT(), y, /*upper=*/true);
}

Tensor matrix_power(const Tensor& a_in, int64_t k) {
  KILN_CHECK(a_in.defined(), "matrix_power: the input is undefined");
  check_square("matrix_power", a_in);
  if (k == 1) return a_in.clone();  // a result of its own, as every other k gives
  Tensor base = k < 0 ? inv(a_in) : a_in;
  uint64_t bits = k < 0 ? static_cast<uint64_t>(-(k + 1)) + 1 : static_cast<uint64_t>(k);
  Tensor result;
  while (bits != 0) {
    if (bits & 1) result = result.defined() ? matmul(result, base) : base;
    bits >>= 1;
    if (bits != 0) base = matmul(base, base);
  }
  // a^0 is the identity, a copy of a's shape that does not depend on it (PyTorch's too).
  if (!result.defined()) result = eye(a_in.size(-1), a_in.size(-1), options_of(a_in)).expand(a_in.sizes()).contiguous();
  return result;
}

Tensor matrix_norm(const Tensor& a, std::string_view ord, bool keepdim) {
  check_matrix("matrix_norm", a);
  KILN_CHECK(ord == "fro" || ord == "nuc", "matrix_norm: ord \"", ord,
             "\"; expected \"fro\" or \"nuc\", or a number (2, -2, 1, -1, inf, -inf)");
  if (ord == "fro") return norm(a, 2.0, {-2, -1}, keepdim);
  Tensor out = sum(svdvals(a), {-1});
  return keepdim ? out.unsqueeze(-1).unsqueeze(-1) : out;
}

Tensor matrix_norm(const Tensor& a, double ord, bool keepdim) {
  check_matrix("matrix_norm", a);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor out;
  if (ord == 2 || ord == -2) {
    const Tensor s = svdvals(a);
    out = ord > 0 ? amax(s, {-1}) : amin(s, {-1});
  } else if (ord == 1 || ord == -1 || ord == inf || ord == -inf) {
    // 1: the columns' sums of |a| (over the rows, dim -2); inf: the rows' (over dim -1).
    const Tensor sums = sum(abs(a), {std::fabs(ord) == 1 ? int64_t{-2} : int64_t{-1}});
    out = ord > 0 ? amax(sums, {-1}) : amin(sums, {-1});
  } else {
    KILN_CHECK(false, "matrix_norm: ord ", ord, "; expected 2, -2, 1, -1, inf or -inf (or \"fro\", \"nuc\")");
  }
  return keepdim ? out.unsqueeze(-1).unsqueeze(-1) : out;
}

Tensor vector_norm(const Tensor& x, double ord, IntArrayRef dims, bool keepdim) {
  return norm(x, ord, dims, keepdim);
}

Tensor cond(const Tensor& a) {
  check_matrix("cond", a);
  const Tensor s = svdvals(a);
  const int64_t k = s.size(-1);
  KILN_CHECK(k > 0, "cond: the matrices of shape ", shape_str(a.sizes()), " are empty; expected at least one entry");
  return s.narrow(-1, 0, 1).squeeze(-1) / s.narrow(-1, k - 1, 1).squeeze(-1);
}

Tensor matrix_rank(const Tensor& a, double atol, double rtol) {
  check_matrix("matrix_rank", a);
  KILN_CHECK(atol >= 0, "matrix_rank: atol = ", atol, "; expected at least 0");
  const Tensor s = ops::svdvals(for_autocast(a).detach());
  if (s.size(-1) == 0) return zeros(batch_of(a), TensorOptions(kInt64).device(a.device()));
  return ops::sum(ops::gt(s, zero_threshold(s, a.size(-2), a.size(-1), atol, rtol)), {-1});
}

}  // namespace kiln::linalg
