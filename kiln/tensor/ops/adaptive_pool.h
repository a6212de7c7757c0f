// Adaptive average pooling's bins, shared by its CPU and CUDA kernels: along a dim of `in` positions pooled to
// `out`, output o averages the input bin [floor(o in / out), ceil((o + 1) in / out)), as PyTorch's
// adaptive_avg_pool and interpolate's "area" mode do. Bins overlap when in is not a multiple of out.
#pragma once

#include <cstdint>

#include "kiln/tensor/macros.h"

namespace kiln::adaptive_pool {

KILN_INLINE int64_t bin_start(int64_t o, int64_t in, int64_t out) { return o * in / out; }
KILN_INLINE int64_t bin_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

// The outputs whose bins hold input position i: [first_output, end_output). From bin_start(o) <= i, that is
// o < (i + 1) out / in, and bin_end(o) > i, that is o >= i out / in.
KILN_INLINE int64_t first_output(int64_t i, int64_t in, int64_t out) { return i * out / in; }
KILN_INLINE int64_t end_output(int64_t i, int64_t in, int64_t out) { return ((i + 1) * out + in - 1) / in; }

}  // namespace kiln::adaptive_pool
