// Helpers shared by the nn tests.
#pragma once

#include "kiln/kiln.h"

namespace kiln::test {

// A float64 tensor of standard normal values, reproducible from `seed`.
inline Tensor randn64(IntArrayRef shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, kFloat64, &g);
}

}  // namespace kiln::test
