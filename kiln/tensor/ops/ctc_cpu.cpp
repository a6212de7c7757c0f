// CPU kernels of the CTC loss (the math is in ops/ctc.h): one thread per batch element, which runs its alpha
// recursion (forward) or its beta recursion and then the gradient of each of its frames (backward), in
// log_probs' dtype, with the math library's exp and log (three exps and a log per position and frame: the
// cost). The independent references are the sum over every path, enumerated, and a recursion in probability
// space, both in float64 (tests/nn/ctc_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/ctc.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

// The shapes and pointers every kernel reads.
template <typename T>
struct Problem {
  const T* lp;  // (T, N, C)
  const int64_t* targets;  // (N, S)
  const int64_t* input_lengths;
  const int64_t* target_lengths;
  int64_t frames, batch, classes, max_labels, blank;

  int64_t positions() const { return 2 * max_labels + 1; }  // of log_alpha's rows
  const T* frame(int64_t t, int64_t n) const { return lp + (t * batch + n) * classes; }
  const int64_t* labels(int64_t n) const { return targets + n * max_labels; }
};

template <typename T>
Problem<T> problem(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                   const Tensor& target_lengths, int64_t blank) {
  return {log_probs.data_ptr<T>(), targets.data_ptr<int64_t>(), input_lengths.data_ptr<int64_t>(),
          target_lengths.data_ptr<int64_t>(), log_probs.size(0), log_probs.size(1), log_probs.size(2),
          targets.size(1), blank};
}

// alpha (frames, positions) of element n, every entry written; returns nll.
template <typename T>
T forward_one(const Problem<T>& p, int64_t n, T* alpha) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t len = p.input_lengths[n], L = p.target_lengths[n], used = 2 * L + 1, P = p.positions();
  const int64_t* labels = p.labels(n);
  std::fill(alpha, alpha + p.frames * P, kNegInf);
  if (len == 0) return L == 0 ? T(0) : std::numeric_limits<T>::infinity();
  alpha[0] = p.frame(0, n)[p.blank];
  if (L > 0) alpha[1] = p.frame(0, n)[labels[0]];
  for (int64_t t = 1; t < len; ++t) {
    const T* prev = alpha + (t - 1) * P;
    T* row = alpha + t * P;
    const T* lp = p.frame(t, n);
    for (int64_t s = 0; s < used; ++s) {
      const T one_back = s > 0 ? prev[s - 1] : kNegInf;
      const T skip = ctc::can_skip(labels, s) ? prev[s - 2] : kNegInf;
      row[s] = lp[ctc::label_at(labels, s, p.blank)] + ctc::log_add3(prev[s], one_back, skip);
    }
  }
  const T* last = alpha + (len - 1) * P;
  return -(L > 0 ? ctc::log_add(last[used - 1], last[used - 2]) : last[0]);
}

template <typename T>
void ctc_forward(const Tensor& nll, const Tensor& log_alpha, const Tensor& log_probs, const Tensor& targets,
                 const Tensor& input_lengths, const Tensor& target_lengths, int64_t blank) {
  const Problem<T> p = problem<T>(log_probs, targets, input_lengths, target_lengths, blank);
  T* out = nll.data_ptr<T>();
  T* alpha = log_alpha.data_ptr<T>();
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, p.frames * p.positions()));
  parallel_for(0, p.batch, grain, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) out[n] = forward_one(p, n, alpha + n * p.frames * p.positions());
  });
}

// grad (T, N, C) of element n: its frames below its input length from alpha, beta and nll, zeros past it.
template <typename T>
void backward_one(const Problem<T>& p, int64_t n, const T* alpha, T nll, T g, bool zero_infinity, T* grad,
                  std::vector<T>& beta, std::vector<T>& lcab) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t len = p.input_lengths[n], L = p.target_lengths[n], used = 2 * L + 1, P = p.positions();
  const int64_t* labels = p.labels(n);
  auto grad_frame = [&](int64_t t) { return grad + (t * p.batch + n) * p.classes; };
  for (int64_t t = len; t < p.frames; ++t) std::fill(grad_frame(t), grad_frame(t) + p.classes, T(0));
  if (len == 0) return;
  if (std::isinf(nll)) {
    const T fill = zero_infinity ? T(0) : std::numeric_limits<T>::quiet_NaN();
    for (int64_t t = 0; t < len; ++t) std::fill(grad_frame(t), grad_frame(t) + p.classes, fill);
    return;
  }
  // beta, the recursion from the last frame backwards, rows of `used` positions
  beta.assign(static_cast<size_t>(len * used), kNegInf);
  {
    T* row = beta.data() + (len - 1) * used;
    const T* lp = p.frame(len - 1, n);
    row[used - 1] = lp[p.blank];
    if (L > 0) row[used - 2] = lp[labels[L - 1]];
  }
  for (int64_t t = len - 2; t >= 0; --t) {
    const T* next = beta.data() + (t + 1) * used;
    T* row = beta.data() + t * used;
    const T* lp = p.frame(t, n);
    for (int64_t s = 0; s < used; ++s) {
      const T one_on = s + 1 < used ? next[s + 1] : kNegInf;
      const T skip = s + 2 < used && ctc::can_skip(labels, s + 2) ? next[s + 2] : kNegInf;
      row[s] = lp[ctc::label_at(labels, s, p.blank)] + ctc::log_add3(next[s], one_on, skip);
    }
  }
  // d nll / d lp[t][c] = -exp(lcab(t, c) + nll - lp[t][c]) * g
  lcab.resize(static_cast<size_t>(p.classes));
  for (int64_t t = 0; t < len; ++t) {
    std::fill(lcab.begin(), lcab.end(), kNegInf);
    const T* a = alpha + t * P;
    const T* b = beta.data() + t * used;
    for (int64_t s = 0; s < used; ++s) {
      T& acc = lcab[ctc::label_at(labels, s, p.blank)];
      acc = ctc::log_add(acc, a[s] + b[s]);
    }
    const T* lp = p.frame(t, n);
    T* out = grad_frame(t);
    for (int64_t c = 0; c < p.classes; ++c)
      out[c] = lcab[c] == kNegInf ? T(0) : -std::exp(lcab[c] + nll - lp[c]) * g;
  }
}

template <typename T>
void ctc_backward(const Tensor& grad_log_probs, const Tensor& grad_nll, const Tensor& log_probs,
                  const Tensor& targets, const Tensor& input_lengths, const Tensor& target_lengths,
                  const Tensor& nll, const Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  const Problem<T> p = problem<T>(log_probs, targets, input_lengths, target_lengths, blank);
  const T* g = grad_nll.data_ptr<T>();
  const T* loss = nll.data_ptr<T>();
  const T* alpha = log_alpha.data_ptr<T>();
  T* grad = grad_log_probs.data_ptr<T>();
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, p.frames * p.positions()));
  parallel_for(0, p.batch, grain, [&](int64_t b, int64_t e) {
    std::vector<T> beta, lcab;
    for (int64_t n = b; n < e; ++n)
      backward_one(p, n, alpha + n * p.frames * p.positions(), loss[n], g[n], zero_infinity, grad, beta, lcab);
  });
}

void ctc_loss_cpu(const Tensor& nll, const Tensor& log_alpha, const Tensor& log_probs, const Tensor& targets,
                  const Tensor& input_lengths, const Tensor& target_lengths, int64_t blank) {
  visit_dtype<kFloat32Set | kFloat64Set>(log_probs.dtype(), "ctc_loss", [&]<typename T>() {
    ctc_forward<T>(nll, log_alpha, log_probs, targets, input_lengths, target_lengths, blank);
  });
}

void ctc_loss_backward_cpu(const Tensor& grad_log_probs, const Tensor& grad_nll, const Tensor& log_probs,
                           const Tensor& targets, const Tensor& input_lengths, const Tensor& target_lengths,
                           const Tensor& nll, const Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  visit_dtype<kFloat32Set | kFloat64Set>(log_probs.dtype(), "ctc_loss_backward", [&]<typename T>() {
    ctc_backward<T>(grad_log_probs, grad_nll, log_probs, targets, input_lengths, target_lengths, nll, log_alpha,
                    blank, zero_infinity);
  });
}

}  // namespace

namespace detail {
void register_ctc_cpu_kernels() {
  register_kernel<Op::ctc_loss>(DeviceType::CPU, ctc_loss_cpu);
  register_kernel<Op::ctc_loss_backward>(DeviceType::CPU, ctc_loss_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
