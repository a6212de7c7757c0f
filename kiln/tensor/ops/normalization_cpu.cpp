// CPU kernels of the fused layer and batch norms (the math is in ops/normalization.h), forward then backward.
//
// Layer norm:
// Rows are independent, so the forward and dL/dx give a row to a thread: the mean and the variance are two
// passes in double (the two-pass variance does not cancel the way E[x^2] - E[x]^2 does), then y is written in
// x's op-math type. dL/dw and dL/db sum over rows: a thread takes a block of 64 neighbouring columns and walks
// every row for them, so each sum runs in one fixed order (the same bits on any thread count) and reads
// contiguous memory.
// Batch norm: per-channel sums in double (channel_sums below: a channel per thread for long runs of values,
// blocks of columns for short ones), each in one fixed order, so they too come out the same on any thread
// count; y and dx element-wise.
// The independent references are the definitions in float64 (tests/tensor/normalization_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

// The values of channel ch of x (N, C, S) are N runs of S contiguous ones, run i at (i C + ch) S. Two layouts
// of the work, by run length:
//   long runs (S >= 64): a thread takes a channel and walks its runs, each a contiguous loop;
//   short runs (BatchNorm1d's S = 1 above all), where that walk would read one value per cache line: x is
//   seen as rows (N, C S), and the per-channel quantities are spread over the C S columns first
//   (column j belongs to channel j / S), so every inner loop runs along a contiguous row.
// Sums are in double and in one fixed order either way (the same bits on any thread count).

// What channel_sums adds over a channel's values (center: the channel's mean, or nothing).
enum class BnSum {
  kValues,   // a: x
  kSquares,  // a: (x - center)^2
  kGrad,     // a: g, b: g (x - center)
};

// One contiguous stretch of n values: a and b gain its terms. Plain loops over the raw types, each a
// `omp simd` reduction GCC vectorizes (through a lambda it did not: the sums ran as scalar adds).
template <BnSum kWhat, typename T>
KILN_INLINE void add_run(const T* x, const T* g, int64_t n, double center, double& a_out, double& b_out) {
  double a = 0, b = 0;
  if constexpr (kWhat == BnSum::kValues) {
#pragma omp simd reduction(+ : a)
    for (int64_t k = 0; k < n; ++k) a += static_cast<double>(x[k]);
  } else if constexpr (kWhat == BnSum::kSquares) {
#pragma omp simd reduction(+ : a)
    for (int64_t k = 0; k < n; ++k) {
      const double d = static_cast<double>(x[k]) - center;
      a += d * d;
    }
  } else {
#pragma omp simd reduction(+ : a, b)
    for (int64_t k = 0; k < n; ++k) {
      const double gv = static_cast<double>(g[k]);
      a += gv;
      b += gv * (static_cast<double>(x[k]) - center);
    }
  }
  a_out += a;
  b_out += b;
}

// Per-channel sums over x (and g) of (N, C, S): sum_a[ch], sum_b[ch] as kWhat says.
template <BnSum kWhat, typename T>
void channel_sums(const T* x, const T* g, int64_t n, int64_t c, int64_t s, const std::vector<double>& center,
                  std::vector<double>& sum_a, std::vector<double>& sum_b) {
  sum_a.assign(static_cast<size_t>(c), 0.0);
  sum_b.assign(static_cast<size_t>(c), 0.0);
  if (s >= kColumnBlock) {
    parallel_for(0, c, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n * s, 1)), [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        double a = 0, b = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t off = (i * c + ch) * s;
          add_run<kWhat>(x + off, g != nullptr ? g + off : nullptr, s, center[ch], a, b);
        }
        sum_a[ch] = a;
        sum_b[ch] = b;
      }
    });
    return;
  }
  const int64_t width = c * s, blocks = (width + kColumnBlock - 1) / kColumnBlock;
  std::vector<double> col_a(static_cast<size_t>(width)), col_b(static_cast<size_t>(width));
  parallel_for(0, blocks, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n * kColumnBlock, 1)),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t blk = b0; blk < b1; ++blk) {
                   const int64_t j0 = blk * kColumnBlock, w = std::min(kColumnBlock, width - j0);
                   double a[kColumnBlock] = {}, b[kColumnBlock] = {}, m[kColumnBlock] = {};
                   for (int64_t j = 0; j < w; ++j) m[j] = center[(j0 + j) / s];
                   for (int64_t i = 0; i < n; ++i) {
                     const T* xr = x + i * width + j0;
                     const T* gr = g != nullptr ? g + i * width + j0 : nullptr;
                     if constexpr (kWhat == BnSum::kValues) {
#pragma omp simd
                       for (int64_t j = 0; j < w; ++j) a[j] += static_cast<double>(xr[j]);
                     } else if constexpr (kWhat == BnSum::kSquares) {
#pragma omp simd
                       for (int64_t j = 0; j < w; ++j) {
                         const double d = static_cast<double>(xr[j]) - m[j];
                         a[j] += d * d;
                       }
                     } else {
#pragma omp simd
                       for (int64_t j = 0; j < w; ++j) {
                         const double gv = static_cast<double>(gr[j]);
                         a[j] += gv;
                         b[j] += gv * (static_cast<double>(xr[j]) - m[j]);
                       }
                     }
                   }
                   for (int64_t j = 0; j < w; ++j) {
                     col_a[j0 + j] = a[j];
                     col_b[j0 + j] = b[j];
                   }
                 }
               });
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t k = 0; k < s; ++k) {
      sum_a[ch] += col_a[ch * s + k];
      sum_b[ch] += col_b[ch * s + k];
    }
}

// Calls f(off, p0, p1, p2, p3) for every value, p0..p3 its channel's entries of four per-channel arrays.
template <typename M, typename F>
void channel_map(int64_t n, int64_t c, int64_t s, const std::vector<M>& p0, const std::vector<M>& p1,
                 const std::vector<M>& p2, const std::vector<M>& p3, F&& f) {
  if (s >= kColumnBlock) {
    parallel_for(0, n * c, std::max<int64_t>(1, kDefaultGrain / s), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t ch = r % c, off = r * s;
        const M a = p0[ch], b = p1[ch], d = p2[ch], e = p3[ch];
#pragma omp simd
        for (int64_t k = 0; k < s; ++k) f(off + k, a, b, d, e);
      }
    });
    return;
  }
  const int64_t width = c * s;
  std::vector<M> q0(static_cast<size_t>(width)), q1(q0.size()), q2(q0.size()), q3(q0.size());
  for (int64_t j = 0; j < width; ++j) {
    q0[j] = p0[j / s];
    q1[j] = p1[j / s];
    q2[j] = p2[j / s];
    q3[j] = p3[j / s];
  }
  parallel_for(0, n, std::max<int64_t>(1, kDefaultGrain / width), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t off = i * width;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) f(off + j, q0[j], q1[j], q2[j], q3[j]);
    }
  });
}

// x, y: (N, C, S); w, b: (C) or null; mean, var: (C) in opmath_t<T>, written when training, read otherwise.
template <typename T>
void batch_norm_forward_impl(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps, bool training) {
  using M = opmath_t<T>;
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2), count = n * s;
  const T* px = x.data_ptr<T>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const T* b = bias.defined() ? bias.data_ptr<T>() : nullptr;
  M* pm = mean.data_ptr<M>();
  M* pv = var.data_ptr<M>();
  if (training) {  // two passes in double: the mean, then the squared deviations from it
    std::vector<double> center(static_cast<size_t>(c), 0.0), sum, sq, unused;
    channel_sums<BnSum::kValues, T>(px, nullptr, n, c, s, center, sum, unused);
    for (int64_t ch = 0; ch < c; ++ch) center[ch] = sum[ch] / static_cast<double>(count);
    channel_sums<BnSum::kSquares, T>(px, nullptr, n, c, s, center, sq, unused);
    for (int64_t ch = 0; ch < c; ++ch) {
      pm[ch] = static_cast<M>(center[ch]);
      pv[ch] = static_cast<M>(sq[ch] / static_cast<double>(count));
    }
  }
  if (!y.defined()) return;  // the statistics alone (ops::batch_norm_stats)
  T* py = y.data_ptr<T>();
  // y = (x - mean) (rstd w) + b, in M, as on the GPU.
  std::vector<M> mu(static_cast<size_t>(c)), scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    mu[ch] = pm[ch];
    scale[ch] = static_cast<M>(1.0 / std::sqrt(static_cast<double>(pv[ch]) + eps)) *
                (w != nullptr ? static_cast<M>(w[ch]) : M(1));
    shift[ch] = b != nullptr ? static_cast<M>(b[ch]) : M(0);
  }
  channel_map<M>(n, c, s, mu, scale, shift, shift, [&](int64_t off, M m, M sc, M sh, M) {
    py[off] = static_cast<T>((static_cast<M>(px[off]) - m) * sc + sh);
  });
}

// dx = wr (g - mg) - (x - mean) k, with wr = w rstd, mg = sg / count and k = wr rstd sgx / count, where sg and sgx
// are sum g and sum g xhat over the count values the statistics came from; sg null: the eval-mode dx = wr g.
template <typename T>
void batch_norm_input_grad(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const std::vector<opmath_t<T>>& mu,
                           const std::vector<opmath_t<T>>& rstd, const T* w, const double* sg, const double* sgx,
                           int64_t count) {
  using M = opmath_t<T>;
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const T* px = x.data_ptr<T>();
  const T* pg = grad_y.data_ptr<T>();
  T* pdx = grad_x.data_ptr<T>();
  std::vector<M> wr(static_cast<size_t>(c)), mg(static_cast<size_t>(c), M(0)), kx(static_cast<size_t>(c), M(0));
  for (int64_t ch = 0; ch < c; ++ch) {
    wr[ch] = rstd[ch] * (w != nullptr ? static_cast<M>(w[ch]) : M(1));
    if (sg != nullptr) {
      mg[ch] = static_cast<M>(sg[ch] / static_cast<double>(count));
      kx[ch] = wr[ch] * rstd[ch] * static_cast<M>(sgx[ch] / static_cast<double>(count));
    }
  }
  channel_map<M>(n, c, s, mu, wr, mg, kx, [&](int64_t off, M m, M a, M g0, M k) {
    pdx[off] = static_cast<T>(a * (static_cast<M>(pg[off]) - g0) - (static_cast<M>(px[off]) - m) * k);
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
  std::vector<M> mu(static_cast<size_t>(c)), rstd(static_cast<size_t>(c));
  std::vector<double> center(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    mu[ch] = pm[ch];
    center[ch] = static_cast<double>(pm[ch]);
    rstd[ch] = static_cast<M>(1.0 / std::sqrt(static_cast<double>(pv[ch]) + eps));
  }
  // sum g and sum g (x - mean): for dw, db and a training dx (an eval dx alone needs neither)
  std::vector<double> sg(static_cast<size_t>(c), 0.0), sgc(static_cast<size_t>(c), 0.0);
  if (grad_weight.defined() || grad_bias.defined() || training)
    channel_sums<BnSum::kGrad, T>(px, pg, n, c, s, center, sg, sgc);
  for (int64_t ch = 0; ch < c; ++ch) {
    if (grad_weight.defined()) grad_weight.data_ptr<T>()[ch] = static_cast<T>(sgc[ch] * static_cast<double>(rstd[ch]));
    if (grad_bias.defined()) grad_bias.data_ptr<T>()[ch] = static_cast<T>(sg[ch]);
  }
  if (!grad_x.defined()) return;
  if (training)  // sum g xhat = rstd sum g (x - mean)
    for (int64_t ch = 0; ch < c; ++ch) sgc[ch] *= static_cast<double>(rstd[ch]);
  batch_norm_input_grad<T>(grad_x, grad_y, x, mu, rstd, w, training ? sg.data() : nullptr, sgc.data(), count);
}

// grad_x: (N, C, S), the training-mode input gradient with the sums given: sg[c] (sum g) and sgx[c] (sum g xhat)
// over count values, or the eval-mode one (w rstd g) where sg is null.
template <typename T>
void batch_norm_backward_input_impl(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                    const Tensor& var, const Tensor& weight, const Tensor& sums, int64_t count,
                                    double eps) {
  using M = opmath_t<T>;
  const int64_t c = x.size(1);
  const M* pm = mean.data_ptr<M>();
  const M* pv = var.data_ptr<M>();
  const M* ps = sums.data_ptr<M>();
  std::vector<M> mu(static_cast<size_t>(c)), rstd(static_cast<size_t>(c));
  std::vector<double> sg(static_cast<size_t>(c)), sgx(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    mu[ch] = pm[ch];
    rstd[ch] = static_cast<M>(1.0 / std::sqrt(static_cast<double>(pv[ch]) + eps));
    sg[ch] = static_cast<double>(ps[ch]);
    sgx[ch] = static_cast<double>(ps[c + ch]);
  }
  batch_norm_input_grad<T>(grad_x, grad_y, x, mu, rstd, weight.defined() ? weight.data_ptr<T>() : nullptr, sg.data(),
                           sgx.data(), count);
}

void batch_norm_backward_input_cpu(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                   const Tensor& var, const Tensor& weight, const Tensor& sums, int64_t count,
                                   double eps) {
  visit_dtype<kFloatingSet>(x.dtype(), "batch_norm_backward_input", [&]<typename T>() {
    batch_norm_backward_input_impl<T>(grad_x, grad_y, x, mean, var, weight, sums, count, eps);
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
  register_kernel<Op::batch_norm_backward_input>(DeviceType::CPU, batch_norm_backward_input_cpu);
}
}  // namespace detail
}  // namespace kiln
