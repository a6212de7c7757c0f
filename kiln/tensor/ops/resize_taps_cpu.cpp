// CPU kernels of resize_taps (resize_taps.h): x contiguous, seen as (outer, in, inner) around the resized dim,
// the output as (outer, out, inner).
//
// Forward: along the last dim (inner 1), each output element reads its taps straight from its row; otherwise
// each output line (outer, d) is the weighted sum of its taps' input lines of `inner` elements, a loop that
// vectorizes. Backward: each task owns whole slabs (outer) of grad_x, zeroes them and adds each output line's
// share into its taps' lines, in output order; along the last dim, each input element gathers the same shares
// in the same order instead (the taps inverted once). No two threads write one element, and the sums come out
// in one order on any thread count.
//
// Compiled with -ffp-contract=off (kiln/tensor/CMakeLists.txt): each product is rounded before it is added, as
// in the composite of index_selects, multiplies and adds this replaces, so the forward has its bits.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/ops/resize_taps_layout.h"
#include "kiln/tensor/parallel.h"

namespace kiln {
namespace {

using ops::detail::TapGeometry;

// One output line of `inner` elements: sum over taps of weight * input line, in tap order. By value, so that
// the stores cannot be taken to change the bounds.
template <typename T>
void weighted_lines(T* __restrict dst, const T* __restrict src, const int64_t* __restrict idx,
                    const T* __restrict w, int64_t d, int64_t out, int64_t taps, int64_t inner) {
  const T* first = src + idx[d] * inner;
  const T w0 = w[d];
  for (int64_t i = 0; i < inner; ++i) dst[i] = first[i] * w0;
  for (int64_t k = 1; k < taps; ++k) {
    const T* line = src + idx[k * out + d] * inner;
    const T wk = w[k * out + d];
    for (int64_t i = 0; i < inner; ++i) dst[i] = dst[i] + line[i] * wk;
  }
}

// One row along the last dim: each output element from its taps in the row.
template <typename T>
void weighted_row(T* __restrict dst, const T* __restrict src, const int64_t* __restrict idx, const T* __restrict w,
                  int64_t out, int64_t taps) {
  for (int64_t d = 0; d < out; ++d) {
    T acc = src[idx[d]] * w[d];
    for (int64_t k = 1; k < taps; ++k) acc = acc + src[idx[k * out + d]] * w[k * out + d];
    dst[d] = acc;
  }
}

template <typename T>
void forward(const Tensor& y, const Tensor& x, int64_t dim, const Tensor& idx_t, const Tensor& w_t) {
  const TapGeometry g = ops::detail::tap_geometry(x, dim, y.size(dim), idx_t.size(0));
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  const int64_t* idx = idx_t.data_ptr<int64_t>();
  const T* w = w_t.data_ptr<T>();
  if (g.inner == 1) {
    parallel_for(0, g.outer, std::max<int64_t>(1, kDefaultGrain / (g.out * g.taps)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) weighted_row(py + r * g.out, px + r * g.in, idx, w, g.out, g.taps);
    });
    return;
  }
  parallel_for(0, g.outer * g.out, std::max<int64_t>(1, kDefaultGrain / (g.inner * g.taps)),
               [&](int64_t l0, int64_t l1) {
                 for (int64_t l = l0; l < l1; ++l) {
                   const int64_t o = l / g.out, d = l % g.out;
                   weighted_lines(py + l * g.inner, px + o * g.in * g.inner, idx, w, d, g.out, g.taps, g.inner);
                 }
               });
}

// grad_x's slab for one outer index: each output line's share added onto its taps' lines.
template <typename T>
void scatter_slab(T* __restrict gx, const T* __restrict gy, const int64_t* __restrict idx, const T* __restrict w,
                  int64_t in, int64_t out, int64_t taps, int64_t inner) {
  std::fill(gx, gx + in * inner, T(0));
  for (int64_t d = 0; d < out; ++d)
    for (int64_t k = 0; k < taps; ++k) {
      T* line = gx + idx[k * out + d] * inner;
      const T* from = gy + d * inner;
      const T wk = w[k * out + d];
      for (int64_t i = 0; i < inner; ++i) line[i] = line[i] + from[i] * wk;
    }
}

// One row along the last dim: each input element gathers the outputs whose taps read it. The (output, weight)
// pairs of input i are entries [start[i], start[i + 1]) of `from` and `weight`, in output order, then tap order:
// the order the slab loop adds them in, so the sums have its bits. Added one after another into one element, as
// the slab loop does along the last dim, each add would wait for the store before it.
template <typename T>
void gather_row(T* __restrict gx, const T* __restrict gy, const int64_t* __restrict start,
                const int64_t* __restrict from, const T* __restrict weight, int64_t in) {
  for (int64_t i = 0; i < in; ++i) {
    T acc = T(0);
    for (int64_t e = start[i]; e < start[i + 1]; ++e) acc = acc + gy[from[e]] * weight[e];
    gx[i] = acc;
  }
}

template <typename T>
void backward(const Tensor& grad_x, const Tensor& grad_y, int64_t dim, const Tensor& idx_t, const Tensor& w_t) {
  const TapGeometry g = ops::detail::tap_geometry(grad_x, dim, grad_y.size(dim), idx_t.size(0));
  const T* gy = grad_y.data_ptr<T>();
  T* gx = grad_x.data_ptr<T>();
  const int64_t* idx = idx_t.data_ptr<int64_t>();
  const T* w = w_t.data_ptr<T>();
  if (g.inner == 1) {
    // The taps inverted once for every row: for each input position, the (output, weight) pairs that read it.
    const ops::detail::InvertedTaps<T> inv = ops::detail::invert_taps(idx, w, g);
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / (g.out * g.taps + g.in));
    parallel_for(0, g.outer, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        gather_row(gx + r * g.in, gy + r * g.out, inv.start.data(), inv.from.data(), inv.weight.data(), g.in);
    });
    return;
  }
  const int64_t work = std::max<int64_t>(1, (g.out * g.taps + g.in) * g.inner);
  parallel_for(0, g.outer, std::max<int64_t>(1, kDefaultGrain / work), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      scatter_slab(gx + o * g.in * g.inner, gy + o * g.out * g.inner, idx, w, g.in, g.out, g.taps, g.inner);
  });
}

void resize_taps_cpu(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& w) {
  visit_dtype<kFloat32Set | kFloat64Set>(x.dtype(), "resize_taps",
                                         [&]<typename T>() { forward<T>(out, x, dim, idx, w); });
}

void resize_taps_backward_cpu(const Tensor& grad_x, const Tensor& grad_out, int64_t dim, const Tensor& idx,
                              const Tensor& w) {
  visit_dtype<kFloat32Set | kFloat64Set>(grad_out.dtype(), "resize_taps backward",
                                         [&]<typename T>() { backward<T>(grad_x, grad_out, dim, idx, w); });
}

}  // namespace

namespace detail {
void register_resize_taps_cpu_kernels() {
  register_kernel<Op::resize_taps>(DeviceType::CPU, resize_taps_cpu);
  register_kernel<Op::resize_taps_backward>(DeviceType::CPU, resize_taps_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
