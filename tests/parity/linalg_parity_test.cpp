// kiln::linalg against torch.linalg on the same float64 inputs: values, and the gradient of a random probe
// dotted with each output. Outputs whose signs are arbitrary (eigenvectors, singular vectors, Q's columns) are
// compared through quantities that do not depend on them, since the two libraries' solvers need not pick the
// same signs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

Tensor eye_as(const Tensor& x) { return eye(x.size(-1), x.size(-1), kFloat64).expand(x.sizes()).contiguous(); }
torch::Tensor eye_as(const torch::Tensor& x) { return torch::eye(x.size(-1), torch::kDouble).expand(x.sizes()); }

TEST(LinalgParity, FactorizationsAndTheirGradientsMatchLibTorch) {
  const Tensor x = test::randn64({2, 4, 4}, 11), b = test::randn64({2, 4, 3}, 12), wide = test::randn64({2, 3, 5}, 13);
  using T = const std::vector<Tensor>&;
  using TT = const std::vector<torch::Tensor>&;
  auto spd = [](const auto& m) { return m.matmul(m.mT()) + 4.0 * eye_as(m); };
  auto sym = [](const auto& m) { return (m + m.mT()) * 0.5; };
  expect_parity({x}, [&](T in) { return linalg::cholesky(spd(in[0])); },
                [&](TT in) { return torch::linalg_cholesky(spd(in[0])); }, 1e-12, "cholesky", 1);
  expect_parity({x, b}, [&](T in) { return linalg::solve(in[0] + 3.0 * eye_as(in[0]), in[1]); },
                [&](TT in) { return torch::linalg_solve(in[0] + 3.0 * eye_as(in[0]), in[1]); }, 1e-11, "solve", 2);
  expect_parity({x, b},
                [&](T in) { return linalg::solve_triangular(in[0] + 3.0 * eye_as(in[0]), in[1], /*upper=*/true); },
                [&](TT in) {
                  return torch::linalg_solve_triangular(in[0] + 3.0 * eye_as(in[0]), in[1], /*upper=*/true);
                },
                1e-11, "solve_triangular", 3);
  expect_parity({x}, [&](T in) { return linalg::inv(in[0] + 3.0 * eye_as(in[0])); },
                [&](TT in) { return torch::linalg_inv(in[0] + 3.0 * eye_as(in[0])); }, 1e-11, "inv", 4);
  expect_parity({x}, [&](T in) { return linalg::det(in[0]); }, [&](TT in) { return torch::linalg_det(in[0]); },
                1e-11, "det", 5);
  expect_parity({x}, [&](T in) { return linalg::slogdet(in[0]).logabsdet; },
                [&](TT in) { return std::get<1>(torch::linalg_slogdet(in[0])); }, 1e-11, "slogdet", 6);
  expect_parity({x}, [&](T in) { return linalg::eigvalsh(sym(in[0])); },
                [&](TT in) { return torch::linalg_eigvalsh(sym(in[0])); }, 1e-11, "eigvalsh", 7);
  // v diag(f(w)) v^T does not depend on the eigenvectors' signs.
  expect_parity({x},
                [&](T in) {
                  auto [w, v] = linalg::eigh(sym(in[0]));
                  return matmul(v * exp(w).unsqueeze(-2), v.mT());
                },
                [&](TT in) {
                  auto [w, v] = torch::linalg_eigh(sym(in[0]));
                  return (v * w.exp().unsqueeze(-2)).matmul(v.mT());
                },
                1e-10, "eigh", 8);
  expect_parity({wide}, [&](T in) { return linalg::svdvals(in[0]); },
                [&](TT in) { return torch::linalg_svdvals(in[0]); }, 1e-11, "svdvals", 9);
  expect_parity({wide},
                [&](T in) {
                  auto [u, s, vh] = linalg::svd(in[0], false);
                  return matmul(u * (s * s).unsqueeze(-2), vh);
                },
                [&](TT in) {
                  auto [u, s, vh] = torch::linalg_svd(in[0], false);
                  return (u * (s * s).unsqueeze(-2)).matmul(vh);
                },
                1e-10, "svd", 10);
  // Q R with |R|: the signs of R's rows (and Q's columns) are the factorization's choice.
  expect_parity({x.narrow(-1, 0, 3).contiguous()}, [&](T in) { return abs(linalg::qr(in[0]).R); },
                [&](TT in) { return std::get<1>(torch::linalg_qr(in[0])).abs(); }, 1e-11, "qr", 11);
}

TEST(LinalgParity, CompositesMatchLibTorch) {
  const Tensor tall = test::randn64({2, 5, 3}, 21), rhs = test::randn64({2, 5, 2}, 22), x = test::randn64({3, 3}, 23);
  using T = const std::vector<Tensor>&;
  using TT = const std::vector<torch::Tensor>&;
  expect_parity({tall}, [](T in) { return linalg::pinv(in[0]); }, [](TT in) { return torch::linalg_pinv(in[0]); },
                1e-11, "pinv", 31);
  expect_parity({tall, rhs}, [](T in) { return linalg::lstsq(in[0], in[1]).solution; },
                [](TT in) { return std::get<0>(torch::linalg_lstsq(in[0], in[1])); }, 1e-11, "lstsq", 32);
  expect_parity({tall}, [](T in) { return linalg::matrix_norm(in[0], "nuc"); },
                [](TT in) { return torch::linalg_matrix_norm(in[0], "nuc"); }, 1e-11, "matrix_norm nuc", 33);
  const double inf = std::numeric_limits<double>::infinity();
  for (double ord : {2.0, -2.0, 1.0, -1.0, inf, -inf})
    expect_parity({tall}, [ord](T in) { return linalg::matrix_norm(in[0], ord); },
                  [ord](TT in) { return torch::linalg_matrix_norm(in[0], ord); }, 1e-11,
                  "matrix_norm " + std::to_string(ord), 34);
  expect_parity({x}, [](T in) { return linalg::cond(in[0]); }, [](TT in) { return torch::linalg_cond(in[0]); },
                1e-10, "cond", 35);
  expect_parity({x}, [](T in) { return linalg::matrix_power(in[0] + 3.0 * eye_as(in[0]), -3); },
                [](TT in) { return torch::linalg_matrix_power(in[0] + 3.0 * eye_as(in[0]), -3); }, 1e-11,
                "matrix_power", 36);
  expect_parity({x, rhs.select(0, 0).narrow(0, 0, 3).contiguous()},
                [](T in) {
                  return linalg::cholesky_solve(in[1], linalg::cholesky(in[0].matmul(in[0].mT()) + eye_as(in[0])));
                },
                [](TT in) {
                  return torch::cholesky_solve(in[1], torch::linalg_cholesky(in[0].matmul(in[0].mT()) + eye_as(in[0])));
                },
                1e-11, "cholesky_solve", 37);
  const Tensor rank2 = test::randn64({4, 2}, 38).matmul(test::randn64({2, 5}, 39));
  EXPECT_EQ(linalg::matrix_rank(rank2).item<int64_t>(), torch::linalg_matrix_rank(to_torch(rank2)).item<int64_t>());
}

}  // namespace
}  // namespace kiln::parity
