// kiln::linalg: the factorizations against what defines them (l l^T = a, q r = a with q orthonormal, a v = v w,
// u diag(s) vh = a), against values worked out by hand, the Leibniz determinant in long double and a second
// algorithm (singular values from eigh of a^T a); gradients against central differences (first and second
// order); and the errors bad input gets.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "grad_test_util.h"
#include "kiln/autograd/linalg.h"
#include "linalg_test_util.h"

namespace kiln {
namespace {

using namespace test;
using namespace test::linalg_test;
using In = const TensorVec&;

std::vector<double> vals(const Tensor& t) { return ops::contiguous(t.detach().to(kFloat64)).to_vector<double>(); }

// ---- gradients ----

std::vector<GradCase> decomposition_cases() {
  // Inputs go through a map that keeps them where the function is defined and differentiable: a symmetric
  // positive-definite matrix for cholesky, distinct eigenvalues for eigh (any random symmetric matrix).
  auto spd_of = [](const Tensor& x) { return matmul(x, x.mT()) + 3.0 * eye_like(x.detach()); };
  auto shifted = [](const Tensor& x) { return x + 3.0 * eye_like(x.detach()); };
  return {
      single("cholesky", leaves({{3, 3}}), [=](In in) { return linalg::cholesky(spd_of(in[0])); }),
      single("cholesky_upper_batched", leaves({{2, 3, 3}}),
             [=](In in) { return linalg::cholesky(spd_of(in[0]), /*upper=*/true); }),
      single("solve", leaves({{3, 3}, {3, 2}}), [=](In in) { return linalg::solve(shifted(in[0]), in[1]); }),
      single("solve_vector", leaves({{3, 3}, {3}}), [=](In in) { return linalg::solve(shifted(in[0]), in[1]); }),
      single("solve_batched_vectors", leaves({{2, 3, 3}, {2, 3}}),
             [=](In in) { return linalg::solve(shifted(in[0]), in[1]); }),
      single("solve_broadcast", leaves({{3, 3}, {2, 3, 2}}),
             [=](In in) { return linalg::solve(shifted(in[0]), in[1]); }),
      single("solve_right", leaves({{3, 3}, {2, 3}}),
             [=](In in) { return linalg::solve(shifted(in[0]), in[1], /*left=*/false); }),
      // A full matrix handed to solve_triangular: the gradient must be zero in the triangle it does not read.
      single("solve_triangular_upper", leaves({{3, 3}, {3, 2}}),
             [=](In in) { return linalg::solve_triangular(shifted(in[0]), in[1], /*upper=*/true); }),
      single("solve_triangular_lower_unit", leaves({{3, 3}, {3, 2}}),
             [=](In in) { return linalg::solve_triangular(in[0], in[1], false, true, /*unitriangular=*/true); }),
      single("solve_triangular_right_batched", leaves({{2, 3, 3}, {2, 4, 3}}),
             [=](In in) { return linalg::solve_triangular(shifted(in[0]), in[1], true, /*left=*/false); }),
      single("inv", leaves({{3, 3}}), [=](In in) { return linalg::inv(shifted(in[0])); }),
      single("det", leaves({{3, 3}}), [](In in) { return linalg::det(in[0]); }),
      single("det_batched", leaves({{2, 4, 4}}), [](In in) { return linalg::det(in[0]); }),
      single("slogdet", leaves({{2, 3, 3}}), [](In in) { return linalg::slogdet(in[0]).logabsdet; }),
      single("eigvalsh", leaves({{4, 4}}), [](In in) { return linalg::eigvalsh(sym(in[0])); }),
      // An eigenvector's sign is arbitrary; v * v is not.
      multi("eigh", leaves({{2, 3, 3}}),
            [](In in) {
              auto [w, v] = linalg::eigh(sym(in[0]));
              return TensorVec{w, v * v};
            }),
      multi("eigh_vectors_only", leaves({{3, 3}}),
            [](In in) {
              Tensor v = linalg::eigh(sym(in[0])).eigenvectors;
              return TensorVec{v * v * ramp({3, 3})};
            }),
      multi("qr_tall", leaves({{4, 3}}),
            [](In in) {
              auto [q, r] = linalg::qr(in[0]);
              return TensorVec{q, r};
            }),
      multi("qr_wide_batched", leaves({{2, 3, 5}}),
            [](In in) {
              auto [q, r] = linalg::qr(in[0]);
              return TensorVec{q, r};
            }),
      single("qr_r_only", leaves({{4, 3}}), [](In in) { return linalg::qr(in[0], "r").R; }),
      single("qr_complete_r", leaves({{4, 3}}), [](In in) { return linalg::qr(in[0], "complete").R; }),
      single("svdvals", leaves({{4, 3}}), [](In in) { return linalg::svdvals(in[0]); }),
      // u_i v_i^T does not depend on the signs; weights other than s make each pair count on its own.
      multi("svd_tall", leaves({{4, 3}}),
            [](In in) {
              auto [u, s, vh] = linalg::svd(in[0], false);
              return TensorVec{s, matmul(u * ramp({3}), vh)};
            }),
      multi("svd_wide_batched", leaves({{2, 3, 4}}),
            [](In in) {
              auto [u, s, vh] = linalg::svd(in[0], false);
              return TensorVec{s, matmul(u * ramp({3}), vh), u * u};
            }),
      multi("svd_square_vectors", leaves({{3, 3}}),
            [](In in) {
              auto [u, s, vh] = linalg::svd(in[0], false);
              return TensorVec{u * u, vh * vh};
            }),
      // full_matrices: the columns past min(m, n) are ignored, the rest differentiate as in the reduced form.
      multi("svd_full_matrices", leaves({{4, 2}}),
            [](In in) {
              auto [u, s, vh] = linalg::svd(in[0], true);
              return TensorVec{s, matmul(u.narrow(-1, 0, 2) * ramp({2}), vh)};
            }),
      // pinv's own rule: full rank, tall and wide, and a rank-2 product (every perturbation of x and y keeps
      // the rank, where the rule holds).
      single("pinv_tall", leaves({{4, 3}}), [](In in) { return linalg::pinv(in[0]); }),
      single("pinv_wide_batched", leaves({{2, 2, 3}}), [](In in) { return linalg::pinv(in[0]); }),
      single("pinv_rank_deficient", leaves({{4, 2}, {2, 3}}), [](In in) { return linalg::pinv(matmul(in[0], in[1])); }),
      single("lstsq", leaves({{4, 3}, {4, 2}}), [](In in) { return linalg::lstsq(in[0], in[1]).solution; }),
      single("cholesky_solve", leaves({{3, 3}, {3, 2}}),
             [=](In in) { return linalg::cholesky_solve(in[1], linalg::cholesky(spd_of(in[0]))); }),
      single("matrix_power_minus_3", leaves({{3, 3}}), [=](In in) { return linalg::matrix_power(shifted(in[0]), -3); }),
      single("matrix_norm_nuc", leaves({{3, 4}}), [](In in) { return linalg::matrix_norm(in[0], "nuc"); }),
      single("matrix_norm_2", leaves({{2, 3, 3}}), [](In in) { return linalg::matrix_norm(in[0], 2.0); }),
      single("cond", leaves({{3, 3}}), [](In in) { return linalg::cond(in[0]); }),
  };
}

INSTANTIATE_TEST_SUITE_P(Decompositions, OpGrad, ::testing::ValuesIn(decomposition_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(DecompositionsGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(decomposition_cases())),
                         case_name);

// ---- values ----

TEST(Cholesky, MatchesHandValuesAndRebuildsTheMatrix) {
  // [[4, 2], [2, 3]] = l l^T with l = [[2, 0], [1, sqrt(2)]].
  Tensor l = linalg::cholesky(f64({4, 2, 2, 3}, {2, 2}));
  const std::vector<double> got = vals(l), want{2, 0, 1, std::sqrt(2.0)};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  seed_from("cholesky_rebuild");
  for (DType dtype : {kFloat64, kFloat32}) {
    const Tensor a = spd({3, 5, 5}).to(dtype);
    const Tensor f = linalg::cholesky(a);
    EXPECT_LT(max_abs_diff(matmul(f, f.mT()), a), dtype == kFloat64 ? 1e-13 : 1e-5) << dtype;
    EXPECT_EQ(max_abs_diff(f, tril(f)), 0.0) << "not lower triangular";
    EXPECT_LT(max_abs_diff(linalg::cholesky(a, true), f.mT()), 1e-15);
  }
}

TEST(Cholesky, ReadsOnlyTheLowerTriangle) {
  seed_from("cholesky_lower");
  const Tensor a = spd({4, 4});
  const Tensor junk_above = a + triu(f64(std::vector<double>(16, 100.0), {4, 4}), 1);
  EXPECT_EQ(max_abs_diff(linalg::cholesky(junk_above), linalg::cholesky(a)), 0.0);
}

TEST(Solve, SolvesAndMatchesHandValues) {
  // 2x + y = 5, x + 3y = 10: x = 1, y = 3.
  const std::vector<double> x = vals(linalg::solve(f64({2, 1, 1, 3}, {2, 2}), f64({5, 10}, {2})));
  EXPECT_NEAR(x[0], 1.0, 1e-15);
  EXPECT_NEAR(x[1], 3.0, 1e-15);
  seed_from("solve_residual");
  const Tensor a = well_conditioned({2, 3, 6, 6}, 0.0) + 4.0 * eye_like(well_conditioned({2, 3, 6, 6}, 0.0));
  const Tensor b = leaf({3, 6, 2}).detach();  // broadcasts against a's batch
  const Tensor sol = linalg::solve(a, b);
  ASSERT_EQ(sol.sizes(), (Shape{2, 3, 6, 2}));
  EXPECT_LT(max_abs_diff(matmul(a, sol), b.expand({2, 3, 6, 2})), 1e-13);
  const Tensor right = linalg::solve(a, b.mT(), /*left=*/false);
  EXPECT_LT(max_abs_diff(matmul(right, a), b.mT().expand({2, 3, 2, 6})), 1e-13);
  EXPECT_LT(max_abs_diff(matmul(a, linalg::inv(a)), eye_like(a)), 1e-13);
}

TEST(Solve, PivotsWhereTheFirstEntryIsZero) {
  // No LU without row exchanges exists for [[0, 1], [1, 0]]; partial pivoting handles it.
  const std::vector<double> x = vals(linalg::solve(f64({0, 1, 1, 0}, {2, 2}), f64({2, 7}, {2})));
  EXPECT_EQ(x, (std::vector<double>{7, 2}));
}

TEST(SolveTriangular, MatchesSubstitutionAndIgnoresTheOtherTriangle) {
  seed_from("triangular");
  const Tensor full = well_conditioned({5, 5});
  const Tensor b = leaf({5, 3}).detach();
  for (bool upper : {true, false}) {
    for (bool unit : {false, true}) {
      Tensor t = upper ? triu(full, unit ? 1 : 0) : tril(full, unit ? -1 : 0);
      if (unit) t = t + eye_like(t);
      const Tensor x = linalg::solve_triangular(full, b, upper, true, unit);
      EXPECT_LT(max_abs_diff(matmul(t, x), b), 1e-13) << "upper " << upper << " unit " << unit;
    }
  }
}

// The Leibniz formula, sum over permutations of sign * product, in long double.
long double leibniz(const std::vector<double>& a, int n) {
  std::vector<int> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  long double total = 0;
  do {
    int inversions = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) inversions += p[i] > p[j];
    long double term = inversions % 2 ? -1 : 1;
    for (int i = 0; i < n; ++i) term *= a[static_cast<size_t>(i * n + p[i])];
    total += term;
  } while (std::next_permutation(p.begin(), p.end()));
  return total;
}

TEST(Det, MatchesTheLeibnizFormula) {
  seed_from("det_leibniz");
  const Tensor a = leaf({3, 5, 5}).detach();
  const std::vector<double> d = vals(linalg::det(a)), all = vals(a);
  const auto [sign, logabs] = linalg::slogdet(a);
  const std::vector<double> s = vals(sign), l = vals(logabs);
  for (int b = 0; b < 3; ++b) {
    const std::vector<double> m(all.begin() + b * 25, all.begin() + (b + 1) * 25);
    const double want = static_cast<double>(leibniz(m, 5));
    EXPECT_NEAR(d[b], want, 1e-12 * std::max(1.0, std::fabs(want))) << b;
    EXPECT_EQ(s[b], want > 0 ? 1.0 : -1.0) << b;
    EXPECT_NEAR(l[b], std::log(std::fabs(want)), 1e-12) << b;
  }
  // A permutation matrix: an odd permutation (one swap) has determinant -1, an even one (a 3-cycle) +1.
  EXPECT_EQ(linalg::det(f64({0, 1, 0, 1, 0, 0, 0, 0, 1}, {3, 3})).item<double>(), -1.0);
  EXPECT_EQ(linalg::det(f64({0, 1, 0, 0, 0, 1, 1, 0, 0}, {3, 3})).item<double>(), 1.0);
}

TEST(Det, SingularAndEmptyMatrices) {
  const Tensor singular = f64({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3});  // row 2 = 2 row 1
  EXPECT_EQ(linalg::det(singular).item<double>(), 0.0);
  const auto [sign, logabs] = linalg::slogdet(singular);
  EXPECT_EQ(sign.item<double>(), 0.0);
  EXPECT_EQ(logabs.item<double>(), -std::numeric_limits<double>::infinity());
  // The determinant of a 0 x 0 matrix is 1 (the empty product), as in PyTorch.
  const Tensor d = linalg::det(empty({2, 0, 0}, kFloat64));
  EXPECT_EQ(vals(d), (std::vector<double>{1, 1}));
  EXPECT_EQ(linalg::det(empty({0, 3, 3}, kFloat64)).sizes(), (Shape{0}));
}

// A batch that mixes singular and invertible matrices: each gets its own rule's gradient.
TEST(Det, GradientOfABatchMixingSingularAndInvertibleMatrices) {
  Tensor a = stack({f64({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3}), f64({2, 1, 0, 1, 3, 1, 0, 1, 4}, {3, 3})}).requires_grad_();
  linalg::det(a).sum().backward();
  Tensor one = f64({2, 1, 0, 1, 3, 1, 0, 1, 4}, {3, 3}).requires_grad_();
  linalg::det(one).backward();
  EXPECT_LT(max_abs_diff(a.grad().select(0, 1), one.grad()), 1e-13);
  Tensor sing = f64({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3}).requires_grad_();
  linalg::det(sing).backward();
  EXPECT_LT(max_abs_diff(a.grad().select(0, 0), sing.grad()), 1e-13);
  // create_graph at a singular matrix: the SVD's cofactor is not differentiable again, and says so.
  Tensor b = f64({1, 2, 2, 4}, {2, 2}).requires_grad_();
  EXPECT_NE(error_of([&] { autograd::grad({linalg::det(b)}, {b}, {}, std::nullopt, true); })
                .find("det: backward: a matrix of the input is singular"),
            std::string::npos);
}

TEST(Det, GradientAtASingularMatrixIsTheCofactorMatrix) {
  // d det / d a[i][j] is the (i, j) cofactor, finite where a is singular; with rank 2 it is not zero.
  Tensor a = f64({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3}).requires_grad_();
  linalg::det(a).backward();
  const std::vector<double> m = vals(a), g = vals(a.grad());
  auto at = [&](int i, int j) { return m[static_cast<size_t>(i * 3 + j)]; };
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const int r0 = i == 0 ? 1 : 0, r1 = i == 2 ? 1 : 2, c0 = j == 0 ? 1 : 0, c1 = j == 2 ? 1 : 2;
      const double minor = at(r0, c0) * at(r1, c1) - at(r0, c1) * at(r1, c0);
      EXPECT_NEAR(g[static_cast<size_t>(i * 3 + j)], ((i + j) % 2 ? -1 : 1) * minor, 1e-12) << i << ", " << j;
    }
}

TEST(Eigh, MatchesHandValuesAndDiagonalizes) {
  // [[2, 1], [1, 2]]: eigenvalues 1 and 3, eigenvectors (1, -1) / sqrt 2 and (1, 1) / sqrt 2.
  auto [w, v] = linalg::eigh(f64({2, 1, 1, 2}, {2, 2}));
  EXPECT_NEAR(vals(w)[0], 1.0, 1e-15);
  EXPECT_NEAR(vals(w)[1], 3.0, 1e-15);
  EXPECT_NEAR(std::fabs(vals(v)[1]), std::sqrt(0.5), 1e-15);
  seed_from("eigh");
  for (DType dtype : {kFloat64, kFloat32}) {
    const Tensor a = sym(leaf({3, 6, 6}).detach()).to(dtype);
    auto [values, vectors] = linalg::eigh(a);
    const double tol = dtype == kFloat64 ? 1e-13 : 1e-5;
    EXPECT_LT(max_abs_diff(matmul(a, vectors), vectors * values.unsqueeze(-2)), tol) << dtype;
    EXPECT_LT(max_abs_diff(matmul(vectors.mT(), vectors), eye_like(a)), tol) << dtype;
    const std::vector<double> wv = vals(values);
    for (size_t i = 0; i + 1 < wv.size(); ++i)
      if ((i + 1) % 6 != 0) EXPECT_LE(wv[i], wv[i + 1]) << "not ascending at " << i;
    EXPECT_LT(max_abs_diff(linalg::eigvalsh(a), values), tol);
  }
}

TEST(Qr, IsOrthonormalTimesUpperTriangular) {
  seed_from("qr");
  for (Shape shape : {Shape{5, 3}, Shape{3, 5}, Shape{2, 4, 4}}) {
    const Tensor a = leaf(shape).detach();
    const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
    for (const char* mode : {"reduced", "complete"}) {
      auto [q, r] = linalg::qr(a, mode);
      const int64_t cols = std::string(mode) == "reduced" ? k : m;
      ASSERT_EQ(q.size(-1), cols) << mode;
      ASSERT_EQ(r.size(-2), cols) << mode;
      EXPECT_LT(max_abs_diff(matmul(q, r), a), 1e-13) << shape_str(shape) << " " << mode;
      EXPECT_LT(max_abs_diff(matmul(q.mT(), q), eye(cols, cols, kFloat64)), 1e-13);
      EXPECT_EQ(max_abs_diff(r, triu(r)), 0.0) << "R not upper triangular";
    }
    EXPECT_FALSE(linalg::qr(a, "r").Q.defined());
    EXPECT_EQ(max_abs_diff(linalg::qr(a, "r").R, linalg::qr(a).R), 0.0);
  }
}

TEST(Svd, RebuildsAndAgreesWithEighOfTheGram) {
  // diag(3, -2): singular values 3 and 2.
  EXPECT_EQ(vals(linalg::svdvals(f64({3, 0, 0, -2}, {2, 2}))), (std::vector<double>{3, 2}));
  seed_from("svd");
  for (Shape shape : {Shape{6, 4}, Shape{4, 6}, Shape{3, 5, 5}}) {
    const Tensor a = leaf(shape).detach();
    const int64_t k = std::min(a.size(-2), a.size(-1));
    auto [u, s, vh] = linalg::svd(a, false);
    EXPECT_LT(max_abs_diff(matmul(u * s.unsqueeze(-2), vh), a), 1e-13) << shape_str(shape);
    EXPECT_LT(max_abs_diff(matmul(u.mT(), u), eye(k, k, kFloat64)), 1e-13);
    EXPECT_LT(max_abs_diff(matmul(vh, vh.mT()), eye(k, k, kFloat64)), 1e-13);
    // The singular values are the square roots of the eigenvalues of the smaller Gram matrix, descending.
    const Tensor gram = a.size(-2) >= a.size(-1) ? matmul(a.mT(), a) : matmul(a, a.mT());
    const Tensor from_eigh = flip(sqrt(linalg::eigvalsh(gram)), {-1});
    EXPECT_LT(max_abs_diff(s, from_eigh), 1e-12) << shape_str(shape);
    EXPECT_LT(max_abs_diff(linalg::svdvals(a), s), 1e-13);
    auto [fu, fs, fvh] = linalg::svd(a, true);
    EXPECT_EQ(fu.size(-1), a.size(-2));
    EXPECT_EQ(fvh.size(-2), a.size(-1));
    EXPECT_LT(max_abs_diff(matmul(fu.mT(), fu), eye(a.size(-2), a.size(-2), kFloat64)), 1e-13);
    EXPECT_LT(max_abs_diff(matmul(fvh, fvh.mT()), eye(a.size(-1), a.size(-1), kFloat64)), 1e-13);
  }
}

TEST(LuFactor, PermutationTimesLTimesURebuildsTheMatrix) {
  seed_from("lu");
  const Tensor a = leaf({2, 5, 5}).detach();
  const ops::LuFactors f = ops::lu_factor(a);
  const Tensor lower = tril(f.lu, -1) + eye_like(a), upper = triu(f.lu);
  const Tensor pa = ops::gather(a, 1, f.perm.unsqueeze(-1).expand({2, 5, 5}));  // row i of P a is row perm[i]
  EXPECT_LT(max_abs_diff(matmul(lower, upper), pa), 1e-13);
  // Partial pivoting: every multiplier is at most 1 in magnitude.
  EXPECT_LE(ops::amax(ops::abs(tril(f.lu, -1))).item<double>(), 1.0);
}

TEST(Linalg, BatchedResultsEqualOneMatrixAtATime) {
  seed_from("batched");
  const Tensor a = spd({3, 4, 4});
  const Tensor l = linalg::cholesky(a), d = linalg::det(a), w = linalg::eigvalsh(a), s = linalg::svdvals(a);
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(max_abs_diff(l.select(0, b), linalg::cholesky(a.select(0, b))), 0.0);
    EXPECT_EQ(max_abs_diff(d.select(0, b), linalg::det(a.select(0, b))), 0.0);
    EXPECT_EQ(max_abs_diff(w.select(0, b), linalg::eigvalsh(a.select(0, b))), 0.0);
    EXPECT_EQ(max_abs_diff(s.select(0, b), linalg::svdvals(a.select(0, b))), 0.0);
  }
}

// The values' gradients need no distinct eigenvalues (singular values): at the identity, d sum(w) / da = I.
TEST(Linalg, ValueGradientsAreFiniteAtRepeatedValues) {
  for (int which = 0; which < 4; ++which) {
    Tensor a = eye(3, 3, kFloat64).requires_grad_();
    Tensor y = which == 0   ? linalg::eigvalsh(a)
               : which == 1 ? linalg::eigh(a).eigenvalues
               : which == 2 ? linalg::svdvals(a)
                            : linalg::svd(a, false).S;
    y.sum().backward();
    EXPECT_LT(max_abs_diff(a.grad(), eye(3, 3, kFloat64)), 1e-15) << which;
  }
}

// Batches big enough to be split over threads (one matrix of 48 x 48 is a task): each matrix as alone.
TEST(Linalg, ThreadedBatchesEqualOneMatrixAtATime) {
  seed_from("threaded");
  const Tensor a = spd({64, 48, 48});
  const Tensor l = linalg::cholesky(a), w = linalg::eigvalsh(a), s = linalg::svdvals(a), r = linalg::qr(a).R;
  const Tensor x = linalg::solve(a, a.narrow(-1, 0, 2));
  for (int64_t b : {0, 17, 63}) {
    const Tensor one = a.select(0, b);
    EXPECT_EQ(max_abs_diff(l.select(0, b), linalg::cholesky(one)), 0.0) << b;
    EXPECT_EQ(max_abs_diff(w.select(0, b), linalg::eigvalsh(one)), 0.0) << b;
    EXPECT_EQ(max_abs_diff(s.select(0, b), linalg::svdvals(one)), 0.0) << b;
    EXPECT_EQ(max_abs_diff(r.select(0, b), linalg::qr(one).R), 0.0) << b;
    EXPECT_EQ(max_abs_diff(x.select(0, b), linalg::solve(one, one.narrow(-1, 0, 2))), 0.0) << b;
  }
}

// Empty matrices and empty batches: shapes as PyTorch gives them, and the identities still hold.
TEST(Linalg, EmptyMatricesAndBatches) {
  const Tensor none = empty({2, 0, 0}, kFloat64);
  EXPECT_EQ(linalg::cholesky(none).sizes(), (Shape{2, 0, 0}));
  EXPECT_EQ(linalg::eigh(none).eigenvalues.sizes(), (Shape{2, 0}));
  EXPECT_EQ(linalg::solve(none, empty({2, 0, 3}, kFloat64)).sizes(), (Shape{2, 0, 3}));
  EXPECT_EQ(linalg::inv(empty({0, 3, 3}, kFloat64)).sizes(), (Shape{0, 3, 3}));
  EXPECT_EQ(linalg::svdvals(empty({0, 3, 2}, kFloat64)).sizes(), (Shape{0, 2}));
  // (3, 0): Q is the first 0 (reduced) or 3 (complete) columns of I, R is empty or zeros.
  auto [q, r] = linalg::qr(empty({3, 0}, kFloat64), "complete");
  EXPECT_LT(max_abs_diff(q, eye(3, 3, kFloat64)), 1e-300);
  EXPECT_EQ(r.sizes(), (Shape{3, 0}));
  auto [u, s, vh] = linalg::svd(empty({3, 0}, kFloat64), true);
  EXPECT_LT(max_abs_diff(u, eye(3, 3, kFloat64)), 1e-300);
  EXPECT_EQ(s.sizes(), (Shape{0}));
  EXPECT_EQ(vh.sizes(), (Shape{0, 0}));
  EXPECT_EQ(linalg::pinv(empty({3, 0}, kFloat64)).sizes(), (Shape{0, 3}));
}

TEST(Linalg, MatrixPowerOfOneIsACopy) {
  Tensor a = f64({1, 2, 3, 4}, {2, 2});
  Tensor p = linalg::matrix_power(a, 1);
  p.mul_(2.0);
  EXPECT_EQ(vals(a), (std::vector<double>{1, 2, 3, 4}));
}

TEST(Linalg, AutocastRunsInFloat32) {
  seed_from("autocast");
  const Tensor a = spd({3, 3}).to(kBFloat16);
  AutocastGuard on(DeviceType::CPU, kBFloat16);
  EXPECT_EQ(linalg::cholesky(a).dtype(), kFloat32);
  EXPECT_EQ(linalg::svdvals(a).dtype(), kFloat32);
}

TEST(Pinv, MeetsThePenroseConditions) {
  seed_from("pinv");
  const Tensor full = leaf({5, 3}).detach();
  const Tensor rank2 = matmul(leaf({4, 2}).detach(), leaf({2, 6}).detach());
  for (const Tensor& a : {full, full.mT(), rank2}) {
    const Tensor p = linalg::pinv(a);
    ASSERT_EQ(p.sizes(), (Shape{a.size(1), a.size(0)}));
    EXPECT_LT(max_abs_diff(matmul(matmul(a, p), a), a), 1e-12) << shape_str(a.sizes());
    EXPECT_LT(max_abs_diff(matmul(matmul(p, a), p), p), 1e-12);
    const Tensor ap = matmul(a, p), pa = matmul(p, a);
    EXPECT_LT(max_abs_diff(ap, ap.mT()), 1e-12);
    EXPECT_LT(max_abs_diff(pa, pa.mT()), 1e-12);
  }
  EXPECT_EQ(linalg::matrix_rank(rank2).item<int64_t>(), 2);
  EXPECT_EQ(linalg::matrix_rank(full).item<int64_t>(), 3);
  const Tensor square = well_conditioned({4, 4});
  EXPECT_LT(max_abs_diff(linalg::pinv(square), linalg::inv(square)), 1e-13);
  // A cutoff above every singular value leaves nothing: pinv is zero, and so is the rank.
  EXPECT_EQ(ops::amax(ops::abs(linalg::pinv(square, 1e6))).item<double>(), 0.0);
  EXPECT_EQ(linalg::matrix_rank(square, 1e6).item<int64_t>(), 0);
}

TEST(Lstsq, MatchesTheNormalEquationsAndTheMinimumNorm) {
  seed_from("lstsq");
  const Tensor a = leaf({2, 6, 3}).detach(), b = leaf({2, 6, 2}).detach();
  const linalg::LstsqResult r = linalg::lstsq(a, b);
  const Tensor normal = linalg::solve(matmul(a.mT(), a), matmul(a.mT(), b));  // a^T a x = a^T b
  EXPECT_LT(max_abs_diff(r.solution, normal), 1e-12);
  EXPECT_EQ(vals(r.rank.to(kFloat64)), (std::vector<double>{3, 3}));
  EXPECT_LT(max_abs_diff(r.singular_values, linalg::svdvals(a)), 1e-14);
  // Rank-deficient: of all minimizers, the one with no component in a's null space (row space only).
  const Tensor deficient = matmul(leaf({5, 2}).detach(), leaf({2, 4}).detach());
  const Tensor x = linalg::lstsq(deficient, leaf({5, 1}).detach()).solution;
  const Tensor null_part = x - matmul(matmul(linalg::pinv(deficient), deficient), x);
  EXPECT_LT(ops::amax(ops::abs(null_part)).item<double>(), 1e-12);
}

TEST(Composites, CholeskySolveMatrixPowerNormsAndCond) {
  seed_from("composites");
  const Tensor a = spd({2, 4, 4}), b = leaf({2, 4, 3}).detach();
  EXPECT_LT(max_abs_diff(linalg::cholesky_solve(b, linalg::cholesky(a)), linalg::solve(a, b)), 1e-13);
  EXPECT_LT(max_abs_diff(linalg::cholesky_solve(b, linalg::cholesky(a, true), true), linalg::solve(a, b)), 1e-13);
  // matrix_power against plain repeated products.
  const Tensor m = well_conditioned({3, 3}, 0.5);
  Tensor product = eye(3, 3, kFloat64);
  for (int64_t k = 0; k <= 7; ++k) {
    EXPECT_LT(max_abs_diff(linalg::matrix_power(m, k), product), 1e-12 * std::pow(4.0, k)) << k;
    product = matmul(product, m);
  }
  EXPECT_LT(max_abs_diff(linalg::matrix_power(m, -2), matmul(linalg::inv(m), linalg::inv(m))), 1e-12);
  // Norms of matrices whose norms are known: diag(3, -4) and the rank-1 u v^T (2-norm |u| |v|).
  const Tensor d = f64({3, 0, 0, -4}, {2, 2});
  EXPECT_NEAR(linalg::matrix_norm(d).item<double>(), 5.0, 1e-15);
  EXPECT_NEAR(linalg::matrix_norm(d, "nuc").item<double>(), 7.0, 1e-15);
  EXPECT_NEAR(linalg::matrix_norm(d, 2.0).item<double>(), 4.0, 1e-15);
  EXPECT_NEAR(linalg::matrix_norm(d, -2.0).item<double>(), 3.0, 1e-15);
  EXPECT_NEAR(linalg::cond(d).item<double>(), 4.0 / 3.0, 1e-15);
  const Tensor uv = f64({1, 2, 3, 2, 4, 6}, {2, 3});  // (1, 2)^T (1, 2, 3): |u| |v| = sqrt(5 * 14)
  EXPECT_NEAR(linalg::matrix_norm(uv, 2.0).item<double>(), std::sqrt(70.0), 1e-13);
  const Tensor g = f64({1, -7, 2, 3, 4, -1}, {2, 3});
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(linalg::matrix_norm(g, 1.0).item<double>(), 11.0);   // column sums 4, 11, 3
  EXPECT_EQ(linalg::matrix_norm(g, -1.0).item<double>(), 3.0);
  EXPECT_EQ(linalg::matrix_norm(g, inf).item<double>(), 10.0);   // row sums 10, 8
  EXPECT_EQ(linalg::matrix_norm(g, -inf).item<double>(), 8.0);
  EXPECT_EQ(linalg::matrix_norm(g, inf, true).sizes(), (Shape{1, 1}));
  EXPECT_EQ(linalg::vector_norm(g, inf).item<double>(), 7.0);
  EXPECT_EQ(linalg::cond(f64({1, 2, 2, 4}, {2, 2})).item<double>(), inf);
}

// ---- errors ----

TEST(LinalgErrors, NameTheMatrixAndWhatWasExpected) {
  // The second matrix of the batch is not positive-definite: its 2 x 2 leading minor is 1 - 4 < 0.
  Tensor batch = stack({f64({2, 0, 0, 2}, {2, 2}), f64({1, 2, 2, 1}, {2, 2})});
  EXPECT_NE(error_of([&] { linalg::cholesky(batch); }).find("cholesky: matrix (1) of the (2, 2, 2) input is not "
                                                            "positive-definite: its leading minor of order 2"),
            std::string::npos)
      << error_of([&] { linalg::cholesky(batch); });
  // NaN is not positive.
  EXPECT_NE(error_of([&] { linalg::cholesky(f64({NAN, 0, 0, 1}, {2, 2})); }).find("order 1"), std::string::npos);
  const Tensor singular = stack({f64({1, 0, 0, 1}, {2, 2}), f64({1, 2, 2, 4}, {2, 2})}).unsqueeze(0);
  EXPECT_NE(error_of([&] { linalg::solve(singular, f64({1, 2}, {2})); }).find("solve: matrix (0, 1) of the (1, 2, 2, 2) input is singular"),
            std::string::npos)
      << error_of([&] { linalg::solve(singular, f64({1, 2}, {2})); });
  EXPECT_NE(error_of([&] { linalg::inv(singular); }).find("inv: matrix (0, 1)"), std::string::npos);
  EXPECT_NE(error_of([&] { linalg::det(f64({1, 2, 3, 4, 5, 6}, {2, 3})); }).find("det: expected square matrices (..., n, n); got shape (2, 3)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::eigh(f64({1, 2, 3}, {3})); }).find("eigh: expected a matrix or a batch of them, (..., m, n); got shape (3)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::svd(int64s({1, 2, 3, 4}, {2, 2})); }).find("svd: expected a float32 or float64 input, got int64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::eigh(f64({1, NAN, NAN, 1}, {2, 2})); }).find("has a NaN or infinite entry"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::svdvals(f64({1, INFINITY, 0, 1}, {2, 2})); }).find("has a NaN or infinite"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::solve(f64({1, 0, 0, 1}, {2, 2}), f64({1, 2, 3}, {3, 1})); })
                .find("solve: b of shape (3, 1) has 3 rows; a of shape (2, 2) needs 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::solve(f64({1, 0, 0, 1}, {2, 2}), f64({1, 2}, {2, 1}).to(kFloat32)); })
                .find("solve: a is float64 but b is float32; expected one dtype"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::qr(f64({1, 2, 3, 4}, {2, 2}), "full"); }).find("expected \"reduced\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::matrix_norm(f64({1, 2, 3, 4}, {2, 2}), 3.0); }).find("expected 2, -2, 1, -1, inf"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::lstsq(f64({1, 2, 3, 4}, {2, 2}), f64({1, 2, 3}, {3, 1})); }).find("lstsq: b of shape (3, 1) has 3 rows"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::matrix_power(f64({1, 2, 3, 4, 5, 6}, {2, 3}), 2); }).find("matrix_power: expected square"),
            std::string::npos);
}

TEST(LinalgErrors, MoreShapeErrorsNameTheFunctionCalled) {
  EXPECT_NE(error_of([&] { linalg::inv(f64({1, 2, 3, 4, 5, 6}, {2, 3})); }).find("inv: expected square matrices"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::slogdet(f64({1, 2, 3, 4, 5, 6}, {3, 2})); }).find("slogdet: expected square"),
            std::string::npos);
  // The right-hand form counts b's columns; a singular a is named at its own shape, not the broadcast one.
  EXPECT_NE(error_of([&] { linalg::solve(f64({1, 0, 0, 1}, {2, 2}), f64({1, 2, 3}, {1, 3}), false); })
                .find("solve: b of shape (1, 3) has 3 columns"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::solve(f64({1, 2, 2, 4}, {2, 2}), f64(std::vector<double>(12, 1.0), {3, 2, 2})); })
                .find("solve: the (2, 2) input is singular"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linalg::solve_triangular(f64({1, 0, 0, 1}, {2, 2}), f64({1, 2, 3}, {3, 1}), true); })
                .find("solve_triangular: b of shape (3, 1) has 3 rows"),
            std::string::npos);
  // lu_solve indexes with perm: a perm that is not a permutation is refused before any kernel runs.
  const ops::LuFactors f = ops::lu_factor(f64({2, 1, 1, 3}, {2, 2}));
  EXPECT_NE(error_of([&] { ops::lu_solve({f.lu, int64s({0, 5}, {2})}, f64({1, 2}, {2, 1})); })
                .find("lu_solve: perm row 0 is not a permutation of 0..1 (entry 1 is 5)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::det(ops::LuFactors{f.lu, int64s({1, 1}, {2})}); }).find("det: perm row 0"),
            std::string::npos);
}

TEST(LinalgErrors, UndefinedGradientsSayWhy) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  Tensor q = linalg::qr(a, "complete").Q;
  EXPECT_NE(error_of([&] { q.sum().backward(); }).find("Q's last 1 columns are not determined"), std::string::npos);
  // Q's first n columns are determined, and differentiable.
  Tensor b = f64({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  linalg::qr(b, "complete").Q.narrow(-1, 0, 2).sum().backward();
  EXPECT_TRUE(b.grad().defined());
  Tensor s = f64({1, 2, 2, 4}, {2, 2}).requires_grad_();
  EXPECT_NE(error_of([&] { linalg::slogdet(s).logabsdet.backward(); }).find("singular"), std::string::npos);
}

}  // namespace
}  // namespace kiln
