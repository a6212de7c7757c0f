// What the resize_taps kernels of both devices share (resize_taps_cpu.cpp, cuda/resize_taps_cuda.cu): the
// tensor seen as (outer, in, inner) around the resized dim, and the taps inverted for the gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/tensor/tensor.h"

namespace kiln::ops::detail {

// x seen as (outer, in, inner) around dim, the output as (outer, out, inner), with `taps` taps per output.
struct TapGeometry {
  int64_t outer = 1, in = 1, out = 1, inner = 1, taps = 1;
};

inline TapGeometry tap_geometry(const Tensor& x_shaped, int64_t dim, int64_t out, int64_t taps) {
  TapGeometry g;
  g.in = x_shaped.size(dim), g.out = out, g.taps = taps;
  for (int64_t k = 0; k < dim; ++k) g.outer *= x_shaped.size(k);
  for (int64_t k = dim + 1; k < x_shaped.dim(); ++k) g.inner *= x_shaped.size(k);
  return g;
}

// The taps inverted: the (output, weight) pairs that read input position p are entries [start[p], start[p + 1])
// of from and weight, in output order, then tap order (a counting sort by position that keeps that order), so
// a gradient that gathers them in turn adds in the order of one that scatters output by output.
template <typename T>
struct InvertedTaps {
  std::vector<int64_t> start, from;
  std::vector<T> weight;
};

// idx, w: the (taps, out) tables, row-major, on the host.
template <typename T>
InvertedTaps<T> invert_taps(const int64_t* idx, const T* w, const TapGeometry& g) {
  InvertedTaps<T> inv;
  const auto entries = static_cast<size_t>(g.out * g.taps);
  inv.start.assign(static_cast<size_t>(g.in + 1), 0);
  inv.from.resize(entries);
  inv.weight.resize(entries);
  for (size_t e = 0; e < entries; ++e) ++inv.start[static_cast<size_t>(idx[e] + 1)];
  for (size_t p = 0; p < static_cast<size_t>(g.in); ++p) inv.start[p + 1] += inv.start[p];
  std::vector<int64_t> next(inv.start.begin(), inv.start.end() - 1);
  for (int64_t d = 0; d < g.out; ++d)
    for (int64_t k = 0; k < g.taps; ++k) {
      const auto at = static_cast<size_t>(next[static_cast<size_t>(idx[k * g.out + d])]++);
      inv.from[at] = d, inv.weight[at] = w[k * g.out + d];
    }
  return inv;
}

}  // namespace kiln::ops::detail
