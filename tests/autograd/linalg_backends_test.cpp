// kiln::linalg's two CPU backends on matrices large enough for LAPACK: in a build with OpenBLAS (when it is the
// GEMM backend) LU, Cholesky and the triangular solves from order 128, and eigh and svd from order 128 when
// OpenMP's threads spin, go to OpenBLAS's LAPACK; otherwise Eigen's solvers run
// (kiln/tensor/ops/decompositions_cpu.cpp). Under each backend, at orders that take each path, every
// factorization is checked against what defines it (l l^T = a, P a = L U, a x = b, v diag(w) v^T = a,
// u diag(s) vh = a with orthonormal factors), reads only the triangle it is given (NaN elsewhere), fails at the
// same places, and the backends agree with each other.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "grad_test_util.h"
#include "kiln/tensor/ops/decompositions.h"
#include "kiln/tensor/ops/linalg.h"
#include "linalg_test_util.h"

namespace kiln {
namespace {

using namespace test;
using namespace test::linalg_test;

// The backends this build has ("eigen", and "openblas" where built with it): from order 128 the LU
// factorization and the triangular solves go to OpenBLAS's LAPACK when it is the backend, and the Cholesky
// factorization too (from order 512 under OMP_WAIT_POLICY=passive, which CTest sets); below that and otherwise
// to Eigen. Each must meet the definitions, read only the triangle it is given, and report the same failures at
// the same places.
std::vector<std::string> cpu_backends() {
  std::vector<std::string> out{"eigen"};
  const CpuGemmBackend chosen = cpu_gemm_backend();
  try {
    set_cpu_gemm_backend("openblas");
    out.push_back("openblas");
  } catch (const Error&) {  // built without OpenBLAS
  }
  set_cpu_gemm_backend(chosen.name == "OpenBLAS" ? "openblas" : "eigen");
  return out;
}

// Runs f under each backend, then puts the chosen one back.
void for_each_cpu_backend(const std::function<void(const std::string&)>& f) {
  const CpuGemmBackend chosen = cpu_gemm_backend();
  for (const std::string& backend : cpu_backends()) {
    set_cpu_gemm_backend(backend);
    SCOPED_TRACE(backend);
    f(backend);
  }
  set_cpu_gemm_backend(chosen.name == "OpenBLAS" ? "openblas" : "eigen");
}

double relative_error(const Tensor& got, const Tensor& want) {
  return max_abs_diff(got, want) / std::max(1.0, ops::amax(ops::abs(want.detach().to(kFloat64))).item<double>());
}

TEST(LinalgBackends, CholeskyOfLargeMatricesMeetsItsDefinition) {
  std::map<std::string, Tensor> factors;
  const std::map<int64_t, Tensor> inputs{{40, spd({3, 40, 40})}, {130, spd({2, 130, 130})}, {520, spd({1, 520, 520})}};
  for_each_cpu_backend([&](const std::string& backend) {
    for (int64_t n : {40, 130, 520}) {
      for (DType d : {kFloat64, kFloat32}) {
        const Tensor a64 = inputs.at(n);
        // Junk above the diagonal: only the lower triangle may be read.
        const Tensor a = (ops::tril(a64) + ops::triu(full_like(a64, NAN), 1)).to(d);
        const Tensor l = ops::cholesky(a);
        const double tol = d == kFloat64 ? 1e-12 : 2e-5;
        EXPECT_LT(relative_error(ops::matmul(l.to(kFloat64), l.to(kFloat64).mT()), a64), tol) << n << " " << d;
        EXPECT_TRUE(ops::equal(ops::triu(l, 1), zeros_like(l))) << "exact zeros above the diagonal";
        if (d == kFloat64 && n == 520) factors[backend] = l;
      }
    }
    // The same failures at the same orders: a negative pivot, a NaN and an infinity on the diagonal.
    for (int64_t n : {40, 520}) {
      for (const auto& [at, value] : std::vector<std::pair<int64_t, double>>{{36, -1.0}, {5, NAN}, {3, INFINITY}}) {
        Tensor a = eye(n, n, kFloat64).contiguous();
        a.index_put_({at, at}, value);
        EXPECT_NE(error_of([&] { ops::cholesky(a); }).find("its leading minor of order " + std::to_string(at + 1)),
                  std::string::npos)
            << n << ": " << error_of([&] { ops::cholesky(a); });
      }
    }
  });
  if (factors.size() == 2) EXPECT_LT(max_abs_diff(factors["eigen"], factors["openblas"]), 1e-10);
}

TEST(LinalgBackends, LuFactorsAndSolvesLargeMatrices) {
  for_each_cpu_backend([&](const std::string&) {
    for (int64_t n : {33, 130}) {
      for (DType d : {kFloat64, kFloat32}) {
        // Entries of order 1/sqrt(n) and 2 on the diagonal: eigenvalues in about the disc of radius 0.6 around 2,
        // so the residuals below measure the solver, not the matrix's condition.
        const Tensor a64 = (leaf({2, n, n}, -1.0, 1.0).detach() / std::sqrt(static_cast<double>(n)) +
                            2.0 * eye(n, n, kFloat64))
                               .contiguous();
        const Tensor a = a64.to(d);
        const ops::LuFactors f = ops::lu_factor(a);
        // Every row of perm a permutation, and P a = L U.
        for (int64_t b = 0; b < 2; ++b) {
          std::vector<int64_t> p = f.perm.select(0, b).to_vector<int64_t>();
          std::sort(p.begin(), p.end());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p[static_cast<size_t>(i)], i);
        }
        const Tensor lu = f.lu.to(kFloat64);
        const Tensor lower = ops::tril(lu, -1) + eye_like(lu), upper = ops::triu(lu);
        const Tensor pa = ops::gather(a64, 1, f.perm.unsqueeze(-1).expand({2, n, n}));
        const double tol = d == kFloat64 ? 1e-12 : 1e-5;
        EXPECT_LT(relative_error(ops::matmul(lower, upper), pa), tol) << n << " " << d;
        // Solves both ways: a x = b and a^T x = b, checked by their residuals.
        const Tensor rhs = leaf({2, n, 3}).detach().to(d);
        const Tensor x = ops::lu_solve(f, rhs), xt = ops::lu_solve(f, rhs, /*transpose=*/true);
        EXPECT_LT(relative_error(ops::matmul(a64, x.to(kFloat64)), rhs), tol * 10) << n << " " << d;
        EXPECT_LT(relative_error(ops::matmul(a64.mT(), xt.to(kFloat64)), rhs), tol * 10) << n << " " << d;
      }
    }
    // A zero column: U's diagonal is exactly zero there, det exactly 0, solve an error naming the matrix.
    for (int64_t n : {50, 150}) {
      Tensor s = well_conditioned({n, n}, 1.0);
      s.index_put_({Slice(), 17}, 0.0);
      EXPECT_EQ(ops::det(s).item<double>(), 0.0);
      EXPECT_NE(error_of([&] { ops::solve(s, ones({n, 1}, kFloat64)); }).find("singular"), std::string::npos);
    }
  });
}

TEST(LinalgBackends, TriangularSolvesReadOnlyTheirTriangle) {
  for_each_cpu_backend([&](const std::string&) {
    const int64_t n = 140;
    // Off-diagonal entries of order 1/n: random triangular matrices are otherwise badly conditioned (their
    // condition grows exponentially with n), and the residual would measure that rather than the solve.
    const Tensor base = (leaf({n, n}, -1.0, 1.0).detach() / static_cast<double>(n) + 2.0 * eye(n, n, kFloat64)).contiguous();
    const Tensor rhs = leaf({n, 5}).detach();
    for (bool upper : {false, true}) {
      for (bool unit : {false, true}) {
        const Tensor tri = upper ? ops::triu(base) : ops::tril(base);
        const Tensor used = unit ? tri * (1.0 - eye_like(tri)) + eye_like(tri) : tri;
        // NaN everywhere the solve must not look: the other triangle, and the diagonal when unit.
        Tensor junk = used.clone();
        const Tensor mask = upper ? ops::tril(ones_like(base), unit ? 0 : -1) : ops::triu(ones_like(base), unit ? 0 : 1);
        junk = ops::where(mask > 0.5, full_like(base, NAN), junk);
        const Tensor x = ops::solve_triangular(junk, rhs, upper, unit);
        EXPECT_LT(relative_error(ops::matmul(used, x), rhs), 1e-13) << upper << unit;
      }
    }
  });
}

// eigh and svd take LAPACK (syevd, gesdd) from order 128 only when OpenMP's threads spin (OMP_WAIT_POLICY is
// not passive, which the decision reads at each call): CTest runs passive, so the test sets the variable for
// its duration to reach that path too.
class WaitPolicy {
 public:
  explicit WaitPolicy(const char* value) {
    const char* old = std::getenv("OMP_WAIT_POLICY");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("OMP_WAIT_POLICY", value, 1);
  }
  ~WaitPolicy() {
    if (had_) ::setenv("OMP_WAIT_POLICY", old_.c_str(), 1);
    else ::unsetenv("OMP_WAIT_POLICY");
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(LinalgBackends, EighAndSvdOfLargeMatricesMeetTheirDefinitions) {
  const Tensor sym130 = sym(leaf({2, 130, 130}).detach());
  const Tensor tall = leaf({1, 200, 130}).detach(), wide = leaf({1, 130, 200}).detach();
  std::map<std::string, std::vector<Tensor>> values;
  for (const char* policy : {"active", "passive"}) {
    WaitPolicy wait(policy);
    for_each_cpu_backend([&](const std::string& backend) {
      const std::string key = backend + "/" + policy;
      for (DType d : {kFloat64, kFloat32}) {
        const double tol = d == kFloat64 ? 1e-11 : 2e-4;
        // Junk above the diagonal: eigh reads the lower triangle only.
        const Tensor a = (ops::tril(sym130) + ops::triu(full_like(sym130, NAN), 1)).to(d);
        const auto [w, v] = ops::eigh(a);
        const Tensor v64 = v.to(kFloat64), w64 = w.to(kFloat64);
        EXPECT_LT(relative_error(ops::matmul(v64 * w64.unsqueeze(-2), v64.mT()), sym130), tol) << key << " " << d;
        EXPECT_LT(relative_error(ops::matmul(v64.mT(), v64), eye_like(sym130)), tol) << key << " " << d;
        EXPECT_LT(relative_error(ops::eigvalsh(a).to(kFloat64), w64), tol) << key;
        if (d == kFloat64) values[key].push_back(w64);
        for (const Tensor& x64 : {tall, wide}) {
          const Tensor x = x64.to(d);
          for (bool full : {false, true}) {
            const ops::SvdFactors f = ops::svd(x, full);
            const int64_t k = std::min(x.size(1), x.size(2));
            const Tensor u = f.u.narrow(-1, 0, k).to(kFloat64), vh = f.vh.narrow(-2, 0, k).to(kFloat64);
            const Tensor s64 = f.s.to(kFloat64);
            EXPECT_LT(relative_error(ops::matmul(u * s64.unsqueeze(-2), vh), x64), tol) << key << " " << full;
            EXPECT_LT(relative_error(ops::matmul(f.u.to(kFloat64).mT(), f.u.to(kFloat64)), eye(f.u.size(-1), f.u.size(-1), kFloat64).unsqueeze(0)), tol)
                << key << " u orthonormal, full " << full;
            EXPECT_LT(relative_error(ops::matmul(f.vh.to(kFloat64), f.vh.to(kFloat64).mT()), eye(f.vh.size(-2), f.vh.size(-2), kFloat64).unsqueeze(0)), tol)
                << key << " vh orthonormal, full " << full;
            EXPECT_LT(relative_error(ops::svdvals(x).to(kFloat64), s64), tol) << key;
            if (d == kFloat64 && !full) values[key].push_back(s64);
          }
        }
      }
    });
  }
  // Every path finds the same spectra.
  const std::vector<Tensor>& reference = values.begin()->second;
  for (const auto& [key, got] : values) {
    ASSERT_EQ(got.size(), reference.size()) << key;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(max_abs_diff(got[i], reference[i]), 1e-10) << key << " " << i;
  }
  // NaN input is still refused before any solver sees it.
  WaitPolicy wait("active");
  Tensor bad = sym130.select(0, 0).contiguous();
  bad.index_put_({3, 2}, NAN);
  EXPECT_NE(error_of([&] { ops::eigh(bad); }).find("eigh"), std::string::npos);
  EXPECT_NE(error_of([&] { ops::svdvals(bad); }).find("svd"), std::string::npos);
}

}  // namespace
}  // namespace kiln
