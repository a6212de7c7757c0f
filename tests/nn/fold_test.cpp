// unfold (im2col), fold and local_response_norm against float64 loops written from PyTorch's definitions:
// column entry (c kh kw + u kw + v, i OW + j) is x at (i sh - ph + u dh, j sw - pw + v dw), zero outside; fold adds
// each entry back there; the response norm divides by (k + alpha / size * the window's sum of squares)^beta.
// fold is also checked as unfold's adjoint, and both by gradcheck.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::randn64;
namespace F = nn::functional;

struct Blocks {
  int64_t H, W, kh, kw, dh, dw, ph, pw, sh, sw;
  int64_t oh() const { return (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

// Visits every (column row, block, image position) of the geometry: fn(row, block, y, z), with (y, z) in the
// unpadded image or skipped.
template <class Fn>
void for_each_entry(const Blocks& g, int64_t C, Fn fn) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t u = 0; u < g.kh; ++u)
      for (int64_t v = 0; v < g.kw; ++v)
        for (int64_t i = 0; i < g.oh(); ++i)
          for (int64_t j = 0; j < g.ow(); ++j) {
            const int64_t y = i * g.sh - g.ph + u * g.dh, z = j * g.sw - g.pw + v * g.dw;
            if (y < 0 || y >= g.H || z < 0 || z >= g.W) continue;
            fn(c, (c * g.kh + u) * g.kw + v, i * g.ow() + j, y, z);
          }
}

TEST(Unfold, FoldAndUnfoldMatchTheDefinitionAndAreAdjoint) {
  const std::vector<Blocks> cases = {
      {5, 6, 2, 3, 1, 1, 0, 0, 1, 1}, {6, 5, 3, 3, 1, 1, 1, 1, 2, 2}, {7, 7, 2, 2, 2, 3, 1, 0, 1, 2},
      {4, 6, 1, 3, 1, 1, 0, 2, 3, 1}};
  uint64_t seed = 800;
  for (const Blocks& g : cases) {
    SCOPED_TRACE(::testing::Message() << g.H << "x" << g.W << " k" << g.kh << "x" << g.kw);
    const int64_t N = 2, C = 3, K = g.kh * g.kw, L = g.oh() * g.ow();
    const F::Pair k{g.kh, g.kw}, d{g.dh, g.dw}, p{g.ph, g.pw}, s{g.sh, g.sw};
    const Tensor x = randn64({N, C, g.H, g.W}, seed++), cols = randn64({N, C * K, L}, seed++);
    const Tensor u = F::unfold(x, k, d, p, s);
    ASSERT_EQ(u.sizes(), (Shape{N, C * K, L}));
    const Tensor f = F::fold(cols, {g.H, g.W}, k, d, p, s);
    ASSERT_EQ(f.sizes(), (Shape{N, C, g.H, g.W}));
    const std::vector<double> xv = x.to_vector<double>(), cv = cols.to_vector<double>();
    std::vector<double> want_u(static_cast<size_t>(N * C * K * L), 0.0), want_f(xv.size(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for_each_entry(g, C, [&](int64_t c, int64_t row, int64_t block, int64_t y, int64_t z) {
        const size_t at_image = static_cast<size_t>(((n * C + c) * g.H + y) * g.W + z);
        const size_t at_column = static_cast<size_t>((n * C * K + row) * L + block);
        want_u[at_column] = xv[at_image];
        want_f[at_image] += cv[at_column];
      });
    EXPECT_EQ(u.to_vector<double>(), want_u);
    const std::vector<double> fv = f.to_vector<double>();
    for (size_t i = 0; i < fv.size(); ++i) EXPECT_NEAR(fv[i], want_f[i], 1e-14) << i;
    // <unfold(x), cols> = <x, fold(cols)>
    EXPECT_NEAR((u * cols).sum().item<double>(), (x * f).sum().item<double>(), 1e-12);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::unfold(t[0], k, d, p, s); },
                          {x.detach().requires_grad_()}).ok);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::fold(t[0], {g.H, g.W}, k, d, p, s); },
                          {cols.detach().requires_grad_()}).ok);
  }
  // Unbatched forms, the modules, and the errors.
  const Tensor x = randn64({2, 4, 4}, 820);
  EXPECT_EQ(F::unfold(x, 2).to_vector<double>(), F::unfold(x.unsqueeze(0), 2).squeeze(0).to_vector<double>());
  auto unfold = nn::Unfold(2, {.stride = 2});
  auto fold = nn::Fold(F::Pair(4, 4), 2, {.stride = 2});
  EXPECT_EQ(fold(unfold(x.unsqueeze(0))).to_vector<double>(), x.unsqueeze(0).to_vector<double>());  // no overlap
  EXPECT_EQ(unfold->str(), "Unfold(kernel_size=(2, 2), dilation=(1, 1), padding=(0, 0), stride=(2, 2))");
  expect_error([&] { F::fold(randn64({1, 7, 9}, 1), {4, 4}, 2); }, {"fold", "7 rows", "2 x 2"});
  expect_error([&] { F::fold(randn64({1, 8, 8}, 1), {4, 4}, 2); }, {"fold", "3 x 3 blocks", "(1, 8, 8)", "8"});
  expect_error([&] { F::unfold(randn64({1, 1, 2, 2}, 1), 3); }, {"unfold", "(1, 1, 2, 2)"});
}

TEST(LocalResponseNorm, MatchesTheDefinitionAndGradchecks) {
  for (int64_t size : {1, 2, 3, 4}) {
    SCOPED_TRACE(size);
    const Tensor x = randn64({2, 5, 3, 2}, 830 + static_cast<uint64_t>(size));
    const double alpha = 0.3, beta = 0.75, k = 2.0;
    const Tensor y = F::local_response_norm(x, size, alpha, beta, k);
    const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
    const int64_t C = 5, S = 6;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < S; ++q) {
          double sum = 0;
          for (int64_t j = c - size / 2; j <= c + (size - 1) / 2; ++j)
            if (j >= 0 && j < C) sum += std::pow(xv[static_cast<size_t>((n * C + j) * S + q)], 2);
          const double v = xv[static_cast<size_t>((n * C + c) * S + q)];
          EXPECT_NEAR(yv[static_cast<size_t>((n * C + c) * S + q)],
                      v / std::pow(k + alpha / static_cast<double>(size) * sum, beta), 1e-14);
        }
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::local_response_norm(t[0], size, alpha, beta, k); },
                          {x.detach().requires_grad_()}).ok);
  }
  auto lrn = nn::LocalResponseNorm(2);
  EXPECT_EQ(lrn(randn64({1, 3, 4}, 1)).sizes(), (Shape{1, 3, 4}));
  EXPECT_EQ(lrn->str(), "LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1)");
  expect_error([] { F::local_response_norm(randn64({2, 3}, 1), 2); }, {"local_response_norm", "(2, 3)"});
}

}  // namespace
}  // namespace kiln
