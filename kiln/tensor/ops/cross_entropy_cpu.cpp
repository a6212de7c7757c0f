// CPU kernels of the fused cross-entropy (the math is in ops/cross_entropy.h), forward then backward.
//
// One thread does a row: the forward reads it twice (max, then the sum of exp(z - max)) and a third time only
// with label smoothing; the backward reads it once and writes the gradient. As in softmax_cpu.cpp, float32 and
// the 16-bit floats compute in float with fast_math::exp (which vectorizes) and accumulate the sum in double;
// float64 computes in double. The targets are checked serially before the parallel loop, so a bad one throws
// from the calling thread and names the first bad position. The independent reference is the composite
// log_softmax + gather in float64 (tests/tensor/cross_entropy_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/fast_math.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

template <typename M>
KILN_INLINE M exp_m(M x) {
  if constexpr (std::is_same_v<M, float>) return fast_math::exp(x);
  else return std::exp(x);
}

// Throws for the first target that is neither a class in [0, C) nor ignore_index.
void check_targets(const char* op, const int64_t* t, int64_t n, int64_t classes, int64_t ignore_index) {
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index || (t[i] >= 0 && t[i] < classes)) continue;
    KILN_CHECK(false, op, ": target ", t[i], " is out of range for ", classes, " classes (expected 0..", classes - 1,
               " or ignore_index ", ignore_index, ")");
  }
}

// The sum of the class weights W (C without weights), in M.
template <typename T, typename M>
M weight_total(const T* w, int64_t c) {
  if (w == nullptr) return static_cast<M>(c);
  double s = 0;
  for (int64_t i = 0; i < c; ++i) s += static_cast<double>(w[i]);
  return static_cast<M>(s);
}

// logits: (N, C), target: (N) -> loss, row_weight: (N) in T, stats: (N, 2) in opmath_t<T>.
template <typename T>
void forward_impl(const Tensor& loss, const Tensor& row_weight, const Tensor& stats, const Tensor& logits,
                  const Tensor& target, const Tensor& weight, const CrossEntropyParams& p) {
  using M = opmath_t<T>;
  const int64_t n = logits.size(0), c = logits.size(1);
  const T* z = logits.data_ptr<T>();
  const int64_t* t = target.data_ptr<int64_t>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  T* out = loss.data_ptr<T>();
  T* rw = row_weight.data_ptr<T>();
  M* st = stats.data_ptr<M>();
  check_targets("cross_entropy", t, n, c, p.ignore_index);
  const double e = p.label_smoothing;
  parallel_for(0, n, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(c, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = z + r * c;
      M mx = -std::numeric_limits<M>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t i = 0; i < c; ++i) {
        M v = static_cast<M>(row[i]);
        mx = v > mx ? v : mx;  // skips NaN: a NaN shows up in the sum instead
      }
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < c; ++i) sum += static_cast<double>(exp_m<M>(static_cast<M>(row[i]) - mx));
      // NOTE: a row of -inf, or one holding +inf or NaN, has no finite log-sum-exp: NaN, as log_softmax gives.
      const double log_sum = std::isfinite(mx) ? std::log(sum) : std::numeric_limits<double>::quiet_NaN();
      st[2 * r] = mx;
      st[2 * r + 1] = static_cast<M>(log_sum);
      if (t[r] == p.ignore_index) {
        out[r] = static_cast<T>(0.0);
        rw[r] = static_cast<T>(0.0);
        continue;
      }
      // logp_c = (z_c - m) - log_sum: the shift first, so large logits keep their digits.
      const double m = static_cast<double>(mx);
      const double wt = w != nullptr ? static_cast<double>(w[t[r]]) : 1.0;
      double value = -(1.0 - e) * wt * ((static_cast<double>(row[t[r]]) - m) - log_sum);
      if (e > 0) {
        double smooth = 0;  // sum_c w_c logp_c
        for (int64_t i = 0; i < c; ++i)
          smooth += (w != nullptr ? static_cast<double>(w[i]) : 1.0) * ((static_cast<double>(row[i]) - m) - log_sum);
        value -= e / static_cast<double>(c) * smooth;
      }
      out[r] = static_cast<T>(value);
      rw[r] = static_cast<T>(wt);
    }
  });
}

// grad_logits, logits: (N, C); grad_loss, target: (N); stats: (N, 2) in opmath_t<T>.
// grad_c = p_c (a + b W) - b w_c - a [c == t] with a = g (1 - e) w_t, b = g e / C, p_c = exp((z_c - m) - log_sum).
template <typename T>
void backward_impl(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits, const Tensor& stats,
                   const Tensor& target, const Tensor& weight, const CrossEntropyParams& p) {
  using M = opmath_t<T>;
  const int64_t n = logits.size(0), c = logits.size(1);
  const T* z = logits.data_ptr<T>();
  const T* g = grad_loss.data_ptr<T>();
  const M* st = stats.data_ptr<M>();
  const int64_t* t = target.data_ptr<int64_t>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  T* dz = grad_logits.data_ptr<T>();
  check_targets("cross_entropy_backward", t, n, c, p.ignore_index);
  const M e = static_cast<M>(p.label_smoothing);
  const M total = p.label_smoothing > 0 ? weight_total<T, M>(w, c) : M(0);  // only the smoothing term needs W
  parallel_for(0, n, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(c, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = z + r * c;
      T* out = dz + r * c;
      if (t[r] == p.ignore_index) {
        std::fill(out, out + c, static_cast<T>(0.0));
        continue;
      }
      const M gr = static_cast<M>(g[r]);
      const M wt = w != nullptr ? static_cast<M>(w[t[r]]) : M(1);
      const M a = gr * (M(1) - e) * wt;
      const M b = gr * e / static_cast<M>(c);
      const M s = a + b * total, m = st[2 * r], log_sum = st[2 * r + 1];
      if (w == nullptr) {
        for (int64_t i = 0; i < c; ++i) out[i] = static_cast<T>(exp_m<M>((static_cast<M>(row[i]) - m) - log_sum) * s - b);
      } else {
        for (int64_t i = 0; i < c; ++i)
          out[i] = static_cast<T>(exp_m<M>((static_cast<M>(row[i]) - m) - log_sum) * s - b * static_cast<M>(w[i]));
      }
      // The target's own term: its element written again with -a, rounded to T once (as on the GPU).
      out[t[r]] = static_cast<T>(exp_m<M>((static_cast<M>(row[t[r]]) - m) - log_sum) * s - b * wt - a);
    }
  });
}

void cross_entropy_cpu(const Tensor& loss, const Tensor& row_weight, const Tensor& stats, const Tensor& logits,
                       const Tensor& target, const Tensor& weight, const CrossEntropyParams& p) {
  visit_dtype<kFloatingSet>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    forward_impl<T>(loss, row_weight, stats, logits, target, weight, p);
  });
}

void cross_entropy_backward_cpu(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                const Tensor& stats, const Tensor& target, const Tensor& weight,
                                const CrossEntropyParams& p) {
  visit_dtype<kFloatingSet>(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    backward_impl<T>(grad_logits, grad_loss, logits, stats, target, weight, p);
  });
}

}  // namespace

namespace detail {
void register_cross_entropy_cpu_kernels() {
  register_kernel<Op::cross_entropy>(DeviceType::CPU, cross_entropy_cpu);
  register_kernel<Op::cross_entropy_backward>(DeviceType::CPU, cross_entropy_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
