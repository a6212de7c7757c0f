// CUDA kernels of the CTC loss (the math is in ops/ctc.h; ops/ctc_cpu.cpp is the reference they match).
//
// The recursions run a block per batch element: the block's threads share the positions of one frame, and a
// barrier separates the frames, each reading the row the frame before wrote (alpha in the saved log_alpha,
// beta in a scratch tensor of the same shape). The gradient then takes one thread per element of (T, N, C),
// summing alpha + beta over the positions of its class in increasing order, as the CPU does; no atomics, so
// every run gives the same bits. Everything computes in log_probs' dtype (float32 or float64).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/grid_stride.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/ctc.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

using namespace cuda::grid_stride;  // kThreads, blocks_for, first_index, grid_step

// What every kernel reads; lp (T, N, C), targets (N, S).
template <typename T>
struct Problem {
  const T* lp;
  const int64_t* targets;
  const int64_t* input_lengths;
  const int64_t* target_lengths;
  int64_t frames, batch, classes, max_labels, blank;
};

// alpha of element blockIdx.x into log_alpha (N, T, 2S + 1), every entry written; then its nll.
template <typename T>
__global__ void __launch_bounds__(kThreads) ctc_forward_kernel(Problem<T> p, T* __restrict__ nll,
                                                               T* __restrict__ log_alpha) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t n = blockIdx.x, P = 2 * p.max_labels + 1;
  const int64_t len = p.input_lengths[n], L = p.target_lengths[n], used = 2 * L + 1;
  const int64_t* labels = p.targets + n * p.max_labels;
  T* alpha = log_alpha + n * p.frames * P;
  for (int64_t i = threadIdx.x; i < p.frames * P; i += blockDim.x) alpha[i] = neg_inf;
  __syncthreads();
  if (len > 0) {
    const T* lp0 = p.lp + n * p.classes;
    for (int64_t s = threadIdx.x; s < (used < 2 ? used : 2); s += blockDim.x)
      alpha[s] = lp0[ctc::label_at(labels, s, p.blank)];
    __syncthreads();
    for (int64_t t = 1; t < len; ++t) {
      const T* prev = alpha + (t - 1) * P;
      T* row = alpha + t * P;
      const T* lp = p.lp + (t * p.batch + n) * p.classes;
      for (int64_t s = threadIdx.x; s < used; s += blockDim.x) {
        const T one_back = s > 0 ? prev[s - 1] : neg_inf;
        const T skip = ctc::can_skip(labels, s) ? prev[s - 2] : neg_inf;
        row[s] = lp[ctc::label_at(labels, s, p.blank)] + ctc::log_add3(prev[s], one_back, skip);
      }
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) {
    if (len == 0) {
      nll[n] = L == 0 ? T(0) : std::numeric_limits<T>::infinity();
    } else {
      const T* last = alpha + (len - 1) * P;
      nll[n] = -(L > 0 ? ctc::log_add(last[used - 1], last[used - 2]) : last[0]);
    }
  }
}

// beta of element blockIdx.x into scratch (N, T, 2S + 1); entries it does not reach are left unwritten and
// never read.
template <typename T>
__global__ void __launch_bounds__(kThreads) ctc_beta_kernel(Problem<T> p, T* __restrict__ log_beta) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t n = blockIdx.x, P = 2 * p.max_labels + 1;
  const int64_t len = p.input_lengths[n], L = p.target_lengths[n], used = 2 * L + 1;
  if (len == 0) return;
  const int64_t* labels = p.targets + n * p.max_labels;
  T* beta = log_beta + n * p.frames * P;
  {
    T* row = beta + (len - 1) * P;
    const T* lp = p.lp + ((len - 1) * p.batch + n) * p.classes;
    for (int64_t s = threadIdx.x; s < used; s += blockDim.x)
      row[s] = s >= used - 2 ? lp[ctc::label_at(labels, s, p.blank)] : neg_inf;
  }
  __syncthreads();
  for (int64_t t = len - 2; t >= 0; --t) {
    const T* next = beta + (t + 1) * P;
    T* row = beta + t * P;
    const T* lp = p.lp + (t * p.batch + n) * p.classes;
    for (int64_t s = threadIdx.x; s < used; s += blockDim.x) {
      const T one_on = s + 1 < used ? next[s + 1] : neg_inf;
      const T skip = s + 2 < used && ctc::can_skip(labels, s + 2) ? next[s + 2] : neg_inf;
      row[s] = lp[ctc::label_at(labels, s, p.blank)] + ctc::log_add3(next[s], one_on, skip);
    }
    __syncthreads();
  }
}

// grad (T, N, C), one thread per element.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ctc_grad_kernel(Problem<T> p, const T* __restrict__ log_alpha, const T* __restrict__ log_beta,
                    const T* __restrict__ nll, const T* __restrict__ grad_nll, T* __restrict__ grad,
                    bool zero_infinity) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t total = p.frames * p.batch * p.classes, P = 2 * p.max_labels + 1;
  for (int64_t i = first_index(); i < total;
       i += grid_step()) {
    const int64_t c = i % p.classes, n = (i / p.classes) % p.batch, t = i / (p.classes * p.batch);
    const int64_t len = p.input_lengths[n], L = p.target_lengths[n];
    if (t >= len) {
      grad[i] = T(0);
      continue;
    }
    const T loss = nll[n];
    if (isinf(loss)) {
      grad[i] = zero_infinity ? T(0) : std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const T* a = log_alpha + (n * p.frames + t) * P;
    const T* b = log_beta + (n * p.frames + t) * P;
    const int64_t* labels = p.targets + n * p.max_labels;
    T lcab = neg_inf;
    if (c == p.blank) {
      for (int64_t s = 0; s <= 2 * L; s += 2) lcab = ctc::log_add(lcab, a[s] + b[s]);
    } else {
      for (int64_t j = 0; j < L; ++j)
        if (labels[j] == c) lcab = ctc::log_add(lcab, a[2 * j + 1] + b[2 * j + 1]);
    }
    grad[i] = lcab == neg_inf ? T(0) : -exp(lcab + loss - p.lp[i]) * grad_nll[n];
  }
}

template <typename T>
Problem<T> problem(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                   const Tensor& target_lengths, int64_t blank) {
  return {static_cast<const T*>(log_probs.raw_data_ptr()), static_cast<const int64_t*>(targets.raw_data_ptr()),
          static_cast<const int64_t*>(input_lengths.raw_data_ptr()),
          static_cast<const int64_t*>(target_lengths.raw_data_ptr()), log_probs.size(0), log_probs.size(1),
          log_probs.size(2), targets.size(1), blank};
}

void ctc_loss_cuda(const Tensor& nll, const Tensor& log_alpha, const Tensor& log_probs, const Tensor& targets,
                   const Tensor& input_lengths, const Tensor& target_lengths, int64_t blank) {
  const int device = log_probs.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  visit_dtype<kFloat32Set | kFloat64Set>(log_probs.dtype(), "ctc_loss (CUDA)", [&]<typename T>() {
    const Problem<T> p = problem<T>(log_probs, targets, input_lengths, target_lengths, blank);
    ctc_forward_kernel<T><<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(
        p, static_cast<T*>(nll.raw_data_ptr()), static_cast<T*>(log_alpha.raw_data_ptr()));
    KILN_CUDA_CHECK_LAUNCH("ctc_loss");
  });
}

void ctc_loss_backward_cuda(const Tensor& grad_log_probs, const Tensor& grad_nll, const Tensor& log_probs,
                            const Tensor& targets, const Tensor& input_lengths, const Tensor& target_lengths,
                            const Tensor& nll, const Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  const int device = log_probs.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  Tensor log_beta = empty(log_alpha.sizes(), TensorOptions(log_alpha.dtype()).device(log_alpha.device()));
  visit_dtype<kFloat32Set | kFloat64Set>(log_probs.dtype(), "ctc_loss_backward (CUDA)", [&]<typename T>() {
    const Problem<T> p = problem<T>(log_probs, targets, input_lengths, target_lengths, blank);
    ctc_beta_kernel<T><<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(
        p, static_cast<T*>(log_beta.raw_data_ptr()));
    KILN_CUDA_CHECK_LAUNCH("ctc_loss_backward (beta)");
    ctc_grad_kernel<T><<<blocks_for(grad_log_probs.numel()), kThreads, 0, stream>>>(
        p, static_cast<const T*>(log_alpha.raw_data_ptr()), static_cast<const T*>(log_beta.raw_data_ptr()),
        static_cast<const T*>(nll.raw_data_ptr()), static_cast<const T*>(grad_nll.raw_data_ptr()),
        static_cast<T*>(grad_log_probs.raw_data_ptr()), zero_infinity);
    KILN_CUDA_CHECK_LAUNCH("ctc_loss_backward");
  });
}

}  // namespace

namespace detail {
void register_cuda_ctc_kernels() {
  register_kernel<Op::ctc_loss>(DeviceType::CUDA, ctc_loss_cuda);
  register_kernel<Op::ctc_loss_backward>(DeviceType::CUDA, ctc_loss_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
