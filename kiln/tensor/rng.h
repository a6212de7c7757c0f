// Random numbers: Philox 4x32-10, a counter-based generator with (seed, offset) state.
//
// Philox maps (key = seed, counter) to four 32-bit words; there is no hidden sequential state. A random op on a
// tensor of n elements takes counters [offset, offset + ceil(n / per_call)) where element i uses the words of
// counter offset + i / per_call, and then advances the generator's offset past them. So element i's value
// depends only on (seed, offset, i): the same on any number of threads, and the same on the GPU, which runs
// the same function below.
//   per_call = 4 for 32-bit draws (uniform float, randint over < 2^32, bernoulli),
//              2 for 64-bit draws (uniform double, randint over >= 2^32),
//              4 for float normals and 2 for double normals (Box-Muller turns two uniforms into two normals).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

#include "kiln/tensor/macros.h"

namespace kiln {

struct Philox4x32 {
  using Block = std::array<uint32_t, 4>;
  // Ten rounds of Philox-4x32 on a 128-bit counter with a 64-bit key (Salmon et al., "Parallel random
  // numbers: as easy as 1, 2, 3", SC11).
  static KILN_HOST_DEVICE Block generate(Block ctr, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
      uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
      ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0, static_cast<uint32_t>(p1),
             static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1, static_cast<uint32_t>(p0)};
      k0 += 0x9E3779B9u;  // the Weyl sequence that bumps the key between rounds
      k1 += 0xBB67AE85u;
    }
    return ctr;
  }
  // kiln's use: key = seed, counter = (the 64-bit counter, 0).
  static KILN_HOST_DEVICE Block generate(uint64_t seed, uint64_t counter) {
    return generate(Block{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  }
};

// Uniform in [0, 1) from 24 (float) or 53 (double) random bits.
KILN_INLINE float uniform_float(uint32_t x) { return static_cast<float>(x >> 8) * 5.9604644775390625e-08f; }
// Uniform in [0, 1) with only as many bits as a 16-bit float holds (11 for float16, 8 for bfloat16): more
// bits would round values just below 1 up to exactly 1.
KILN_INLINE float uniform_bits(uint32_t x, int bits) {
  return static_cast<float>(x >> (32 - bits)) * (1.0f / static_cast<float>(1u << bits));
}
KILN_INLINE double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * 1.1102230246251565e-16;
}

// A generator: a seed and how many Philox counters have been used. Shareable across threads (ops reserve
// their counters under a lock).
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}

  uint64_t seed() const;
  uint64_t offset() const;
  void manual_seed(uint64_t seed);  // also resets the offset to 0
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves `counters` consecutive counters; returns the seed and the first counter, read together so that a
  // manual_seed on another thread cannot pair one state's seed with another's offset.
  struct Draw {
    uint64_t seed, offset;
  };
  Draw reserve(uint64_t counters);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator random ops use when none is given.
Generator& default_generator();
// Seeds the default generator (and, later, every device's).
void manual_seed(uint64_t seed);

}  // namespace kiln

namespace kiln {

// How many elements one Philox counter (four 32-bit words) fills, for each kind of draw. Shared by the
// frontends (to reserve counters) and every device's kernels (to map element i to its counter).
enum class RandomDist { Uniform, Normal, RandInt, Bernoulli };
// For randint, int_range is high - low (as uint64, so the full int64 span fits).
KILN_INLINE int values_per_counter(RandomDist dist, bool is_double, uint64_t int_range = 0) {
  switch (dist) {
    case RandomDist::Uniform:
    case RandomDist::Normal:
      return is_double ? 2 : 4;
    case RandomDist::RandInt:
      return int_range > 0xffffffffull ? 2 : 4;
    default:
      return 4;
  }
}

}  // namespace kiln
