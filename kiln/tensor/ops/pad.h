// Padding by copies (PadMode Reflect, Replicate, Circular), one dim at a time, shared by the CPU and CUDA
// kernels: where an output position reads from, and which outputs read an input position (the gradient's
// gather). Along a dim of n inputs padded by `before` and `after` (out = before + n + after positions), output o
// reads o - before when that is inside, else its mirror about the edge element (reflect: before, after < n),
// the edge element (replicate: n > 0), or the position n further in (circular: 0 <= before, after <= n).
#pragma once

#include <cstdint>

#include "kiln/tensor/macros.h"
#include "kiln/tensor/ops/op_list.h"

namespace kiln::padding {

// "reflect", for messages.
inline const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "?";
}

KILN_INLINE int64_t source(PadMode mode, int64_t o, int64_t n, int64_t before) {
  int64_t s = o - before;
  if (mode == PadMode::Reflect) {
    s = s < 0 ? -s : s;
    return s >= n ? 2 * (n - 1) - s : s;
  }
  if (mode == PadMode::Replicate) return s < 0 ? 0 : (s >= n ? n - 1 : s);
  return s < 0 ? s + n : (s >= n ? s - n : s);
}

// Appends [lo, hi) clipped to [0, out) when not empty.
KILN_INLINE void add_range(int64_t lo, int64_t hi, int64_t out, int64_t* los, int64_t* his, int* count) {
  lo = lo < 0 ? 0 : lo;
  hi = hi > out ? out : hi;
  if (lo < hi) los[*count] = lo, his[*count] = hi, ++*count;
}

// The outputs that read input position i, as up to three ranges [los[k], his[k]) (k < the count returned): its
// own position, and the left and right border outputs that copy it.
KILN_INLINE int readers(PadMode mode, int64_t i, int64_t n, int64_t before, int64_t out, int64_t* los,
                        int64_t* his) {
  int count = 0;
  const int64_t own = i + before;
  add_range(own, own + 1, out, los, his, &count);
  if (mode == PadMode::Reflect) {
    if (i > 0) add_range(before - i, before - i + 1, out, los, his, &count);  // left border: mirrored
    if (i < n - 1) add_range(own + 2 * (n - 1 - i), own + 2 * (n - 1 - i) + 1, out, los, his, &count);
  } else if (mode == PadMode::Replicate) {
    if (i == 0) add_range(0, before, out, los, his, &count);  // every left border output
    if (i == n - 1) add_range(before + n, out, out, los, his, &count);
  } else {
    add_range(own - n, own - n + 1, out, los, his, &count);  // a left border output, wrapped from the right end
    add_range(own + n, own + n + 1, out, los, his, &count);  // a right border output, from the left end
  }
  return count;
}

}  // namespace kiln::padding
