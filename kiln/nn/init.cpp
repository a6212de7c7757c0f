#include "kiln/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::nn::init {

namespace {
// Writes `values` (same shape) into w, without recording.
void assign(const Tensor& w, const Tensor& values) {
  autograd::NoGradGuard no_grad;
  ops::copy_(w, values);
}
Tensor fresh_like(const Tensor& w) { return empty(w.sizes(), TensorOptions(w.dtype()).device(w.device())); }

// The inverse of the standard normal CDF (Acklam's rational approximation refined by one Halley step: about
// 1e-15 relative error), for trunc_normal_.
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double q, x;
  if (p < 0.02425) {
    q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    q = p - 0.5;
    double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;  // Halley refinement
  double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}
}  // namespace

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  KILN_CHECK(w.dim() >= 2, "init: fan in and fan out need a weight of at least 2 dims, got shape ",
             shape_str(w.sizes()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "sigmoid" || nonlinearity.rfind("conv", 0) == 0) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  detail::throw_error(detail::concat("calculate_gain: unknown nonlinearity \"", nonlinearity,
                                     "\" (linear, conv1d, conv2d, sigmoid, tanh, relu, leaky_relu, selu)"));
}

void uniform_(const Tensor& w, double a, double b, Generator* gen) {
  Tensor v = fresh_like(w);
  kiln::uniform_(v, a, b, gen);
  assign(w, v);
}

void normal_(const Tensor& w, double mean, double std, Generator* gen) {
  Tensor v = fresh_like(w);
  kiln::normal_(v, mean, std, gen);
  assign(w, v);
}

void constant_(const Tensor& w, double value) {
  autograd::NoGradGuard no_grad;
  ops::fill_(w, value);
}
void zeros_(const Tensor& w) { constant_(w, 0.0); }
void ones_(const Tensor& w) { constant_(w, 1.0); }

namespace {
int64_t fan_for(const Tensor& w, const std::string& mode) {
  auto [fan_in, fan_out] = fans(w);
  KILN_CHECK(mode == "fan_in" || mode == "fan_out", "kaiming init: mode must be \"fan_in\" or \"fan_out\", got \"",
             mode, "\"");
  return mode == "fan_in" ? fan_in : fan_out;
}
}  // namespace

void kaiming_uniform_(const Tensor& w, double a, const std::string& mode, const std::string& nonlinearity,
                      Generator* gen) {
  double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / static_cast<double>(fan_for(w, mode)));
  uniform_(w, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& w, double a, const std::string& mode, const std::string& nonlinearity,
                     Generator* gen) {
  double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan_for(w, mode)));
  normal_(w, 0.0, std, gen);
}

void xavier_uniform_(const Tensor& w, double gain, Generator* gen) {
  auto [fan_in, fan_out] = fans(w);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  uniform_(w, -bound, bound, gen);
}

void xavier_normal_(const Tensor& w, double gain, Generator* gen) {
  auto [fan_in, fan_out] = fans(w);
  normal_(w, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

void trunc_normal_(const Tensor& w, double mean, double std, double a, double b, Generator* gen) {
  KILN_CHECK(a < b && std > 0, "trunc_normal_: need a < b and std > 0, got a=", a, " b=", b, " std=", std);
  // A uniform draw between the CDF values of a and b, mapped back through the inverse CDF: exact truncation.
  auto cdf = [](double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); };
  double lo = cdf((a - mean) / std), hi = cdf((b - mean) / std);
  Tensor u = empty(w.sizes(), TensorOptions(kFloat64));
  kiln::uniform_(u, lo, hi, gen);
  double* p = u.data_ptr<double>();
  for (int64_t i = 0; i < u.numel(); ++i)
    p[i] = std::clamp(mean + std * normal_quantile(std::clamp(p[i], 1e-300, 1 - 1e-16)), a, b);
  assign(w, u);
}

namespace {
// The Q of a Householder QR of a (m, n) row-major matrix a, m >= n: the reduced (m, n) Q, column j multiplied by
// the sign of R[j][j]. That sign fix makes the factorization the one with a positive diagonal R, which is unique,
// so Q no longer depends on the QR routine's own sign conventions (LAPACK's or this one).
std::vector<double> householder_q(std::vector<double> a, int64_t m, int64_t n) {
  std::vector<std::vector<double>> reflectors(static_cast<size_t>(n));  // v_k, unit, over rows k..m-1
  std::vector<double> r_diag(static_cast<size_t>(n));
  auto at = [&](std::vector<double>& x, int64_t i, int64_t j) -> double& { return x[static_cast<size_t>(i * n + j)]; };
  for (int64_t k = 0; k < n; ++k) {
    std::vector<double>& v = reflectors[static_cast<size_t>(k)];
    v.resize(static_cast<size_t>(m - k));
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += at(a, i, k) * at(a, i, k);
    norm = std::sqrt(norm);
    // Reflect column k onto alpha e_k with alpha of the sign opposite to its first entry: v's first entry
    // is then a sum of like-signed terms, never a cancellation.
    double alpha = at(a, k, k) >= 0 ? -norm : norm;
    for (int64_t i = k; i < m; ++i) v[static_cast<size_t>(i - k)] = at(a, i, k);
    v[0] -= alpha;
    double v_norm = 0;
    for (double e : v) v_norm += e * e;
    v_norm = std::sqrt(v_norm);
    r_diag[static_cast<size_t>(k)] = alpha;
    if (v_norm == 0) {  // column already zero below and on the diagonal: no reflection
      std::fill(v.begin(), v.end(), 0.0);
      continue;
    }
    for (double& e : v) e /= v_norm;
    for (int64_t j = k; j < n; ++j) {  // a[k:, j] -= 2 v (v . a[k:, j])
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[static_cast<size_t>(i - k)] * at(a, i, j);
      for (int64_t i = k; i < m; ++i) at(a, i, j) -= 2 * dot * v[static_cast<size_t>(i - k)];
    }
  }
  // Q = H_0 H_1 ... H_{n-1} applied to the first n columns of the identity, the last reflector first.
  std::vector<double> q(static_cast<size_t>(m * n), 0.0);
  for (int64_t j = 0; j < n; ++j) at(q, j, j) = 1.0;
  for (int64_t k = n - 1; k >= 0; --k) {
    const std::vector<double>& v = reflectors[static_cast<size_t>(k)];
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[static_cast<size_t>(i - k)] * at(q, i, j);
      for (int64_t i = k; i < m; ++i) at(q, i, j) -= 2 * dot * v[static_cast<size_t>(i - k)];
    }
  }
  // NOTE: PyTorch multiplies by sign(R[j][j]), which zeroes the column when R[j][j] == 0 (a rank-deficient
  // draw, probability zero); here such a column keeps its sign.
  for (int64_t j = 0; j < n; ++j)
    if (r_diag[static_cast<size_t>(j)] < 0)
      for (int64_t i = 0; i < m; ++i) at(q, i, j) = -at(q, i, j);
  return q;
}
}  // namespace

void orthogonal_(const Tensor& w, double gain, Generator* gen) {
  KILN_CHECK(w.dim() >= 2, "orthogonal_: only tensors with 2 or more dims are supported, got shape ",
             shape_str(w.sizes()));
  if (w.numel() == 0) return;
  const int64_t rows = w.size(0), cols = w.numel() / rows;
  // QR needs a matrix at least as tall as wide: a wide one is factored transposed and Q transposed back.
  const bool wide = rows < cols;
  const int64_t m = wide ? cols : rows, n = wide ? rows : cols;
  Tensor draw = empty({rows, cols}, TensorOptions(kFloat64));
  kiln::normal_(draw, 0.0, 1.0, gen);
  std::vector<double> q = householder_q((wide ? draw.t() : draw).contiguous().to_vector<double>(), m, n);
  for (double& e : q) e *= gain;
  Tensor result = tensor(q, {m, n}, TensorOptions(kFloat64));
  if (wide) result = result.t();
  assign(w, result.reshape(w.sizes()));
}

}  // namespace kiln::nn::init
