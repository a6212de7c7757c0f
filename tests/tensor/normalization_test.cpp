// The fused layer-norm and batch-norm kernels (ops::layer_norm_* and ops::batch_norm_*) against float64
// references computed here from the inputs' stored values: statistics, output and the three gradients, in
// every float dtype, with and without the affine parameters, on narrow, wide and many rows or channels (layer
// norm's parameter gradients sum over rows in blocks of 64 columns), batch norm in training and eval mode;
// then a large common offset (where E[x^2] - E[x]^2 would cancel), the same bits on any thread count, the
// errors, and the pieces sync_batch_norm is made of (the statistics alone, the input gradient from given sums).
// (The gradient formulas are checked against central differences in tests/autograd/ops_grad_test.cpp.)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "test_util.h"

namespace kiln {
namespace {

struct NormReference {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

NormReference reference(const Tensor& x, const std::vector<double>& w, const std::vector<double>& b,
                    const std::vector<double>& g, double eps) {
  const int64_t m = x.size(0), d = x.size(1);
  std::vector<double> v = test::values(x);
  NormReference r;
  r.dw.assign(static_cast<size_t>(d), 0.0);
  r.db.assign(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const double* row = v.data() + i * d;
    const double* gr = g.data() + i * d;
    double mu = 0, var = 0;
    for (int64_t k = 0; k < d; ++k) mu += row[k];
    mu /= static_cast<double>(d);
    for (int64_t k = 0; k < d; ++k) var += (row[k] - mu) * (row[k] - mu);
    var /= static_cast<double>(d);
    const double rs = 1 / std::sqrt(var + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    double s1 = 0, s2 = 0;
    for (int64_t k = 0; k < d; ++k) {
      const double xhat = (row[k] - mu) * rs, wk = w.empty() ? 1.0 : w[k];
      r.y.push_back(xhat * wk + (b.empty() ? 0.0 : b[k]));
      s1 += gr[k] * wk;
      s2 += gr[k] * wk * xhat;
      r.dw[k] += gr[k] * xhat;
      r.db[k] += gr[k];
    }
    for (int64_t k = 0; k < d; ++k) {
      const double xhat = (row[k] - mu) * rs, wk = w.empty() ? 1.0 : w[k];
      r.dx.push_back(rs * (gr[k] * wk - s1 / d - xhat * s2 / d));
    }
  }
  return r;
}

void check_case(int64_t m, int64_t d, bool affine, DType dtype, std::mt19937& rng, double offset = 0) {
  const std::string what = "layer_norm (" + std::to_string(m) + ", " + std::to_string(d) + ") " +
                           dtype_name(dtype) + (affine ? " affine" : "") +
                           (offset != 0 ? " offset " + std::to_string(offset) : "");
  Tensor x = test::random_tensor({m, d}, dtype, rng, test::Layout::Contiguous, offset - 2, offset + 2);
  Tensor w = affine ? test::random_tensor({d}, dtype, rng, test::Layout::Contiguous, 0.5, 1.5) : Tensor();
  Tensor b = affine ? test::random_tensor({d}, dtype, rng) : Tensor();
  Tensor g = test::random_tensor({m, d}, dtype, rng);
  const double eps = 1e-5;
  NormReference ref = reference(x, affine ? test::values(w) : std::vector<double>{},
                            affine ? test::values(b) : std::vector<double>{}, test::values(g), eps);
  ops::LayerNormForward f = ops::layer_norm_forward(x, w, b, eps);
  // A large common offset costs digits in any precision: x - mean is exact only to the rounding of the mean
  // (about offset units in the last place). 32 of those leave room for the sums of the gradients; a one-pass
  // E[x^2] - E[x]^2 variance misses by far more (2.5% in float at offset 1000).
  const double unit = dtype == kFloat64 ? 1.1e-16 : dtype == kFloat32 ? 6e-8 : 0;
  const double tol = std::max(test::tolerance(dtype), 32 * unit * std::abs(offset));
  const double stat_tol = std::max(dtype == kFloat64 ? 1e-12 : 1e-5, 32 * unit * std::abs(offset));
  test::expect_tensor_near(f.y, ref.y, {m, d}, tol, 2 * tol, what + ": y");
  test::expect_tensor_near(f.mean, ref.mean, {m}, stat_tol, stat_tol * (1 + std::abs(offset)), what + ": mean");
  test::expect_tensor_near(f.rstd, ref.rstd, {m}, stat_tol, stat_tol, what + ": rstd");
  ops::LayerNormBackward r = ops::layer_norm_backward(g, x, f.mean, f.rstd, w, true, affine, affine);
  // dx is a difference of terms of size |g| rstd: an absolute error of a few of their roundings.
  test::expect_tensor_near(r.grad_x, ref.dx, {m, d}, tol, 8 * tol, what + ": dx");
  if (affine) {
    // Sums over m rows: the error grows with the square root of m.
    const double sum_tol = tol * (2 + std::sqrt(static_cast<double>(m)));
    test::expect_tensor_near(r.grad_weight, ref.dw, {d}, tol, sum_tol, what + ": dw");
    test::expect_tensor_near(r.grad_bias, ref.db, {d}, tol, sum_tol, what + ": db");
  } else {
    EXPECT_FALSE(r.grad_weight.defined() || r.grad_bias.defined()) << what;
  }
}

TEST(LayerNormKernel, MatchesFloat64Reference) {
  std::mt19937 rng(8);
  for (DType d : test::kFloatDTypes) {
    check_case(1, 1, true, d, rng);
    check_case(5, 7, false, d, rng);
    check_case(5, 7, true, d, rng);
    check_case(130, 64 * 3 + 5, true, d, rng);
    check_case(2, 1500, true, d, rng);
    check_case(3, 4096, false, d, rng);
  }
}

// x = 1000 + noise: the two-pass variance keeps its digits (E[x^2] - E[x]^2 would lose six of them in float).
TEST(LayerNormKernel, LargeOffset) {
  std::mt19937 rng(9);
  check_case(4, 300, true, kFloat32, rng, 1000.0);
  check_case(4, 300, true, kFloat64, rng, 1e6);
}

TEST(LayerNormKernel, OnlyTheWantedGradients) {
  std::mt19937 rng(10);
  Tensor x = test::random_tensor({4, 6}, kFloat32, rng), w = ones({6}), g = test::random_tensor({4, 6}, kFloat32, rng);
  ops::LayerNormForward f = ops::layer_norm_forward(x, w, {}, 1e-5);
  ops::LayerNormBackward only_w = ops::layer_norm_backward(g, x, f.mean, f.rstd, w, false, true, false);
  EXPECT_FALSE(only_w.grad_x.defined());
  EXPECT_TRUE(only_w.grad_weight.defined());
  EXPECT_FALSE(only_w.grad_bias.defined());
  ops::LayerNormBackward all = ops::layer_norm_backward(g, x, f.mean, f.rstd, w, true, true, true);
  EXPECT_EQ(std::memcmp(only_w.grad_weight.raw_data_ptr(), all.grad_weight.raw_data_ptr(), all.grad_weight.nbytes()), 0);
  // No rows: the parameter gradients are empty sums, zero.
  Tensor none = zeros({0, 6});
  ops::LayerNormForward f0 = ops::layer_norm_forward(none, w, {}, 1e-5);
  ops::LayerNormBackward r0 = ops::layer_norm_backward(zeros({0, 6}), none, f0.mean, f0.rstd, w, true, true, true);
  EXPECT_EQ(r0.grad_x.sizes(), (Shape{0, 6}));
  EXPECT_EQ(r0.grad_weight.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(r0.grad_bias.to_vector<float>(), std::vector<float>(6, 0.0f));
}

TEST(LayerNormKernel, SameBitsOnAnyThreadCount) {
  std::mt19937 rng(11);
  Tensor x = test::random_tensor({500, 200}, kFloat32, rng), g = test::random_tensor({500, 200}, kFloat32, rng);
  Tensor w = test::random_tensor({200}, kFloat32, rng);
  const int threads = get_num_threads();
  std::vector<ops::LayerNormBackward> runs;
  std::vector<Tensor> ys;
  for (int n : {1, std::max(2, threads)}) {
    set_num_threads(n);
    ops::LayerNormForward f = ops::layer_norm_forward(x, w, w, 1e-5);
    ys.push_back(f.y);
    runs.push_back(ops::layer_norm_backward(g, x, f.mean, f.rstd, w, true, true, true));
  }
  set_num_threads(threads);
  auto same = [](const Tensor& a, const Tensor& b) { return std::memcmp(a.raw_data_ptr(), b.raw_data_ptr(), a.nbytes()) == 0; };
  EXPECT_TRUE(same(ys[0], ys[1]));
  EXPECT_TRUE(same(runs[0].grad_x, runs[1].grad_x));
  EXPECT_TRUE(same(runs[0].grad_weight, runs[1].grad_weight));
  EXPECT_TRUE(same(runs[0].grad_bias, runs[1].grad_bias));
}

TEST(LayerNormKernel, Errors) {
  Tensor x = randn({3, 4});
  test::expect_error([&] { ops::layer_norm_forward(x.flatten(), {}, {}, 1e-5); }, {"layer_norm", "(M, D)", "(12)"});
  test::expect_error([&] { ops::layer_norm_forward(x, ones({5}), {}, 1e-5); }, {"layer_norm", "weight", "(4)", "(5)"});
  test::expect_error([&] { ops::layer_norm_forward(x, {}, ones({3}), 1e-5); }, {"layer_norm", "bias", "(4)", "(3)"});
  test::expect_error([&] { ops::layer_norm_forward(x.to(kInt32), {}, {}, 1e-5); }, {"layer_norm", "floating"});
  test::expect_error([&] { ops::layer_norm_forward(x, {}, {}, -1.0); }, {"layer_norm", "eps"});
  ops::LayerNormForward f = ops::layer_norm_forward(x, {}, {}, 1e-5);
  test::expect_error([&] { ops::layer_norm_backward(randn({3, 5}), x, f.mean, f.rstd, {}, true, false, false); },
                     {"layer_norm_backward", "grad_y", "(3, 4)"});
  test::expect_error([&] { ops::layer_norm_backward(randn({3, 4}), x, f.mean.narrow(0, 0, 2), f.rstd, {}, true, false, false); },
                     {"layer_norm_backward", "mean and rstd"});
}

// ---- batch norm ----

struct BnReference {
  std::vector<double> y, mean, var, dx, dw, db;
};

// x, g: (N, C, S) values; w, b: (C) or empty; rm, rv: the running statistics (eval) or empty (training).
BnReference bn_reference(const Tensor& x, const std::vector<double>& w, const std::vector<double>& b,
                         const std::vector<double>& rm, const std::vector<double>& rv, const std::vector<double>& g,
                         double eps, bool training) {
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2), count = n * s;
  std::vector<double> v = test::values(x);
  BnReference r;
  r.y.resize(v.size());
  r.dx.resize(v.size());
  auto at = [&](int64_t i, int64_t ch, int64_t k) { return (i * c + ch) * s + k; };
  for (int64_t ch = 0; ch < c; ++ch) {
    double mu = 0, var = 0;
    if (training) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) mu += v[at(i, ch, k)];
      mu /= static_cast<double>(count);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) var += (v[at(i, ch, k)] - mu) * (v[at(i, ch, k)] - mu);
      var /= static_cast<double>(count);
    } else {
      mu = rm[ch];
      var = rv[ch];
    }
    r.mean.push_back(mu);
    r.var.push_back(var);
    const double rs = 1 / std::sqrt(var + eps), wc = w.empty() ? 1.0 : w[ch], bc = b.empty() ? 0.0 : b[ch];
    double sg = 0, sgx = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) {
        const double xhat = (v[at(i, ch, k)] - mu) * rs;
        r.y[at(i, ch, k)] = xhat * wc + bc;
        sg += g[at(i, ch, k)];
        sgx += g[at(i, ch, k)] * xhat;
      }
    r.dw.push_back(sgx);
    r.db.push_back(sg);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) {
        const double xhat = (v[at(i, ch, k)] - mu) * rs, gi = g[at(i, ch, k)];
        r.dx[at(i, ch, k)] = wc * rs * (training ? gi - sg / count - xhat * sgx / count : gi);
      }
  }
  return r;
}

void check_bn_case(int64_t n, int64_t c, int64_t s, bool affine, bool training, DType dtype, std::mt19937& rng,
                   double offset = 0) {
  const std::string what = "batch_norm (" + std::to_string(n) + ", " + std::to_string(c) + ", " +
                           std::to_string(s) + ") " + dtype_name(dtype) + (affine ? " affine" : "") +
                           (training ? " training" : " eval") + (offset != 0 ? " offset" : "");
  Tensor x = test::random_tensor({n, c, s}, dtype, rng, test::Layout::Contiguous, offset - 2, offset + 2);
  Tensor w = affine ? test::random_tensor({c}, dtype, rng, test::Layout::Contiguous, 0.5, 1.5) : Tensor();
  Tensor b = affine ? test::random_tensor({c}, dtype, rng) : Tensor();
  Tensor rm = test::random_tensor({c}, kFloat32, rng, test::Layout::Contiguous, offset - 0.5, offset + 0.5);
  Tensor rv = test::random_tensor({c}, kFloat32, rng, test::Layout::Contiguous, 0.5, 2);
  Tensor g = test::random_tensor({n, c, s}, dtype, rng);
  const double eps = 1e-5;
  BnReference ref = bn_reference(x, affine ? test::values(w) : std::vector<double>{},
                                 affine ? test::values(b) : std::vector<double>{}, test::values(rm), test::values(rv),
                                 test::values(g), eps, training);
  ops::BatchNormForward f = ops::batch_norm_forward(x, w, b, rm, rv, eps, training);
  const double unit = dtype == kFloat64 ? 1.1e-16 : dtype == kFloat32 ? 6e-8 : 0;
  const double tol = std::max(test::tolerance(dtype), 32 * unit * std::abs(offset));
  const double stat_tol = std::max(dtype == kFloat64 ? 1e-12 : 1e-5, 32 * unit * std::abs(offset));
  test::expect_tensor_near(f.y, ref.y, {n, c, s}, tol, 2 * tol, what + ": y");
  test::expect_tensor_near(f.mean, ref.mean, {c}, stat_tol, stat_tol, what + ": mean");
  test::expect_tensor_near(f.var, ref.var, {c}, stat_tol, stat_tol, what + ": var");
  ops::BatchNormBackward r = ops::batch_norm_backward(g, x, f.mean, f.var, w, eps, training, true, affine, affine);
  test::expect_tensor_near(r.grad_x, ref.dx, {n, c, s}, tol, 8 * tol, what + ": dx");
  if (affine) {
    const double sum_tol = tol * (2 + std::sqrt(static_cast<double>(n * s)));
    test::expect_tensor_near(r.grad_weight, ref.dw, {c}, tol, sum_tol, what + ": dw");
    test::expect_tensor_near(r.grad_bias, ref.db, {c}, tol, sum_tol, what + ": db");
  }
}

TEST(BatchNormKernel, MatchesFloat64Reference) {
  std::mt19937 rng(13);
  for (DType d : test::kFloatDTypes)
    for (bool training : {true, false}) {
      check_bn_case(4, 3, 10, true, training, d, rng);
      check_bn_case(2, 5, 1, false, training, d, rng);  // BatchNorm1d's (N, C)
      check_bn_case(16, 32, 49, true, training, d, rng);
      check_bn_case(3, 1, 1000, true, training, d, rng);
    }
  check_bn_case(8, 4, 300, true, true, kFloat32, rng, 1000.0);
  check_bn_case(8, 4, 300, true, true, kFloat64, rng, 1e6);
}

TEST(BatchNormKernel, Errors) {
  Tensor x = randn({4, 3, 5});
  test::expect_error([&] { ops::batch_norm_forward(randn({4, 3}), {}, {}, {}, {}, 1e-5, true); },
                     {"batch_norm", "(N, C, S)", "(4, 3)"});
  test::expect_error([&] { ops::batch_norm_forward(randn({1, 3, 1}), {}, {}, {}, {}, 1e-5, true); },
                     {"batch_norm", "more than one value"});
  test::expect_error([&] { ops::batch_norm_forward(x, {}, {}, {}, {}, 1e-5, false); },
                     {"batch_norm", "running statistics"});
  test::expect_error([&] { ops::batch_norm_forward(x, ones({4}), {}, {}, {}, 1e-5, true); },
                     {"batch_norm", "weight", "(3)", "(4)"});
  test::expect_error([&] { ops::batch_norm_forward(x, {}, {}, zeros({3}), ones({2}), 1e-5, false); },
                     {"batch_norm", "running_var", "(3)", "(2)"});
  ops::BatchNormForward f = ops::batch_norm_forward(x, {}, {}, {}, {}, 1e-5, true);
  test::expect_error([&] { ops::batch_norm_backward(randn({4, 3, 6}), x, f.mean, f.var, {}, 1e-5, true, true, false, false); },
                     {"batch_norm_backward", "grad_y", "(4, 3, 5)"});
}

// The pieces of a batch norm over several processes: the statistics alone, and the input gradient from sums over
// more rows than the input holds. A batch cut into two shards of rows; each shard's dx from the whole batch's
// statistics and sums must be that rows' part of the whole batch's training-mode dx.
TEST(BatchNormKernel, StatisticsAloneAndInputGradientFromGivenSums) {
  std::mt19937 rng(29);
  for (DType d : test::kFloatDTypes) {
    for (int64_t s : {int64_t{1}, int64_t{70}}) {
      const std::string what = std::string(dtype_name(d)) + " S = " + std::to_string(s);
      const int64_t n = 7, c = 3, n1 = 2;
      Tensor x = test::random_tensor({n, c, s}, d, rng, test::Layout::Contiguous, -2, 3);
      Tensor w = test::random_tensor({c}, d, rng, test::Layout::Contiguous, 0.5, 1.5);
      Tensor g = test::random_tensor({n, c, s}, d, rng);
      BnReference whole = bn_reference(x, test::values(w), {}, {}, {}, test::values(g), 1e-5, true);
      const double tol = test::tolerance(d), stat_tol = d == kFloat64 ? 1e-12 : 1e-5;
      for (auto [start, len] : {std::pair{int64_t{0}, n1}, std::pair{n1, n - n1}}) {
        Tensor xs = x.narrow(0, start, len).contiguous();
        BnReference part = bn_reference(xs, {}, {}, {}, {}, test::values(g.narrow(0, start, len).contiguous()), 1e-5,
                                        true);
        ops::BatchNormStats st = ops::batch_norm_stats(xs);
        test::expect_tensor_near(st.mean, part.mean, {c}, stat_tol, stat_tol, what + ": shard mean");
        test::expect_tensor_near(st.var, part.var, {c}, stat_tol, stat_tol, what + ": shard var");
      }
      const DType sd = d == kFloat64 ? kFloat64 : kFloat32;
      Tensor mean = test::make_tensor(whole.mean, {c}, sd), var = test::make_tensor(whole.var, {c}, sd);
      std::vector<double> sums = whole.db;
      sums.insert(sums.end(), whole.dw.begin(), whole.dw.end());
      std::vector<Tensor> pieces;
      for (auto [start, len] : {std::pair{int64_t{0}, n1}, std::pair{n1, n - n1}})
        pieces.push_back(ops::batch_norm_backward_input(g.narrow(0, start, len), x.narrow(0, start, len), mean, var, w,
                                                        test::make_tensor(sums, {2, c}, kFloat64), n * s, 1e-5));
      test::expect_tensor_near(cat(pieces, 0), whole.dx, {n, c, s}, tol, 8 * tol, what + ": dx from the sums");
    }
  }
  // One value per channel is enough for the statistics, and none gives zeros.
  ops::BatchNormStats one = ops::batch_norm_stats(full({1, 2, 1}, 3.5));
  EXPECT_EQ(test::values(one.mean), (std::vector<double>{3.5, 3.5}));
  EXPECT_EQ(test::values(one.var), (std::vector<double>{0, 0}));
  ops::BatchNormStats none = ops::batch_norm_stats(empty({0, 2, 4}));
  EXPECT_EQ(test::values(none.mean), (std::vector<double>{0, 0}));
  EXPECT_EQ(test::values(none.var), (std::vector<double>{0, 0}));

  Tensor x = randn({4, 3, 5}), m = zeros({3}), v = ones({3});
  test::expect_error([&] { ops::batch_norm_backward_input(randn({4, 3, 5}), x, m, v, {}, zeros({3}), 20, 1e-5); },
                     {"batch_norm_backward_input", "sums", "(2, 3)", "(3)"});
  test::expect_error([&] { ops::batch_norm_backward_input(randn({4, 3, 5}), x, m, v, {}, zeros({2, 3}), 19, 1e-5); },
                     {"batch_norm_backward_input", "count (19)", "20 values"});
  test::expect_error([&] { ops::batch_norm_stats(randn({4, 3})); }, {"batch_norm_stats", "(N, C, S)", "(4, 3)"});
}

}  // namespace
}  // namespace kiln
