// CPU kernels of adaptive average pooling (op_list.h: AdaptiveAvgPoolKernel) and of adaptive max pooling's
// argmax (AdaptiveMaxPoolKernel), over (B, D, H, W) with the bins of adaptive_pool.h. Average pooling is separable, so each output row (b, od, oh) first sums its bin's input rows into one
// line of W (a plain add that vectorizes) and then averages that line's bins along W. The gradient runs the same
// two steps backwards: each input row gathers the output rows whose bins hold it, then spreads each output's
// share over its bin along W (or, upsampling, gathers per position). A task owns whole input rows, so no two
// threads write one element and the sums come out in one order on any thread count.
//
// float16 and bfloat16 run in float32 and are rounded once.
#include <algorithm>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/adaptive_pool.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

namespace kiln {
namespace {

using namespace adaptive_pool;  // bin_start, bin_end, first_output, end_output

struct Dims {
  int64_t B, D, H, W, OD, OH, OW;
};
Dims dims_of(const Tensor& in, const Tensor& pooled) {
  return {in.size(0), in.size(1), in.size(2), in.size(3), pooled.size(1), pooled.size(2), pooled.size(3)};
}

// Work per task of about kDefaultGrain element reads.
int64_t grain_for(int64_t reads_per_row) { return std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, reads_per_row)); }

template <typename T>
void forward(const Tensor& out, const Tensor& x) {
  const Dims s = dims_of(x, out);
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();
  const int64_t rows = s.B * s.OD * s.OH;
  const int64_t reads = (s.D / s.OD + 1) * (s.H / s.OH + 1) * s.W;
  parallel_for(0, rows, grain_for(reads), [&](int64_t r0, int64_t r1) {
    std::vector<T> line(static_cast<size_t>(s.W));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t oh = r % s.OH, od = r / s.OH % s.OD, b = r / (s.OH * s.OD);
      const int64_t d0 = bin_start(od, s.D, s.OD), d1 = bin_end(od, s.D, s.OD);
      const int64_t h0 = bin_start(oh, s.H, s.OH), h1 = bin_end(oh, s.H, s.OH);
      std::fill(line.begin(), line.end(), T(0));
      T* __restrict acc = line.data();
      for (int64_t d = d0; d < d1; ++d)
        for (int64_t h = h0; h < h1; ++h) {
          const T* __restrict src = px + ((b * s.D + d) * s.H + h) * s.W;
          for (int64_t w = 0; w < s.W; ++w) acc[w] += src[w];
        }
      const T rows_in_bin = static_cast<T>((d1 - d0) * (h1 - h0));
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        const int64_t w0 = bin_start(ow, s.W, s.OW), w1 = bin_end(ow, s.W, s.OW);
        T sum = 0;
        for (int64_t w = w0; w < w1; ++w) sum += acc[w];
        po[r * s.OW + ow] = sum / (rows_in_bin * static_cast<T>(w1 - w0));
      }
    }
  });
}

template <typename T>
void backward(const Tensor& grad_x, const Tensor& grad_out) {
  const Dims s = dims_of(grad_x, grad_out);
  const T* pg = grad_out.data_ptr<T>();
  T* px = grad_x.data_ptr<T>();
  // Along W, computed once: each output's bin and 1 / its length, and the outputs each input position takes from.
  std::vector<int64_t> first(static_cast<size_t>(s.W)), end(static_cast<size_t>(s.W));
  for (int64_t w = 0; w < s.W; ++w) first[w] = first_output(w, s.W, s.OW), end[w] = end_output(w, s.W, s.OW);
  std::vector<int64_t> starts(static_cast<size_t>(s.OW)), ends(static_cast<size_t>(s.OW));
  std::vector<T> inv_len(static_cast<size_t>(s.OW));
  for (int64_t ow = 0; ow < s.OW; ++ow) {
    starts[ow] = bin_start(ow, s.W, s.OW), ends[ow] = bin_end(ow, s.W, s.OW);
    inv_len[ow] = T(1) / static_cast<T>(ends[ow] - starts[ow]);
  }
  const int64_t rows = s.B * s.D * s.H;
  const int64_t reads = (s.OD / s.D + 2) * (s.OH / s.H + 2) * s.OW + s.W;
  parallel_for(0, rows, grain_for(reads), [&](int64_t r0, int64_t r1) {
    std::vector<T> line(static_cast<size_t>(s.OW));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = r % s.H, d = r / s.H % s.D, b = r / (s.H * s.D);
      // Every output row whose bin holds input row (d, h), each weighed by 1 / its bin's length along D, H and W.
      std::fill(line.begin(), line.end(), T(0));
      T* __restrict acc = line.data();
      const T* __restrict inv = inv_len.data();
      const int64_t od0 = first_output(d, s.D, s.OD), od1 = end_output(d, s.D, s.OD);
      const int64_t oh0 = first_output(h, s.H, s.OH), oh1 = end_output(h, s.H, s.OH);
      for (int64_t od = od0; od < od1; ++od)
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          const T weight = T(1) / static_cast<T>((bin_end(od, s.D, s.OD) - bin_start(od, s.D, s.OD)) *
                                                 (bin_end(oh, s.H, s.OH) - bin_start(oh, s.H, s.OH)));
          const T* __restrict src = pg + ((b * s.OD + od) * s.OH + oh) * s.OW;
          for (int64_t ow = 0; ow < s.OW; ++ow) acc[ow] += src[ow] * weight * inv[ow];
        }
      T* __restrict dst = px + r * s.W;
      if (s.OW <= s.W) {  // bins of one or more positions: each output's share added over its bin, a run at a time
        std::fill(dst, dst + s.W, T(0));
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const T v = acc[ow];
          for (int64_t w = starts[ow]; w < ends[ow]; ++w) dst[w] += v;
        }
      } else {  // more outputs than inputs: each input gathers from the few outputs whose bins hold it
        for (int64_t w = 0; w < s.W; ++w) {
          T sum = 0;
          for (int64_t ow = first[w]; ow < end[w]; ++ow) sum += acc[ow];
          dst[w] = sum;
        }
      }
    }
  });
}

// Each output's max: the first in (d, h, w) order among equal values, and the first NaN, which then stays (as
// max_pool2d's). Column first, as the average's sum is: for every w of an output row, the best of the bins' rows
// (d, h), a loop with no dependency from one w to the next (so it vectorizes); then each bin along W picks among
// its columns' winners, an equal value going to the earlier row, then to the earlier column, which is the
// (d, h, w) order. Scanning each bin whole, one serial compare after another, took 1.3x LibTorch's time.
// 16-bit values compare exactly in float.
// One input row into its columns' best values and the rows they came from: greater, or a NaN over a number, in
// two compares; an equal value keeps the earlier row. Everything arrives by value: read through a reference,
// each store to the int64 rows might change the width, and the loop would neither vectorize nor lose its
// branches.
template <typename T, typename Acc>
void take_row_max(const T* __restrict src, Acc* __restrict best, int64_t* __restrict from, int64_t row, int64_t W) {
  for (int64_t w = 0; w < W; ++w) {
    const Acc v = static_cast<Acc>(src[w]), cur = best[w];
    const bool take = !(v <= cur) & (cur == cur);
    best[w] = take ? v : cur;
    from[w] = take ? row : from[w];
  }
}

template <typename T>
void argmax(const Tensor& indices, const Tensor& x) {
  using Acc = opmath_t<T>;
  const Dims s = dims_of(x, indices);
  const T* px = x.data_ptr<T>();
  int64_t* pi = indices.data_ptr<int64_t>();
  const int64_t rows = s.B * s.OD * s.OH;
  const int64_t reads = (s.D / s.OD + 1) * (s.H / s.OH + 1) * s.W;
  parallel_for(0, rows, grain_for(reads), [&](int64_t r0, int64_t r1) {
    std::vector<Acc> column_best(static_cast<size_t>(s.W));
    std::vector<int64_t> column_row(static_cast<size_t>(s.W));  // d * H + h of each column's best
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t oh = r % s.OH, od = r / s.OH % s.OD, b = r / (s.OH * s.OD);
      const int64_t d0 = bin_start(od, s.D, s.OD), d1 = bin_end(od, s.D, s.OD);
      const int64_t h0 = bin_start(oh, s.H, s.OH), h1 = bin_end(oh, s.H, s.OH);
      const T* volume = px + b * s.D * s.H * s.W;
      Acc* __restrict best = column_best.data();
      int64_t* __restrict from = column_row.data();
      for (int64_t d = d0; d < d1; ++d)
        for (int64_t h = h0; h < h1; ++h) {
          const int64_t row = d * s.H + h;
          const T* __restrict src = volume + row * s.W;
          if (row == d0 * s.H + h0) {
            for (int64_t w = 0; w < s.W; ++w) best[w] = static_cast<Acc>(src[w]), from[w] = row;
            continue;
          }
          take_row_max(src, best, from, row, s.W);
        }
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        const int64_t w0 = bin_start(ow, s.W, s.OW), w1 = bin_end(ow, s.W, s.OW);
        Acc top = best[w0];
        int64_t top_row = from[w0], top_w = w0;
        for (int64_t w = w0 + 1; w < w1; ++w) {
          const Acc v = best[w];
          const bool v_nan = v != v, top_nan = top != top, earlier = from[w] < top_row;
          const bool take = top_nan ? v_nan && earlier : v_nan || v > top || (v == top && earlier);
          if (take) top = v, top_row = from[w], top_w = w;
        }
        pi[r * s.OW + ow] = top_row * s.W + top_w;
      }
    }
  });
}

void adaptive_max_pool_cpu(const Tensor& indices, const Tensor& x) {
  visit_dtype<kFloatingSet>(x.dtype(), "adaptive_max_pool", [&]<typename T>() { argmax<T>(indices, x); });
}

// Runs kernel<T>(a, b) on float32 or float64 tensors, or on float32 copies of 16-bit ones with `a` rounded
// back once.
template <template <typename> class Kernel>
void run(const char* op, const Tensor& a, const Tensor& b) {
  switch (a.dtype()) {
    case kFloat32:
      return Kernel<float>::run(a, b);
    case kFloat64:
      return Kernel<double>::run(a, b);
    case kFloat16:
    case kBFloat16: {
      Tensor a32 = empty(a.sizes(), kFloat32);
      Kernel<float>::run(a32, ops::to(b, kFloat32));
      ops::copy_(a, a32);
      return;
    }
    default:
      KILN_CHECK(false, op, ": expected a floating-point tensor, got ", a.dtype());
  }
}
template <typename T>
struct Forward {
  static void run(const Tensor& out, const Tensor& x) { forward<T>(out, x); }
};
template <typename T>
struct Backward {
  static void run(const Tensor& grad_x, const Tensor& grad_out) { backward<T>(grad_x, grad_out); }
};

void adaptive_avg_pool_cpu(const Tensor& out, const Tensor& x) { run<Forward>("adaptive_avg_pool", out, x); }
void adaptive_avg_pool_backward_cpu(const Tensor& grad_x, const Tensor& grad_out) {
  run<Backward>("adaptive_avg_pool_backward", grad_x, grad_out);
}

}  // namespace

namespace detail {
void register_adaptive_pool_cpu_kernels() {
  register_kernel<Op::adaptive_avg_pool>(DeviceType::CPU, adaptive_avg_pool_cpu);
  register_kernel<Op::adaptive_avg_pool_backward>(DeviceType::CPU, adaptive_avg_pool_backward_cpu);
  register_kernel<Op::adaptive_max_pool>(DeviceType::CPU, adaptive_max_pool_cpu);
}
}  // namespace detail
}  // namespace kiln
