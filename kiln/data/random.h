// Deterministic randomness for the data layer: seeds derived from (seed, epoch, index).
//
// Everything random in kiln::data (shuffling, weighted sampling, random transforms, random_split) draws from a
// kiln::Generator whose seed is a hash of a user seed and the position it is used at: the epoch for samplers,
// (epoch, example index) for transforms. No state is carried from one draw to the next, so results do not
// depend on how many worker threads a DataLoader runs or in which order they reach an example.
#pragma once

#include <cstdint>

#include "kiln/tensor/rng.h"

namespace kiln::data {

// SplitMix64's finalizer: a bijection on 64 bits that spreads every input bit over the output.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed for position `a` (and `b`) of the stream seeded by `seed`.
inline uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0) { return mix64(mix64(mix64(seed) ^ a) ^ b); }

// One 32-bit draw and one uniform double in [0, 1) from `gen` (each takes one Philox counter).
inline uint32_t draw_u32(Generator& gen) {
  auto d = gen.reserve(1);
  return Philox4x32::generate(d.seed, d.offset)[0];
}
inline double draw_uniform(Generator& gen) {
  auto d = gen.reserve(1);
  auto w = Philox4x32::generate(d.seed, d.offset);
  return uniform_double(w[0], w[1]);
}
// Uniform integer in [0, n) (n > 0), by rejection so that no value is favoured.
inline uint64_t draw_below(Generator& gen, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    auto d = gen.reserve(1);
    auto w = Philox4x32::generate(d.seed, d.offset);
    uint64_t x = static_cast<uint64_t>(w[0]) << 32 | w[1];
    if (x < limit) return x % n;
  }
}

}  // namespace kiln::data
