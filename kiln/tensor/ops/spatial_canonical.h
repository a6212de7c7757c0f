// The (B, D, H, W) form the spatial kernels (adaptive pooling, padding by copies) take of a shape whose last k
// dims (one to three) are spatial: the dims before them flattened into B, missing spatial dims 1.
#pragma once

#include <cstddef>

#include "kiln/tensor/shape.h"

namespace kiln::ops {

inline Shape spatial_canonical(IntArrayRef shape, size_t k) {
  Shape c = {1, 1, 1, 1};
  const size_t lead = shape.size() - k;
  for (size_t i = 0; i < lead; ++i) c[0] *= shape[i];
  for (size_t i = 0; i < k; ++i) c[4 - k + i] = shape[lead + i];
  return c;
}

}  // namespace kiln::ops
