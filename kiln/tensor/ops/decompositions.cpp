// Frontends of the matrix factorizations: checks, the batch as one contiguous (B, m, n) tensor on a device that
// has the kernel (a's own, or the CPU), the kernel's info turned into an error that names the matrix, and the
// results shaped back and on a's device. det, slogdet and solve are built here from the LU factors.
#include "kiln/tensor/ops/decompositions.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/ops/reduce.h"
#include "kiln/tensor/ops/unary.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

namespace {

void check_matrices(const char* op, const Tensor& a, bool square, const char* name = "input") {
  KILN_CHECK(a.defined(), op, ": the ", name, " is undefined");
  KILN_CHECK(a.dim() >= 2, op, ": expected the ", name, " to be a matrix or a batch of them, (..., m, n); got shape ",
             shape_str(a.sizes()));
  KILN_CHECK(a.dtype() == kFloat32 || a.dtype() == kFloat64, op, ": expected a float32 or float64 ", name, ", got ",
             dtype_name(a.dtype()), " (convert it with .to(kFloat32))");
  KILN_CHECK(!square || a.size(-1) == a.size(-2), op, ": expected square matrices (..., n, n) as the ", name,
             "; got shape ", shape_str(a.sizes()));
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_matrices(op, b, false, "right-hand side b");
  KILN_CHECK(a.dtype() == b.dtype(), op, ": a is ", dtype_name(a.dtype()), " but b is ", dtype_name(b.dtype()),
             "; expected one dtype");
  KILN_CHECK(a.device() == b.device(), op, ": a is on ", a.device().str(), " but b is on ", b.device().str());
  KILN_CHECK(b.size(-2) == a.size(-1), op, ": b of shape ", shape_str(b.sizes()), " has ", b.size(-2),
             " rows; a of shape ", shape_str(a.sizes()), " needs ", a.size(-1));
}

Shape batch_of(const Tensor& a) { return Shape(a.sizes().begin(), a.sizes().end() - 2); }

Shape with(Shape batch, std::initializer_list<int64_t> tail) {
  batch.insert(batch.end(), tail.begin(), tail.end());
  return batch;
}

// The device that runs op on a's data: a's own if it has the kernel, else the CPU.
template <Op op>
Device run_device(const Tensor& a) {
  return has_kernel<op>(a.device().type) ? a.device() : kCPU;
}

// x's matrices as one contiguous (B, rows, cols) tensor on device d.
Tensor as_batch(const Tensor& x, Device d) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  return ops::reshape(ops::contiguous(ops::to(x, d)), {shape_numel(batch_of(x)), rows, cols});
}

// A kernel's output (B, ...) on the run device, shaped (batch..., ...) and moved to the caller's device: a result
// of its own, not a view of the fresh (B, ...) tensor nothing else holds (in-place ops and autograd treat it as
// any op's result).
Tensor shaped_back(const Tensor& out, const Shape& batch, std::initializer_list<int64_t> tail, Device device) {
  Tensor shaped = ops::view(out, with(batch, tail));
  shaped.impl()->is_view = false;
  shaped.impl()->view_base.reset();
  return ops::to(shaped, device);
}

// "matrix (1, 0) of the (2, 3, 4, 4) input", or "the (4, 4) input" without batch dims.
std::string which_matrix(const Shape& batch, int64_t b, IntArrayRef full) {
  if (batch.empty()) return "the " + shape_str(full) + " input";
  Shape index(batch.size());
  for (size_t d = batch.size(); d-- > 0;) {
    index[d] = b % batch[d];
    b /= batch[d];
  }
  return "matrix " + shape_str(index) + " of the " + shape_str(full) + " input";
}

// Throws for the first matrix whose info entry is not 0, with what describe(code) says of it.
template <typename Describe>
void check_info(const char* op, const Tensor& info, const Tensor& a, Describe&& describe) {
  const Tensor host = ops::to(info, kCPU);
  const auto* code = host.data_ptr<int64_t>();
  for (int64_t b = 0; b < host.numel(); ++b)
    KILN_CHECK(code[b] == 0, op, ": ", which_matrix(batch_of(a), b, a.sizes()), " ", describe(code[b]));
}

std::string not_finite_or_no_convergence(int64_t code) {
  return code < 0 ? "has a NaN or infinite entry" : "made the iteration fail to converge";
}

// +1 or -1 for each row of perm (..., n), the sign of that permutation: (-1)^(n - cycles). In a's dtype, on its
// device.
Tensor permutation_sign(const Tensor& perm, const Tensor& a) {
  const Tensor host = ops::contiguous(ops::to(perm, kCPU));
  const int64_t n = perm.size(-1), rows = n == 0 ? shape_numel(batch_of(a)) : host.numel() / n;
  const auto* p = host.data_ptr<int64_t>();
  Tensor sign = empty({rows}, TensorOptions(kFloat64));
  auto* s = sign.data_ptr<double>();
  std::vector<char> seen(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(seen.begin(), seen.end(), 0);
    int64_t cycles = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (seen[i]) continue;
      ++cycles;
      for (int64_t j = i; !seen[j]; j = p[r * n + j]) seen[j] = 1;
    }
    s[r] = (n - cycles) % 2 == 0 ? 1.0 : -1.0;
  }
  return ops::to(ops::view(sign, batch_of(a)), a.device(), a.dtype());
}

}  // namespace

Tensor cholesky(const Tensor& a) {
  check_matrices("cholesky", a, true);
  const int64_t n = a.size(-1);
  const Device d = run_device<Op::cholesky>(a);
  const Tensor in = as_batch(a, d);
  Tensor l = empty({in.size(0), n, n}, TensorOptions(a.dtype()).device(d));
  Tensor info = zeros({in.size(0)}, TensorOptions(kInt64).device(d));
  if (in.numel() > 0) call_kernel<Op::cholesky>(d, l, info, in);
  check_info("cholesky", info, a, [](int64_t k) {
    if (k < 0) return std::string("is not positive-definite to working precision (its factorization broke down)");
    return detail::concat("is not positive-definite: its leading minor of order ", k, " is not");
  });
  return shaped_back(l, batch_of(a), {n, n}, a.device());
}

LuFactors lu_factor(const Tensor& a) {
  check_matrices("lu_factor", a, true);
  const int64_t n = a.size(-1);
  const Device d = run_device<Op::lu_factor>(a);
  const Tensor in = as_batch(a, d);
  Tensor lu = empty({in.size(0), n, n}, TensorOptions(a.dtype()).device(d));
  Tensor perm = empty({in.size(0), n}, TensorOptions(kInt64).device(d));
  Tensor info = zeros({in.size(0)}, TensorOptions(kInt64).device(d));
  if (in.numel() > 0) call_kernel<Op::lu_factor>(d, lu, perm, info, in);
  return {shaped_back(lu, batch_of(a), {n, n}, a.device()), shaped_back(perm, batch_of(a), {n}, a.device())};
}

namespace {
// lu_solve once its operands are known to be sound (solve's own factors are).
Tensor lu_solve_checked(const LuFactors& factors, const Tensor& b, bool transpose) {
  const Tensor& lu = factors.lu;
  const int64_t n = lu.size(-1), k = b.size(-1);
  const Shape batch = broadcast_shapes(batch_of(lu), batch_of(b), "lu_solve");
  const Device d = run_device<Op::lu_solve>(lu);
  const Tensor f = as_batch(ops::expand(lu, with(batch, {n, n})), d);
  const Tensor p = ops::reshape(ops::contiguous(ops::to(ops::expand(factors.perm, with(batch, {n})), d)),
                                {f.size(0), n});
  const Tensor rhs = as_batch(ops::expand(b, with(batch, {n, k})), d);
  Tensor x = empty({f.size(0), n, k}, TensorOptions(lu.dtype()).device(d));
  if (x.numel() > 0) call_kernel<Op::lu_solve>(d, x, f, p, rhs, transpose);
  return shaped_back(x, batch, {n, k}, lu.device());
}

// Throws unless perm is int64 with lu's batch shape and n, and each of its rows a permutation of 0..n-1.
void check_permutations(const char* op, const LuFactors& factors) {
  const Tensor& lu = factors.lu;
  const int64_t n = lu.size(-1);
  const Shape want = with(batch_of(lu), {n});
  KILN_CHECK(factors.perm.defined() && factors.perm.dtype() == kInt64 && factors.perm.sizes() == want, op,
             ": expected perm of shape ", shape_str(want), " (int64) beside LU factors of shape ",
             shape_str(lu.sizes()), ", as lu_factor gives");
  const Tensor host = ops::contiguous(ops::to(factors.perm, kCPU));
  const auto* p = host.data_ptr<int64_t>();
  std::vector<char> seen(static_cast<size_t>(n));
  for (int64_t r = 0; n > 0 && r < host.numel() / n; ++r) {
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = p[r * n + i];
      KILN_CHECK(v >= 0 && v < n && !seen[v], op, ": perm row ", r, " is not a permutation of 0..", n - 1,
                 " (entry ", i, " is ", v, "); expected lu_factor's perm");
      seen[v] = 1;
    }
  }
}
}  // namespace

Tensor lu_solve(const LuFactors& factors, const Tensor& b, bool transpose) {
  check_matrices("lu_solve", factors.lu, true, "LU factors");
  check_pair("lu_solve", factors.lu, b);
  check_permutations("lu_solve", factors);
  return lu_solve_checked(factors, b, transpose);
}

LuFactors lu_factor_invertible(const Tensor& a, const char* op) {
  check_matrices(op, a, true);
  LuFactors f = lu_factor(a);
  // A zero on U's diagonal: a is singular, and a solve would give infinities.
  const Tensor zero_pivot = ops::any(ops::eq(ops::diagonal(f.lu, 0, -2, -1), Scalar(0.0)), {-1});
  const Tensor host = ops::contiguous(ops::to(zero_pivot, kCPU));
  const auto* z = host.data_ptr<bool>();
  for (int64_t i = 0; i < host.numel(); ++i)
    KILN_CHECK(!z[i], op, ": ", which_matrix(batch_of(a), i, a.sizes()),
               " is singular (a zero pivot in its LU factorization); expected an invertible matrix");
  return f;
}

Tensor solve(const Tensor& a, const Tensor& b, const char* op) {
  check_matrices(op, a, true);
  check_pair(op, a, b);
  return lu_solve_checked(lu_factor_invertible(a, op), b, false);
}

Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool unitriangular) {
  check_matrices("solve_triangular", a, true);
  check_pair("solve_triangular", a, b);
  const int64_t n = a.size(-1), k = b.size(-1);
  const Shape batch = broadcast_shapes(batch_of(a), batch_of(b), "solve_triangular");
  const Device d = run_device<Op::triangular_solve>(a);
  const Tensor m = as_batch(ops::expand(a, with(batch, {n, n})), d);
  const Tensor rhs = as_batch(ops::expand(b, with(batch, {n, k})), d);
  Tensor x = empty({m.size(0), n, k}, TensorOptions(a.dtype()).device(d));
  if (x.numel() > 0) call_kernel<Op::triangular_solve>(d, x, m, rhs, upper, unitriangular);
  return shaped_back(x, batch, {n, k}, a.device());
}

Tensor det(const LuFactors& f) {
  check_matrices("det", f.lu, true, "LU factors");
  check_permutations("det", f);
  return ops::mul(ops::prod(ops::diagonal(f.lu, 0, -2, -1), {-1}), permutation_sign(f.perm, f.lu));
}

std::pair<Tensor, Tensor> slogdet(const LuFactors& f) {
  check_matrices("slogdet", f.lu, true, "LU factors");
  check_permutations("slogdet", f);
  const Tensor u = ops::diagonal(f.lu, 0, -2, -1);
  Tensor sign = ops::mul(ops::prod(ops::sign(u), {-1}), permutation_sign(f.perm, f.lu));
  Tensor logabs = ops::sum(ops::log(ops::abs(u)), {-1});
  return {sign, logabs};
}

Tensor det(const Tensor& a) {
  check_matrices("det", a, true);
  return det(lu_factor(a));
}

std::pair<Tensor, Tensor> slogdet(const Tensor& a) {
  check_matrices("slogdet", a, true);
  return slogdet(lu_factor(a));
}

namespace {
std::pair<Tensor, Tensor> eigh_impl(const char* op, const Tensor& a, bool vectors) {
  check_matrices(op, a, true);
  const int64_t n = a.size(-1);
  const Device d = run_device<Op::eigh>(a);
  const Tensor in = as_batch(a, d);
  Tensor w = empty({in.size(0), n}, TensorOptions(a.dtype()).device(d));
  Tensor v = vectors ? empty({in.size(0), n, n}, TensorOptions(a.dtype()).device(d)) : Tensor();
  Tensor info = zeros({in.size(0)}, TensorOptions(kInt64).device(d));
  if (in.numel() > 0) call_kernel<Op::eigh>(d, w, v, info, in);
  check_info(op, info, a, not_finite_or_no_convergence);
  return {shaped_back(w, batch_of(a), {n}, a.device()),
          vectors ? shaped_back(v, batch_of(a), {n, n}, a.device()) : Tensor()};
}
}  // namespace

std::pair<Tensor, Tensor> eigh(const Tensor& a) { return eigh_impl("eigh", a, true); }
Tensor eigvalsh(const Tensor& a) { return eigh_impl("eigvalsh", a, false).first; }

std::pair<Tensor, Tensor> qr(const Tensor& a, bool complete, bool with_q) {
  check_matrices("qr", a, false);
  const int64_t m = a.size(-2), n = a.size(-1), rows = complete ? m : std::min(m, n);
  const Device d = run_device<Op::qr>(a);
  const Tensor in = as_batch(a, d);
  Tensor q = with_q ? empty({in.size(0), m, rows}, TensorOptions(a.dtype()).device(d)) : Tensor();
  Tensor r = empty({in.size(0), rows, n}, TensorOptions(a.dtype()).device(d));
  if (in.numel() > 0) {
    call_kernel<Op::qr>(d, q, r, in);
  } else {
    // No entries to factor: r is zeros, and q the first columns of the identity (a = q r still holds).
    r = zeros(r.sizes(), TensorOptions(a.dtype()).device(d));
    if (with_q) q = ops::contiguous(ops::expand(eye(m, rows, TensorOptions(a.dtype()).device(d)), q.sizes()));
  }
  return {with_q ? shaped_back(q, batch_of(a), {m, rows}, a.device()) : Tensor(),
          shaped_back(r, batch_of(a), {rows, n}, a.device())};
}

namespace {
SvdFactors svd_impl(const char* op, const Tensor& a, bool vectors, bool full) {
  check_matrices(op, a, false);
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  const int64_t ucols = full ? m : k, vrows = full ? n : k;
  const Device d = run_device<Op::svd>(a);
  const Tensor in = as_batch(a, d);
  const TensorOptions options = TensorOptions(a.dtype()).device(d);
  Tensor u = vectors ? empty({in.size(0), m, ucols}, options) : Tensor();
  Tensor s = empty({in.size(0), k}, options);
  Tensor vh = vectors ? empty({in.size(0), vrows, n}, options) : Tensor();
  Tensor info = zeros({in.size(0)}, TensorOptions(kInt64).device(d));
  if (in.numel() > 0) {
    call_kernel<Op::svd>(d, u, s, vh, info, in);
  } else if (vectors) {
    // An empty matrix: no singular values, and bases of the identity's columns (full) or of nothing.
    u = ops::contiguous(ops::expand(eye(m, ucols, options), u.sizes()));
    vh = ops::contiguous(ops::expand(eye(vrows, n, options), vh.sizes()));
  }
  check_info(op, info, a, not_finite_or_no_convergence);
  const Shape batch = batch_of(a);
  if (!vectors) return {Tensor(), shaped_back(s, batch, {k}, a.device()), Tensor()};
  return {shaped_back(u, batch, {m, ucols}, a.device()), shaped_back(s, batch, {k}, a.device()),
          shaped_back(vh, batch, {vrows, n}, a.device())};
}
}  // namespace

SvdFactors svd(const Tensor& a, bool full_matrices) { return svd_impl("svd", a, true, full_matrices); }
Tensor svdvals(const Tensor& a) { return svd_impl("svdvals", a, false, false).s; }

}  // namespace kiln::ops
