#include "kiln/nn/init.h"

#include <algorithm>
#include <cmath>

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

}  // namespace kiln::nn::init
