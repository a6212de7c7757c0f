// CPU kernels of softmax and log_softmax along one dim.
//
// The input is made contiguous and seen as (outer, D, inner), D the softmax dim. With inner == 1 (the last
// dim, the common case) each row is contiguous and one thread does a row in three passes: max, sum of
// exp(x - max), write. Otherwise a block of neighbouring columns is done together so every pass reads
// contiguous memory. float32 and the 16-bit floats compute in float with fast_math::exp (fast_math.h), which GCC
// vectorizes (std::exp does not vectorize without -ffast-math and costs ten times more); float64 computes in
// double with std::exp. The sum of the exps accumulates in double either way. The naive float64 reference
// is in tests/tensor/softmax_test.cpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/tensor/views.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/fast_math.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"

namespace kiln {
namespace {

// Columns done together when the softmax dim is not the last one.
constexpr int64_t kColumnBlock = 64;

// e^x for x = element - max <= 0.
template <typename M>
KILN_INLINE M exp_shifted(M x) {
  if constexpr (std::is_same_v<M, float>) return fast_math::exp(x);
  else return std::exp(x);
}

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// One softmax over the contiguous row p[0, n) into q (type T, math in M); buf holds n values of M.
// NOTE: a row holding NaN, a row of -inf (x - max = -inf + inf) and a row holding +inf (inf - inf) all come
// out NaN, as in PyTorch. The max skips NaN (so it vectorizes); a NaN shows up in the sum instead.
template <bool kLog, typename T, typename M>
void softmax_row(const T* p, T* q, int64_t n, M* buf) {
  M mx = -std::numeric_limits<M>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) {
    M v = static_cast<M>(p[i]);
    mx = v > mx ? v : mx;
  }
  double sum = kNan;
  if (std::isfinite(mx)) {
    // Two loops: GCC vectorizes the exp as a plain map and the sum as a reduction, but not the two fused.
    for (int64_t i = 0; i < n; ++i) buf[i] = exp_shifted<M>(static_cast<M>(p[i]) - mx);
    sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(buf[i]);
  }
  if (std::isnan(sum)) {
    std::fill(q, q + n, static_cast<T>(kNan));
    return;
  }
  if constexpr (kLog) {
    // NOTE: x - max - log(sum), not log(softmax): exp(x - max) underflows to 0 for x far below the max, and
    // log(0) = -inf, where the true value is just a large negative number.
    const double shift = static_cast<double>(mx) + std::log(sum);
    for (int64_t i = 0; i < n; ++i) q[i] = static_cast<T>(static_cast<M>(static_cast<double>(p[i]) - shift));
  } else {
    const double scale = 1.0 / sum;
    for (int64_t i = 0; i < n; ++i) q[i] = static_cast<T>(static_cast<M>(static_cast<double>(buf[i]) * scale));
  }
}

// The same for w neighbouring columns of a (D, inner) slab: column j is p[i * inner + j], i < d.
template <bool kLog, typename T, typename M>
void softmax_columns(const T* p, T* q, int64_t d, int64_t inner, int64_t w) {
  M mx[kColumnBlock];
  double sum[kColumnBlock];
  bool bad[kColumnBlock];
  for (int64_t j = 0; j < w; ++j) {
    mx[j] = -std::numeric_limits<M>::infinity();
    sum[j] = 0;
  }
  for (int64_t i = 0; i < d; ++i) {
    const T* row = p + i * inner;
    for (int64_t j = 0; j < w; ++j) {
      M v = static_cast<M>(row[j]);
      mx[j] = v > mx[j] ? v : mx[j];
    }
  }
  // A column with an infinite max gets NaN or -inf arguments here (x - max); it is overwritten below.
  for (int64_t i = 0; i < d; ++i) {
    const T* row = p + i * inner;
    for (int64_t j = 0; j < w; ++j) sum[j] += static_cast<double>(exp_shifted<M>(static_cast<M>(row[j]) - mx[j]));
  }
  for (int64_t j = 0; j < w; ++j) bad[j] = !std::isfinite(mx[j]) || std::isnan(sum[j]);
  for (int64_t j = 0; j < w; ++j) sum[j] = kLog ? static_cast<double>(mx[j]) + std::log(sum[j]) : 1.0 / sum[j];
  for (int64_t i = 0; i < d; ++i) {
    const T* row = p + i * inner;
    T* out = q + i * inner;
    if constexpr (kLog) {  // sum[j] is now the shift
      for (int64_t j = 0; j < w; ++j) out[j] = static_cast<T>(static_cast<M>(static_cast<double>(row[j]) - sum[j]));
    } else {  // and here the scale
      for (int64_t j = 0; j < w; ++j)
        out[j] = static_cast<T>(static_cast<M>(static_cast<double>(exp_shifted<M>(static_cast<M>(row[j]) - mx[j])) * sum[j]));
    }
  }
  for (int64_t j = 0; j < w; ++j)
    if (bad[j])
      for (int64_t i = 0; i < d; ++i) q[i * inner + j] = static_cast<T>(kNan);
}

// out, x: one shape, floating; along dim.
template <bool kLog>
void softmax_impl(const char* name, const Tensor& out, const Tensor& x, int64_t dim) {
  if (x.numel() == 0) return;
  Tensor in = ops::contiguous(x);
  Tensor dst = out.is_contiguous() ? out : empty(out.sizes(), TensorOptions(out.dtype()));
  const int64_t d = x.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < dim; ++k) outer *= x.size(k);
  for (int64_t k = dim + 1; k < x.dim(); ++k) inner *= x.size(k);
  visit_dtype<kFloatingSet>(x.dtype(), name, [&]<typename T>() {
    using M = opmath_t<T>;  // float for float16, bfloat16 and float32; double for float64
    const T* p = in.data_ptr<T>();
    T* q = dst.data_ptr<T>();
    if (inner == 1) {
      parallel_for(0, outer, std::max<int64_t>(1, kDefaultGrain / d), [&](int64_t begin, int64_t end) {
        std::vector<M> buf(static_cast<size_t>(d));
        for (int64_t r = begin; r < end; ++r) softmax_row<kLog>(p + r * d, q + r * d, d, buf.data());
      });
      return;
    }
    const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / (d * kColumnBlock));
    parallel_for(0, outer * blocks, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t o = b / blocks, c0 = (b % blocks) * kColumnBlock;
        const int64_t off = o * d * inner + c0;
        softmax_columns<kLog, T, M>(p + off, q + off, d, inner, std::min(kColumnBlock, inner - c0));
      }
    });
  });
  if (dst.impl() != out.impl()) ops::copy_(out, dst);
}

void softmax_cpu(const Tensor& out, const Tensor& x, int64_t dim) { softmax_impl<false>("softmax", out, x, dim); }
void log_softmax_cpu(const Tensor& out, const Tensor& x, int64_t dim) { softmax_impl<true>("log_softmax", out, x, dim); }

}  // namespace

namespace detail {
void register_softmax_cpu_kernels() {
  register_kernel<Op::softmax>(DeviceType::CPU, softmax_cpu);
  register_kernel<Op::log_softmax>(DeviceType::CPU, log_softmax_cpu);
}
}  // namespace detail
}  // namespace kiln
