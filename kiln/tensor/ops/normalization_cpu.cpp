// CPU kernels of the fused layer and batch norms (the math is in ops/normalization.h), forward then backward.
//
// Layer norm:
// Rows are independent, so the forward and dL/dx give a row to a thread: the mean and the variance are two
// passes in double (the two-pass variance does not cancel the way E[x^2] - E[x]^2 does), then y is written in
// x's op-math type. dL/dw and dL/db sum over rows: a thread takes a block of 64 neighbouring columns and walks
// every row for them, so each sum runs in one fixed order (the same bits on any thread count) and reads
// contiguous memory.
// Batch norm: a thread takes a channel, whose values are N runs of S contiguous ones; its statistics and
// sums are two passes in double, so they too come out the same on any thread count.
// The independent references are the definitions in float64 (tests/tensor/normalization_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr int64_t kColumnBlock = 64;

// x, y: (M, D); w, b: (D) or null; mean, rstd: (M) in opmath_t<T> (float, or double for double).
template <typename T>
void forward_impl(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, double eps) {
  using M = opmath_t<T>;
  using S = M;
  const int64_t m = x.size(0), d = x.size(1);
  const T* px = x.data_ptr<T>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const T* b = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* py = y.data_ptr<T>();
  S* pm = mean.data_ptr<S>();
  S* pr = rstd.data_ptr<S>();
  parallel_for(0, m, std::max<int64_t>(1, kDefaultGrain / d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = px + r * d;
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < d; ++i) sum += static_cast<double>(row[i]);
      const double mu = sum / static_cast<double>(d);
      double sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t i = 0; i < d; ++i) {
        const double c = static_cast<double>(row[i]) - mu;
        sq += c * c;
      }
      const double rs = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
      pm[r] = static_cast<S>(mu);
      pr[r] = static_cast<S>(rs);
      const M mu_m = static_cast<M>(mu), rs_m = static_cast<M>(rs);
      T* out = py + r * d;
      for (int64_t i = 0; i < d; ++i) {
        M v = (static_cast<M>(row[i]) - mu_m) * rs_m;
        if (w != nullptr) v *= static_cast<M>(w[i]);
        if (b != nullptr) v += static_cast<M>(b[i]);
        out[i] = static_cast<T>(v);
      }
    }
  });
}

// grad_x: (M, D) or undefined; grad_weight, grad_bias: (D) or undefined; the rest as the forward's.
template <typename T>
void backward_impl(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_y,
                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  using M = opmath_t<T>;
  using S = M;
  const int64_t m = x.size(0), d = x.size(1);
  const T* px = x.data_ptr<T>();
  const T* pg = grad_y.data_ptr<T>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const S* pm = mean.data_ptr<S>();
  const S* pr = rstd.data_ptr<S>();
  if (grad_x.defined()) {
    T* pdx = grad_x.data_ptr<T>();
    parallel_for(0, m, std::max<int64_t>(1, kDefaultGrain / d), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = px + r * d;
        const T* g = pg + r * d;
        const M mu = static_cast<M>(pm[r]), rs = static_cast<M>(pr[r]);
        double s1 = 0, s2 = 0;  // sum gw, sum gw xhat
#pragma omp simd reduction(+ : s1, s2)
        for (int64_t i = 0; i < d; ++i) {
          const M gw = w != nullptr ? static_cast<M>(g[i]) * static_cast<M>(w[i]) : static_cast<M>(g[i]);
          s1 += static_cast<double>(gw);
          s2 += static_cast<double>(gw) * static_cast<double>((static_cast<M>(row[i]) - mu) * rs);
        }
        const M a = static_cast<M>(s1 / static_cast<double>(d)), c = static_cast<M>(s2 / static_cast<double>(d));
        T* out = pdx + r * d;
        for (int64_t i = 0; i < d; ++i) {
          const M gw = w != nullptr ? static_cast<M>(g[i]) * static_cast<M>(w[i]) : static_cast<M>(g[i]);
          const M xhat = (static_cast<M>(row[i]) - mu) * rs;
          out[i] = static_cast<T>(rs * (gw - a - xhat * c));
        }
      }
    });
  }
  if (!grad_weight.defined() && !grad_bias.defined()) return;
  T* pdw = grad_weight.defined() ? grad_weight.data_ptr<T>() : nullptr;
  T* pdb = grad_bias.defined() ? grad_bias.data_ptr<T>() : nullptr;
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
  parallel_for(0, blocks, std::max<int64_t>(1, kDefaultGrain / (m * kColumnBlock)), [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = blk * kColumnBlock, width = std::min(kColumnBlock, d - c0);
      double sw[kColumnBlock] = {}, sb[kColumnBlock] = {};
      for (int64_t r = 0; r < m; ++r) {
        const T* row = px + r * d + c0;
        const T* g = pg + r * d + c0;
        const M mu = static_cast<M>(pm[r]), rs = static_cast<M>(pr[r]);
        for (int64_t j = 0; j < width; ++j) {
          sw[j] += static_cast<double>(static_cast<M>(g[j]) * ((static_cast<M>(row[j]) - mu) * rs));
          sb[j] += static_cast<double>(g[j]);
        }
      }
      for (int64_t j = 0; j < width; ++j) {
        if (pdw != nullptr) pdw[c0 + j] = static_cast<T>(sw[j]);
        if (pdb != nullptr) pdb[c0 + j] = static_cast<T>(sb[j]);
      }
    }
  });
}

// ---- batch norm ----

// x, y: (N, C, S); w, b: (C) or null; mean, var: (C) in opmath_t<T>, written when training, read otherwise.
template <typename T>
void batch_norm_forward_impl(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps, bool training) {
  using M = opmath_t<T>;
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2), count = n * s;
  const T* px = x.data_ptr<T>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const T* b = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* py = y.data_ptr<T>();
  M* pm = mean.data_ptr<M>();
  M* pv = var.data_ptr<M>();
  parallel_for(0, c, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(count, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      if (training) {
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* run = px + (i * c + ch) * s;
#pragma omp simd reduction(+ : sum)
          for (int64_t k = 0; k < s; ++k) sum += static_cast<double>(run[k]);
        }
        const double mu = sum / static_cast<double>(count);
        double sq = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* run = px + (i * c + ch) * s;
#pragma omp simd reduction(+ : sq)
          for (int64_t k = 0; k < s; ++k) {
            const double d = static_cast<double>(run[k]) - mu;
            sq += d * d;
          }
        }
        pm[ch] = static_cast<M>(mu);
        pv[ch] = static_cast<M>(sq / static_cast<double>(count));
      }
      // y = (x - mean) (rstd w) + b, in M, as on the GPU.
      const M mu = pm[ch];
      const M scale = static_cast<M>(1.0 / std::sqrt(static_cast<double>(pv[ch]) + eps)) *
                      (w != nullptr ? static_cast<M>(w[ch]) : M(1));
      const M shift = b != nullptr ? static_cast<M>(b[ch]) : M(0);
      for (int64_t i = 0; i < n; ++i) {
        const T* run = px + (i * c + ch) * s;
        T* out = py + (i * c + ch) * s;
        for (int64_t k = 0; k < s; ++k) out[k] = static_cast<T>((static_cast<M>(run[k]) - mu) * scale + shift);
      }
    }
  });
}

// grad_x: (N, C, S) or undefined; grad_weight, grad_bias: (C) or undefined; the rest as the forward's.
template <typename T>
void batch_norm_backward_impl(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                              const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                              const Tensor& weight, double eps, bool training) {
  using M = opmath_t<T>;
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2), count = n * s;
  const T* px = x.data_ptr<T>();
  const T* pg = grad_y.data_ptr<T>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const M* pm = mean.data_ptr<M>();
  const M* pv = var.data_ptr<M>();
  T* pdx = grad_x.defined() ? grad_x.data_ptr<T>() : nullptr;
  T* pdw = grad_weight.defined() ? grad_weight.data_ptr<T>() : nullptr;
  T* pdb = grad_bias.defined() ? grad_bias.data_ptr<T>() : nullptr;
  parallel_for(0, c, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(count, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      const M mu = pm[ch];
      const M rstd = static_cast<M>(1.0 / std::sqrt(static_cast<double>(pv[ch]) + eps));
      double sg = 0, sgc = 0;  // sum g, sum g (x - mean)
      for (int64_t i = 0; i < n; ++i) {
        const T* run = px + (i * c + ch) * s;
        const T* g = pg + (i * c + ch) * s;
#pragma omp simd reduction(+ : sg, sgc)
        for (int64_t k = 0; k < s; ++k) {
          sg += static_cast<double>(g[k]);
          sgc += static_cast<double>(g[k]) * static_cast<double>(static_cast<M>(run[k]) - mu);
        }
      }
      const double sgx = sgc * static_cast<double>(rstd);  // sum g xhat
      if (pdw != nullptr) pdw[ch] = static_cast<T>(sgx);
      if (pdb != nullptr) pdb[ch] = static_cast<T>(sg);
      if (pdx == nullptr) continue;
      const M wr = rstd * (w != nullptr ? static_cast<M>(w[ch]) : M(1));
      const M mg = training ? static_cast<M>(sg / static_cast<double>(count)) : M(0);
      const M mgx = training ? static_cast<M>(sgx / static_cast<double>(count)) : M(0);
      for (int64_t i = 0; i < n; ++i) {
        const T* run = px + (i * c + ch) * s;
        const T* g = pg + (i * c + ch) * s;
        T* out = pdx + (i * c + ch) * s;
        for (int64_t k = 0; k < s; ++k) {
          const M xhat = (static_cast<M>(run[k]) - mu) * rstd;
          out[k] = static_cast<T>(wr * (static_cast<M>(g[k]) - mg - xhat * mgx));
        }
      }
    }
  });
}

void layer_norm_cpu(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                    const Tensor& bias, double eps) {
  visit_dtype<kFloatingSet>(x.dtype(), "layer_norm", [&]<typename T>() {
    forward_impl<T>(y, mean, rstd, x, weight, bias, eps);
  });
}

void layer_norm_backward_cpu(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                             const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                             const Tensor& weight) {
  visit_dtype<kFloatingSet>(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    backward_impl<T>(grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight);
  });
}

void batch_norm_cpu(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& x, const Tensor& weight,
                    const Tensor& bias, double eps, bool training) {
  visit_dtype<kFloatingSet>(x.dtype(), "batch_norm", [&]<typename T>() {
    batch_norm_forward_impl<T>(y, mean, var, x, weight, bias, eps, training);
  });
}

void batch_norm_backward_cpu(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                             const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                             const Tensor& weight, double eps, bool training) {
  visit_dtype<kFloatingSet>(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    batch_norm_backward_impl<T>(grad_x, grad_weight, grad_bias, grad_y, x, mean, var, weight, eps, training);
  });
}

}  // namespace

namespace detail {
void register_normalization_cpu_kernels() {
  register_kernel<Op::layer_norm>(DeviceType::CPU, layer_norm_cpu);
  register_kernel<Op::layer_norm_backward>(DeviceType::CPU, layer_norm_backward_cpu);
  register_kernel<Op::batch_norm>(DeviceType::CPU, batch_norm_cpu);
  register_kernel<Op::batch_norm_backward>(DeviceType::CPU, batch_norm_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
