// CPU kernels for random draws. Element i of the output (row-major) takes its bits from Philox counter
// offset + i / per_call, word(s) i % per_call; see rng.h. Chunks of counters run in parallel, and since no
// element depends on another, the result is the same on any number of threads.
#include <cmath>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/rng.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr double kTwoPi = 6.283185307179586476925;

// Calls fill(block, first_element, count) for every counter; out must be contiguous.
template <typename F>
void for_each_counter(const Tensor& out, int per_call, uint64_t seed, uint64_t offset, F&& fill) {
  KILN_ASSERT(out.is_contiguous(), "random kernels write contiguous outputs");
  int64_t n = out.numel();
  int64_t counters = (n + per_call - 1) / per_call;
  parallel_for(0, counters, 2048, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      auto block = Philox4x32::generate(seed, offset + static_cast<uint64_t>(c));
      int64_t first = c * per_call;
      fill(block, first, std::min<int64_t>(per_call, n - first));
    }
  });
}

void uniform_cpu(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& from_s, const Scalar& to_s) {
  const double from = from_s.to_double(), to = to_s.to_double();
  visit_dtype<kFloatingSet>(out.dtype(), "uniform", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    constexpr bool dbl = std::is_same_v<T, double>;
    constexpr int bits = std::is_same_v<T, Half> ? 11 : std::is_same_v<T, BFloat16> ? 8 : 24;
    for_each_counter(out, values_per_counter(RandomDist::Uniform, dbl), seed, offset,
                     [&](const Philox4x32::Block& w, int64_t first, int64_t count) {
                       for (int64_t j = 0; j < count; ++j) {
                         double u = dbl ? uniform_double(w[2 * j], w[2 * j + 1]) : uniform_bits(w[j], bits);
                         T v = static_cast<T>(static_cast<opmath_t<T>>(from + u * (to - from)));
                         // Rounding into T can still reach `to` for a general range; keep [from, to).
                         if (static_cast<double>(static_cast<opmath_t<T>>(v)) >= to && to > from) v = static_cast<T>(from);
                         p[first + j] = v;
                       }
                     });
  });
}

// Box-Muller on pairs of uniforms: (u1, u2) -> r cos(2 pi u2), r sin(2 pi u2), r = sqrt(-2 log u1), u1 in (0, 1].
void normal_cpu(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& mean_s, const Scalar& std_s) {
  const double mean = mean_s.to_double(), std = std_s.to_double();
  visit_dtype<kFloatingSet>(out.dtype(), "normal", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    constexpr bool dbl = std::is_same_v<T, double>;
    for_each_counter(out, values_per_counter(RandomDist::Normal, dbl), seed, offset,
                     [&](const Philox4x32::Block& w, int64_t first, int64_t count) {
                       double z[4] = {};
                       if (dbl) {
                         double u1 = 1.0 - uniform_double(w[0], w[1]), u2 = uniform_double(w[2], w[3]);
                         double r = std::sqrt(-2.0 * std::log(u1));
                         z[0] = r * std::cos(kTwoPi * u2);
                         z[1] = r * std::sin(kTwoPi * u2);
                       } else {
                         for (int pair = 0; pair < 2; ++pair) {
                           double u1 = 1.0 - uniform_float(w[2 * pair]), u2 = uniform_float(w[2 * pair + 1]);
                           double r = std::sqrt(-2.0 * std::log(u1));
                           z[2 * pair] = r * std::cos(kTwoPi * u2);
                           z[2 * pair + 1] = r * std::sin(kTwoPi * u2);
                         }
                       }
                       for (int64_t j = 0; j < count; ++j)
                         p[first + j] = static_cast<T>(static_cast<opmath_t<T>>(mean + std * z[j]));
                     });
  });
}

// low + bits % (high - low), in uint64 arithmetic so that any int64 range is exact (the modulo's bias is at
// most range / 2^32 or range / 2^64, as in PyTorch).
void randint_cpu(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& low, const Scalar& high) {
  visit_dtype<kNumericSet>(out.dtype(), "randint", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    const uint64_t lo = static_cast<uint64_t>(low.to_int());
    const uint64_t range = static_cast<uint64_t>(high.to_int()) - lo;
    int per_call = values_per_counter(RandomDist::RandInt, false, range);
    for_each_counter(out, per_call, seed, offset, [&](const Philox4x32::Block& w, int64_t first, int64_t count) {
      for (int64_t j = 0; j < count; ++j) {
        uint64_t bits = per_call == 4 ? w[j] : (static_cast<uint64_t>(w[2 * j]) << 32 | w[2 * j + 1]);
        auto v = static_cast<int64_t>(lo + bits % range);
        p[first + j] = static_cast<T>(static_cast<opmath_t<T>>(v));
      }
    });
  });
}

void bernoulli_cpu(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& prob_s, const Scalar&) {
  const double prob = prob_s.to_double();
  visit_dtype(out.dtype(), "bernoulli", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    for_each_counter(out, values_per_counter(RandomDist::Bernoulli, false), seed, offset,
                     [&](const Philox4x32::Block& w, int64_t first, int64_t count) {
                       for (int64_t j = 0; j < count; ++j)
                         p[first + j] = static_cast<T>(static_cast<opmath_t<T>>(uniform_float(w[j]) < prob ? 1 : 0));
                     });
  });
}

}  // namespace

namespace detail {
void register_random_cpu_kernels() {
  register_kernel<Op::uniform>(DeviceType::CPU, uniform_cpu);
  register_kernel<Op::normal>(DeviceType::CPU, normal_cpu);
  register_kernel<Op::randint>(DeviceType::CPU, randint_cpu);
  register_kernel<Op::bernoulli>(DeviceType::CPU, bernoulli_cpu);
}
}  // namespace detail
}  // namespace kiln
