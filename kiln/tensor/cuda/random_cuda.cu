// CUDA kernels for random draws: the same numbers as random_cpu.cpp for the same (seed, offset). One thread
// per Philox counter c fills elements [c * per_call, c * per_call + per_call) of the contiguous output from
// the words of counter offset + c (rng.h), with the CPU's arithmetic, step for step:
//   - uniform, randint, bernoulli: exact operations only (int -> float conversions, multiplies by powers of
//     two, uint64 modulo) plus one rounding, so the bits are the CPU's;
//   - normal: Box-Muller in double through the device's log, sqrt, cos and sin, which may differ from glibc's
//     by an ulp; the float outputs almost always round to the same value, double ones agree to ~1e-15.
// NOTE: the CPU build (-march=native, GCC's default -ffp-contract=fast) computes from + u * (to - from) and
// mean + std * z as one fused multiply-add; so do these kernels, explicitly (fma), to round where it rounds.
#include <cmath>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/rng.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr double kTwoPi = 6.283185307179586476925;
constexpr int kRandomBlock = 256;

// Each Fill writes dst[0, count) (count <= per_call) from one counter's four words.
template <typename T>
struct UniformFill {
  double from, to;
  __device__ void operator()(const Philox4x32::Block& w, T* dst, int count) const {
    constexpr bool dbl = std::is_same_v<T, double>;
    constexpr int bits = std::is_same_v<T, Half> ? 11 : std::is_same_v<T, BFloat16> ? 8 : 24;
    for (int j = 0; j < count; ++j) {
      const double u = dbl ? uniform_double(w[2 * j], w[2 * j + 1]) : uniform_bits(w[j], bits);
      T v = static_cast<T>(static_cast<opmath_t<T>>(fma(u, to - from, from)));
      // Rounding into T can still reach `to` for a general range; keep [from, to).
      if (static_cast<double>(static_cast<opmath_t<T>>(v)) >= to && to > from) v = static_cast<T>(from);
      dst[j] = v;
    }
  }
};

// Box-Muller on pairs of uniforms: (u1, u2) -> r cos(2 pi u2), r sin(2 pi u2), r = sqrt(-2 log u1), u1 in (0, 1].
template <typename T>
struct NormalFill {
  double mean, std;
  __device__ void operator()(const Philox4x32::Block& w, T* dst, int count) const {
    double z[4] = {};
    if constexpr (std::is_same_v<T, double>) {
      const double u1 = 1.0 - uniform_double(w[0], w[1]), u2 = uniform_double(w[2], w[3]);
      const double r = ::sqrt(-2.0 * ::log(u1));
      z[0] = r * ::cos(kTwoPi * u2);
      z[1] = r * ::sin(kTwoPi * u2);
    } else {
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        const double u1 = 1.0 - uniform_float(w[2 * pair]), u2 = uniform_float(w[2 * pair + 1]);
        const double r = ::sqrt(-2.0 * ::log(u1));
        z[2 * pair] = r * ::cos(kTwoPi * u2);
        z[2 * pair + 1] = r * ::sin(kTwoPi * u2);
      }
    }
    for (int j = 0; j < count; ++j) dst[j] = static_cast<T>(static_cast<opmath_t<T>>(fma(std, z[j], mean)));
  }
};

// low + bits % (high - low) in uint64 arithmetic: exact over any int64 range.
template <typename T>
struct RandIntFill {
  uint64_t low, range;
  bool wide;  // range >= 2^32: two words per value
  __device__ void operator()(const Philox4x32::Block& w, T* dst, int count) const {
    for (int j = 0; j < count; ++j) {
      const uint64_t bits = wide ? (static_cast<uint64_t>(w[2 * j]) << 32 | w[2 * j + 1]) : w[j];
      const auto v = static_cast<int64_t>(low + bits % range);
      dst[j] = static_cast<T>(static_cast<opmath_t<T>>(v));
    }
  }
};

template <typename T>
struct BernoulliFill {
  double prob;
  __device__ void operator()(const Philox4x32::Block& w, T* dst, int count) const {
    for (int j = 0; j < count; ++j) dst[j] = static_cast<T>(static_cast<opmath_t<T>>(uniform_float(w[j]) < prob ? 1 : 0));
  }
};

// out: n contiguous elements; counters = ceil(n / per_call), the last one may fill fewer.
template <typename T, typename Fill>
__global__ void random_kernel(T* out, int64_t n, int64_t counters, int per_call, uint64_t seed, uint64_t offset,
                              Fill fill) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < counters; c += stride) {
    const Philox4x32::Block w = Philox4x32::generate(seed, offset + static_cast<uint64_t>(c));
    const int64_t first = c * per_call;
    const int64_t left = n - first;
    fill(w, out + first, left < per_call ? static_cast<int>(left) : per_call);
  }
}

template <typename T, typename Fill>
void random_launch(const char* op, const Tensor& out, int per_call, uint64_t seed, uint64_t offset, const Fill& fill) {
  KILN_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs, got strides ",
             shape_str(out.strides()), " for shape ", shape_str(out.sizes()));
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t counters = (n + per_call - 1) / per_call;
  int64_t blocks = (counters + kRandomBlock - 1) / kRandomBlock;
  if (blocks > (1 << 16)) blocks = 1 << 16;
  cuda::DeviceGuard guard(out.device().index);
  cudaStream_t stream = cuda::current_stream(out.device().index).handle;
  random_kernel<T, Fill><<<static_cast<unsigned>(blocks), kRandomBlock, 0, stream>>>(
      static_cast<T*>(out.raw_data_ptr()), n, counters, per_call, seed, offset, fill);
  KILN_CUDA_CHECK_LAUNCH(op);
}

// out: any shape, contiguous (the frontend draws into a temporary for other layouts).
void uniform_cuda(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& from, const Scalar& to) {
  visit_dtype<kFloatingSet>(out.dtype(), "uniform", [&]<typename T>() {
    const int per_call = values_per_counter(RandomDist::Uniform, std::is_same_v<T, double>);
    random_launch<T>("uniform", out, per_call, seed, offset, UniformFill<T>{from.to_double(), to.to_double()});
  });
}

void normal_cuda(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& mean, const Scalar& std) {
  visit_dtype<kFloatingSet>(out.dtype(), "normal", [&]<typename T>() {
    const int per_call = values_per_counter(RandomDist::Normal, std::is_same_v<T, double>);
    random_launch<T>("normal", out, per_call, seed, offset, NormalFill<T>{mean.to_double(), std.to_double()});
  });
}

void randint_cuda(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& low, const Scalar& high) {
  visit_dtype<kNumericSet>(out.dtype(), "randint", [&]<typename T>() {
    const auto lo = static_cast<uint64_t>(low.to_int());
    const uint64_t range = static_cast<uint64_t>(high.to_int()) - lo;
    const int per_call = values_per_counter(RandomDist::RandInt, false, range);
    random_launch<T>("randint", out, per_call, seed, offset, RandIntFill<T>{lo, range, per_call != 4});
  });
}

void bernoulli_cuda(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& prob, const Scalar&) {
  visit_dtype(out.dtype(), "bernoulli", [&]<typename T>() {
    const int per_call = values_per_counter(RandomDist::Bernoulli, false);
    random_launch<T>("bernoulli", out, per_call, seed, offset, BernoulliFill<T>{prob.to_double()});
  });
}

}  // namespace

namespace detail {
void register_cuda_random_kernels() {
  register_kernel<Op::uniform>(DeviceType::CUDA, uniform_cuda);
  register_kernel<Op::normal>(DeviceType::CUDA, normal_cuda);
  register_kernel<Op::randint>(DeviceType::CUDA, randint_cuda);
  register_kernel<Op::bernoulli>(DeviceType::CUDA, bernoulli_cuda);
}
}  // namespace detail
}  // namespace kiln
