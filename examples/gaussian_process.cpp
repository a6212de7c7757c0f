// Gaussian-process regression with kiln::linalg: the hyperparameters of an RBF kernel (length scale, signal
// and noise standard deviations) fitted by Adam on the negative log marginal likelihood of the data,
//
//   nll = 1/2 y^T K^-1 y + 1/2 log det K + n/2 log(2 pi),   K_ij = s^2 exp(-(x_i - x_j)^2 / (2 l^2)) + noise^2 [i = j],
//
// with K = L L^T: K^-1 y by cholesky_solve, log det K = 2 sum(log diag L). Autograd differentiates through the
// Cholesky factorization and both triangular solves. The fitted process then predicts y at new points:
// mean = K(x*, x) K^-1 y.
//
// Data: y = sin(3x) + 0.1 N(0, 1) at 60 points drawn from [-2, 2]; the test points cover [-2, 2] without noise.
// The starting guess (l = 1, s = 1, noise = 0.5) is too smooth and too noisy. It prints the likelihood and the
// test error before and after fitting, and exits non-zero unless fitting improved both (CTest runs it).
//
//   ./build/examples/gaussian_process [steps]
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>

using namespace kiln;

namespace {

struct Hyper {
  Tensor log_length, log_signal, log_noise;  // logs, so that Adam's steps keep each positive
};

// K(a, b) for 1-D inputs a (p, 1) and b (q, 1): (p, q).
Tensor rbf(const Tensor& a, const Tensor& b, const Hyper& h) {
  const Tensor d2 = (a - b.t()).pow(2);
  return exp(2.0 * h.log_signal) * exp(-d2 / (2.0 * exp(2.0 * h.log_length)));
}

Tensor covariance(const Tensor& x, const Hyper& h) {
  return rbf(x, x, h) + exp(2.0 * h.log_noise) * eye(x.size(0), x.size(0), kFloat64);
}

Tensor negative_log_likelihood(const Tensor& x, const Tensor& y, const Hyper& h) {
  const Tensor l = linalg::cholesky(covariance(x, h));
  const Tensor alpha = linalg::cholesky_solve(y, l);  // K^-1 y
  const double n = static_cast<double>(x.size(0));
  return 0.5 * (y * alpha).sum() + l.diagonal(0, -2, -1).log().sum() + 0.5 * n * std::log(2.0 * std::numbers::pi);
}

double test_rmse(const Tensor& x, const Tensor& y, const Tensor& xt, const Tensor& yt, const Hyper& h) {
  NoGradGuard no_grad;
  const Tensor alpha = linalg::cholesky_solve(y, linalg::cholesky(covariance(x, h)));
  const Tensor mean = matmul(rbf(xt, x, h), alpha);
  return std::sqrt((mean - yt).pow(2).mean().item<double>());
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 150;
  manual_seed(0);
  const int64_t n = 60, m = 200;
  const Tensor x = rand({n, 1}, kFloat64) * 4.0 - 2.0;
  const Tensor y = sin(3.0 * x) + 0.1 * randn({n, 1}, kFloat64);
  const Tensor xt = linspace(-2.0, 2.0, m, kFloat64).unsqueeze(1);
  const Tensor yt = sin(3.0 * xt);

  Hyper h{full({}, std::log(1.0), kFloat64).requires_grad_(), full({}, std::log(1.0), kFloat64).requires_grad_(),
          full({}, std::log(0.5), kFloat64).requires_grad_()};
  auto report = [&](const char* when) {
    const double nll = negative_log_likelihood(x, y, h).item<double>(), rmse = test_rmse(x, y, xt, yt, h);
    std::printf("%-7s nll %8.3f   test rmse %.4f   length %.3f  signal %.3f  noise %.4f\n", when, nll, rmse,
                std::exp(h.log_length.item<double>()), std::exp(h.log_signal.item<double>()),
                std::exp(h.log_noise.item<double>()));
    return std::pair{nll, rmse};
  };
  const auto [nll0, rmse0] = report("before");
  optim::Adam opt({h.log_length, h.log_signal, h.log_noise}, {.lr = 0.05});
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    negative_log_likelihood(x, y, h).backward();
    opt.step();
  }
  const auto [nll1, rmse1] = report("after");
  const bool improved = nll1 < nll0 && rmse1 < rmse0;
  std::printf("%s\n", improved ? "fitting improved the likelihood and the test error"
                               : "FAILED: fitting did not improve both the likelihood and the test error");
  return improved ? 0 : 1;
}
