// CPU kernels of 2-d convolution and max pooling, NCHW, all tensors contiguous (the frontends in conv.cpp see
// to that).
//
// Convolution is im2col + GEMM, one image at a time, images spread over threads: each thread unfolds its image
// into a private column buffer col (Cin KH KW, OH OW) and multiplies, per group g,
//   out[n][g] (Cout/G, OH OW) = w[g] (Cout/G, Cin/G KH KW) @ col[g] (Cin/G KH KW, OH OW).
// The backward passes are the two transposed products: grad_col = w[g]^T @ grad_out[n][g], folded back into the
// image by col2im (overlapping windows add up), and grad_w[g] += grad_out[n][g] @ col[g]^T summed over images.
// The weight gradient is a sum over images, so its partial sums are taken over a fixed split of the batch, each on
// one thread, and added in a fixed order: the result does not depend on the number of threads.
//
// The products go to the CPU's GEMM (gemm_cpu.h), one product per image and group on the worker's own thread.
// float32 and float64 run natively; float16 and bfloat16 are converted to float32, computed, and rounded once.
// The plain loops of the definition are the oracle in tests/nn/conv_ops_test.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/gemm_cpu.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln {
namespace {

// The products: the CPU's GEMM (gemm_cpu.h), on the calling thread alone inside the per-image workers.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  detail::cpu_gemm<T>(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The geometry of one convolution, read off the tensors.
struct ConvShape {
  int64_t N, C, H, W, O, KH, KW, OH, OW, G;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t cg() const { return C / G; }             // input channels per group
  int64_t og() const { return O / G; }             // output channels per group
  int64_t k() const { return C / G * KH * KW; }    // rows of one group's columns
  int64_t ohw() const { return OH * OW; }
  // A 1x1, stride-1, unpadded convolution reads the image itself as its columns.
  bool pointwise() const { return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

ConvShape conv_shape(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dParams& p) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), out.size(2), out.size(3),
          p.groups, p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1]};
}

// The output columns j in [lo, hi) whose input column j * stride + off lies inside [0, size).
inline void valid_range(int64_t off, int64_t stride, int64_t size, int64_t n, int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
  int64_t h = off > size - 1 ? 0 : (size - 1 - off) / stride + 1;
  *lo = std::min(l, n);
  *hi = std::clamp(h, *lo, n);
}

// col (C KH KW, OH OW) = the windows of one image x (C, H, W); zero where a window overhangs the padding.
template <typename T>
void im2col(const T* x, T* col, const ConvShape& s) {
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t u = 0; u < s.KH; ++u)
      for (int64_t v = 0; v < s.KW; ++v) {
        T* row = col + ((c * s.KH + u) * s.KW + v) * s.ohw();
        int64_t off_w = v * s.dw - s.pw, jlo, jhi;
        valid_range(off_w, s.sw, s.W, s.OW, &jlo, &jhi);
        for (int64_t i = 0; i < s.OH; ++i) {
          T* r = row + i * s.OW;
          int64_t y = i * s.sh - s.ph + u * s.dh;
          if (y < 0 || y >= s.H) {
            std::fill(r, r + s.OW, T(0));
            continue;
          }
          const T* xr = x + (c * s.H + y) * s.W + off_w;
          std::fill(r, r + jlo, T(0));
          if (s.sw == 1) std::copy(xr + jlo, xr + jhi, r + jlo);
          else
            for (int64_t j = jlo; j < jhi; ++j) r[j] = xr[j * s.sw];
          std::fill(r + jhi, r + s.OW, T(0));
        }
      }
}

// x (C, H, W) += col (C KH KW, OH OW) folded back onto the image: the adjoint of im2col.
template <typename T>
void col2im(const T* col, T* x, const ConvShape& s) {
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t u = 0; u < s.KH; ++u)
      for (int64_t v = 0; v < s.KW; ++v) {
        const T* row = col + ((c * s.KH + u) * s.KW + v) * s.ohw();
        int64_t off_w = v * s.dw - s.pw, jlo, jhi;
        valid_range(off_w, s.sw, s.W, s.OW, &jlo, &jhi);
        for (int64_t i = 0; i < s.OH; ++i) {
          int64_t y = i * s.sh - s.ph + u * s.dh;
          if (y < 0 || y >= s.H) continue;
          const T* r = row + i * s.OW;
          T* xr = x + (c * s.H + y) * s.W + off_w;
          for (int64_t j = jlo; j < jhi; ++j) xr[j * s.sw] += r[j];
        }
      }
}

// Images per thread-chunk: enough work per chunk that waking a thread pays.
int64_t image_grain(const ConvShape& s) {
  int64_t work = std::max<int64_t>(1, s.O * s.k() * s.ohw());
  return std::max<int64_t>(1, kDefaultGrain / work);
}

// ---- conv2d forward ----
// out (N, O, OH, OW) = x (N, C, H, W) conv w (O, C/G, KH, KW) + bias (O)
template <typename T>
void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const ConvShape s = conv_shape(x, w, out, p);
  const T* px = x.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  const T* pb = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* po = out.data_ptr<T>();
  const int64_t K = s.k(), P = s.ohw();
  parallel_for(0, s.N, image_grain(s), [&](int64_t n0, int64_t n1) {
    std::vector<T> col(s.pointwise() ? 0 : static_cast<size_t>(s.C * s.KH * s.KW * P));
    for (int64_t n = n0; n < n1; ++n) {
      const T* xn = px + n * s.C * s.H * s.W;
      T* on = po + n * s.O * P;
      const T* cn = xn;
      if (!s.pointwise()) {
        im2col(xn, col.data(), s);
        cn = col.data();
      }
      if (pb)
        for (int64_t o = 0; o < s.O; ++o) std::fill(on + o * P, on + (o + 1) * P, pb[o]);
      for (int64_t g = 0; g < s.G; ++g)
        gemm<T>(false, false, s.og(), P, K, T(1), pw + g * s.og() * K, K, cn + g * K * P, P, pb ? T(1) : T(0),
                on + g * s.og() * P, P);
    }
  });
}

// ---- conv2d backward, input ----
// grad_x (N, C, H, W) from grad_out (N, O, OH, OW) and w: grad_col = w[g]^T @ grad_out[n][g], then col2im.
template <typename T>
void conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& w, const Conv2dParams& p) {
  const ConvShape s = conv_shape(grad_x, w, grad_out, p);
  const T* pg = grad_out.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  T* px = grad_x.data_ptr<T>();
  const int64_t K = s.k(), P = s.ohw();
  parallel_for(0, s.N, image_grain(s), [&](int64_t n0, int64_t n1) {
    std::vector<T> col(s.pointwise() ? 0 : static_cast<size_t>(s.C * s.KH * s.KW * P));
    for (int64_t n = n0; n < n1; ++n) {
      T* xn = px + n * s.C * s.H * s.W;
      const T* gn = pg + n * s.O * P;
      T* cn = s.pointwise() ? xn : col.data();  // pointwise: the columns are the image's own gradient
      for (int64_t g = 0; g < s.G; ++g)
        gemm<T>(true, false, K, P, s.og(), T(1), pw + g * s.og() * K, K, gn + g * s.og() * P, P, T(0), cn + g * K * P,
                P);
      if (!s.pointwise()) {
        std::fill(xn, xn + s.C * s.H * s.W, T(0));
        col2im(col.data(), xn, s);
      }
    }
  });
}

// While alive (and `on`), OpenMP, hence Eigen and OpenBLAS's OpenMP build, gives the calling thread's parallel
// regions one thread.
class OneThreadHere {
 public:
  explicit OneThreadHere(bool on) {
#ifdef _OPENMP
    if (on && !omp_in_parallel()) saved_ = omp_get_max_threads(), omp_set_num_threads(1);
#endif
  }
  ~OneThreadHere() {
#ifdef _OPENMP
    if (saved_ > 0) omp_set_num_threads(saved_);
#endif
  }
  OneThreadHere(const OneThreadHere&) = delete;
  OneThreadHere& operator=(const OneThreadHere&) = delete;

 private:
  int saved_ = 0;
};

// ---- conv2d backward, weight ----
// grad_w (O, C/G, KH, KW) = sum over n of grad_out[n][g] (O/G, OH OW) @ col[n][g]^T (OH OW, C/G KH KW).
// NOTE: the batch is split into a fixed number of slices whatever the thread count; each slice sums its images
// in order into its own partial, and the partials are added in slice order, so the bits do not depend on how
// many threads ran the slices.
template <typename T>
void conv2d_backward_weight(const Tensor& grad_w, const Tensor& grad_out, const Tensor& x, const Conv2dParams& p) {
  const ConvShape s = conv_shape(x, grad_w, grad_out, p);
  const T* pg = grad_out.data_ptr<T>();
  const T* px = x.data_ptr<T>();
  T* pw = grad_w.data_ptr<T>();
  const int64_t K = s.k(), P = s.ohw(), wsize = s.O * K;
  constexpr int64_t kSlices = 16;
  const int64_t slices = std::min<int64_t>(s.N, kSlices), per = (s.N + slices - 1) / slices;
  std::vector<T> partial(static_cast<size_t>(slices * wsize));
  // One slice, run inline: keep the product on this thread too, as it is inside the workers (same blocking, same
  // bits).
  OneThreadHere one_thread(slices == 1);
  parallel_for(0, slices, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> col(s.pointwise() ? 0 : static_cast<size_t>(s.C * s.KH * s.KW * P));
    for (int64_t t = t0; t < t1; ++t) {
      T* acc = partial.data() + t * wsize;
      for (int64_t n = t * per; n < std::min(s.N, (t + 1) * per); ++n) {
        const T* xn = px + n * s.C * s.H * s.W;
        const T* cn = xn;
        if (!s.pointwise()) {
          im2col(xn, col.data(), s);
          cn = col.data();
        }
        const T* gn = pg + n * s.O * P;
        T beta = n == t * per ? T(0) : T(1);
        for (int64_t g = 0; g < s.G; ++g)
          gemm<T>(false, true, s.og(), K, P, T(1), gn + g * s.og() * P, P, cn + g * K * P, P, beta,
                                acc + g * s.og() * K, K);
      }
    }
  });
  std::copy(partial.begin(), partial.begin() + wsize, pw);
  for (int64_t t = 1; t < slices; ++t) {
    const T* src = partial.data() + t * wsize;
    for (int64_t i = 0; i < wsize; ++i) pw[i] += src[i];
  }
}

// ---- max pooling ----
// Outputs whose windows lie whole inside the image (no padding or clipped edge in them) take the vectorized
// path: off[f] is where the window of output f starts in the plane, and the window's elements are taken in the
// same order as in the general loop, but one offset (u, v) at a time across a run of outputs: the inner loop
// then has no dependency from one output to the next and vectorizes, with gathered loads. On W3's 2x2 pooling
// that is ~5-8x the window-at-a-time loop, whose compares are branches random data mispredicts. With padding,
// that is every output but a border a window wide; the border takes the general loop.
// Everything arrives by value: read through references, each store to the int64 indices might change the
// sizes, and the loops would reload them (and not vectorize).
template <typename T>
void max_pool2d_run_inside(const T* xq, T* __restrict best, int64_t* __restrict arg, const int32_t* __restrict off,
                           int64_t n, int64_t W, Pool2dParams p) {
  for (int64_t u = 0; u < p.kernel[0]; ++u)
    for (int64_t v = 0; v < p.kernel[1]; ++v) {
      const auto d = static_cast<int32_t>(u * p.dilation[0] * W + v * p.dilation[1]);
      if (u == 0 && v == 0) {
        for (int64_t f = 0; f < n; ++f) best[f] = xq[off[f]], arg[f] = off[f];
        continue;
      }
      for (int64_t f = 0; f < n; ++f) {
        const int32_t at = off[f] + d;
        const T val = xq[at], cur = best[f];
        // The general loop's rule in two compares: greater, or a NaN over a number; ties keep the first.
        const bool take = !(val <= cur) & (cur == cur);
        best[f] = take ? val : cur;
        arg[f] = take ? at : arg[f];
      }
    }
}

// The window's rows u in [lo, hi) and columns in [vlo[j], vhi[j]) that fall inside the image, per output.
struct PoolWindows {
  std::vector<int64_t> ulo, uhi, vlo, vhi;
};

// Outputs (i, j) for j in [j0, j1) of one output row, window by window over the part inside the image
// (padding is -inf: it never wins).
template <typename T>
void max_pool2d_row_general(const T* xq, T* __restrict best_out, int64_t* __restrict arg_out, int64_t i, int64_t j0,
                            int64_t j1, int64_t ulo, int64_t uhi, const int64_t* __restrict vlo,
                            const int64_t* __restrict vhi, int64_t W, Pool2dParams p) {
  const int64_t yoff = i * p.stride[0] - p.padding[0];
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t zoff = j * p.stride[1] - p.padding[1];
    T best = -std::numeric_limits<T>::infinity();
    int64_t arg = -1;  // only for a window that dilation and padding leave empty
    if (ulo < uhi && vlo[j] < vhi[j]) {
      arg = (yoff + ulo * p.dilation[0]) * W + zoff + vlo[j] * p.dilation[1];
      best = xq[arg];
      for (int64_t u = ulo; u < uhi; ++u) {
        const int64_t row = (yoff + u * p.dilation[0]) * W + zoff;
        for (int64_t v = vlo[j]; v < vhi[j]; ++v) {
          const int64_t at = row + v * p.dilation[1];
          const T val = xq[at];
          // Strictly greater keeps the first of ties; the first NaN wins and stays (val != val: NaN).
          // Written as selects, not branches: on random data a branch mispredicts half the time.
          const bool take = (val > best) | ((val != val) & (best == best));
          best = take ? val : best;
          arg = take ? at : arg;
        }
      }
    }
    best_out[j] = best;
    arg_out[j] = arg;
  }
}

// One plane: whole windows (rows [i0, i1) by columns [j0, j1) of the outputs, starting at off) vectorized, the
// rest by the general loop.
template <typename T>
void max_pool2d_plane(const T* xq, T* __restrict po, int64_t* __restrict pi, const PoolWindows& win,
                      const int32_t* __restrict off, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t OH,
                      int64_t OW, int64_t W, Pool2dParams p) {
  const int64_t* vlo = win.vlo.data();
  const int64_t* vhi = win.vhi.data();
  for (int64_t i = 0; i < OH; ++i) {
    T* best = po + i * OW;
    int64_t* arg = pi + i * OW;
    const int64_t ulo = win.ulo[static_cast<size_t>(i)], uhi = win.uhi[static_cast<size_t>(i)];
    if (i < i0 || i >= i1) {
      max_pool2d_row_general(xq, best, arg, i, 0, OW, ulo, uhi, vlo, vhi, W, p);
      continue;
    }
    max_pool2d_row_general(xq, best, arg, i, 0, j0, ulo, uhi, vlo, vhi, W, p);
    max_pool2d_run_inside(xq, best + j0, arg + j0, off + (i - i0) * (j1 - j0), j1 - j0, W, p);
    max_pool2d_row_general(xq, best, arg, i, j1, OW, ulo, uhi, vlo, vhi, W, p);
  }
}

// [first, last) of the outputs along one dim whose windows lie whole inside the input (empty if none).
void whole_windows(const std::vector<int64_t>& lo, const std::vector<int64_t>& hi, int64_t k, int64_t* first,
                   int64_t* last) {
  const auto n = static_cast<int64_t>(lo.size());
  int64_t f = 0;
  while (f < n && !(lo[static_cast<size_t>(f)] == 0 && hi[static_cast<size_t>(f)] == k)) ++f;
  int64_t l = f;
  while (l < n && lo[static_cast<size_t>(l)] == 0 && hi[static_cast<size_t>(l)] == k) ++l;
  *first = f, *last = l;  // the windows' starts grow with the output, so the whole ones are one run
}

// out, indices (N, C, OH, OW) from x (N, C, H, W); the index of a max is h * W + w in its plane.
template <typename T>
void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();
  int64_t* pi = indices.data_ptr<int64_t>();
  const int64_t work = std::max<int64_t>(1, OH * OW * p.kernel[0] * p.kernel[1]);
  // The part of each window inside the image, computed once: the divisions cost more than the comparisons of a
  // 2x2 window.
  PoolWindows win{std::vector<int64_t>(OH), std::vector<int64_t>(OH), std::vector<int64_t>(OW),
                  std::vector<int64_t>(OW)};
  for (int64_t i = 0; i < OH; ++i)
    valid_range(i * p.stride[0] - p.padding[0], p.dilation[0], H, p.kernel[0], &win.ulo[i], &win.uhi[i]);
  for (int64_t j = 0; j < OW; ++j)
    valid_range(j * p.stride[1] - p.padding[1], p.dilation[1], W, p.kernel[1], &win.vlo[j], &win.vhi[j]);
  int64_t i0 = 0, i1 = 0, j0 = 0, j1 = 0;
  if (H * W <= std::numeric_limits<int32_t>::max()) {  // the vectorized path's offsets are int32
    whole_windows(win.ulo, win.uhi, p.kernel[0], &i0, &i1);
    whole_windows(win.vlo, win.vhi, p.kernel[1], &j0, &j1);
  }
  std::vector<int32_t> off(static_cast<size_t>((i1 - i0) * (j1 - j0)));
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j)
      off[static_cast<size_t>((i - i0) * (j1 - j0) + j - j0)] =
          static_cast<int32_t>((i * p.stride[0] - p.padding[0]) * W + j * p.stride[1] - p.padding[1]);
  parallel_for(0, planes, std::max<int64_t>(1, kDefaultGrain / work), [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q)
      max_pool2d_plane(px + q * H * W, po + q * OH * OW, pi + q * OH * OW, win, off.data(), i0, i1, j0, j1, OH, OW,
                       W, p);
  });
}

// grad_x (N, C, H, W) = zeros, plus grad_out added at each recorded index. One plane per task: no races.
template <typename T>
void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices, const Pool2dParams&) {
  const int64_t planes = grad_x.size(0) * grad_x.size(1), HW = grad_x.size(2) * grad_x.size(3),
                OHW = grad_out.size(2) * grad_out.size(3);
  const T* pg = grad_out.data_ptr<T>();
  const int64_t* pi = indices.data_ptr<int64_t>();
  T* px = grad_x.data_ptr<T>();
  parallel_for(0, planes, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, HW + OHW)), [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      T* xq = px + q * HW;
      std::fill(xq, xq + HW, T(0));
      for (int64_t k = 0; k < OHW; ++k) {
        int64_t at = pi[q * OHW + k];
        if (at >= 0 && at < HW) xq[at] += pg[q * OHW + k];
      }
    }
  });
}

// ---- dtype dispatch ----
// 16-bit floats: every tensor argument goes to float32, the kernel runs there, the output is rounded back once.
bool is_half(DType d) { return d == kFloat16 || d == kBFloat16; }
Tensor f32(const Tensor& t) { return t.defined() ? ops::to(t, kFloat32) : t; }

template <template <typename> class K, typename... Rest>
void run_float(const char* op, const Tensor& out, const Tensor& a, const Tensor& b, const Rest&... rest) {
  switch (out.dtype()) {
    case kFloat32:
      return K<float>::run(out, a, b, rest...);
    case kFloat64:
      return K<double>::run(out, a, b, rest...);
    default:
      KILN_CHECK(false, op, ": CPU kernel supports float32 and float64 (and float16/bfloat16 through float32), got ",
                 out.dtype());
  }
}

template <typename T>
struct ConvFwd {
  static void run(const Tensor& o, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
    conv2d_forward<T>(o, x, w, b, p);
  }
};
template <typename T>
struct ConvBwdIn {
  static void run(const Tensor& gx, const Tensor& g, const Tensor& w, const Conv2dParams& p) {
    conv2d_backward_input<T>(gx, g, w, p);
  }
};
template <typename T>
struct ConvBwdW {
  static void run(const Tensor& gw, const Tensor& g, const Tensor& x, const Conv2dParams& p) {
    conv2d_backward_weight<T>(gw, g, x, p);
  }
};
template <typename T>
struct PoolFwd {
  static void run(const Tensor& o, const Tensor& idx, const Tensor& x, const Pool2dParams& p) {
    max_pool2d_forward<T>(o, idx, x, p);
  }
};
template <typename T>
struct PoolBwd {
  static void run(const Tensor& gx, const Tensor& g, const Tensor& idx, const Pool2dParams& p) {
    max_pool2d_backward<T>(gx, g, idx, p);
  }
};

void conv2d_cpu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  if (is_half(out.dtype())) {
    Tensor o = empty(out.sizes(), kFloat32);
    conv2d_forward<float>(o, f32(x), f32(w), f32(bias), p);
    ops::copy_(out, o);
    return;
  }
  run_float<ConvFwd>("conv2d", out, x, w, bias, p);
}

void conv2d_backward_input_cpu(const Tensor& grad_x, const Tensor& grad_out, const Tensor& w, const Conv2dParams& p) {
  if (is_half(grad_x.dtype())) {
    Tensor o = empty(grad_x.sizes(), kFloat32);
    conv2d_backward_input<float>(o, f32(grad_out), f32(w), p);
    ops::copy_(grad_x, o);
    return;
  }
  run_float<ConvBwdIn>("conv2d_backward_input", grad_x, grad_out, w, p);
}

void conv2d_backward_weight_cpu(const Tensor& grad_w, const Tensor& grad_out, const Tensor& x, const Conv2dParams& p) {
  if (is_half(grad_w.dtype())) {
    Tensor o = empty(grad_w.sizes(), kFloat32);
    conv2d_backward_weight<float>(o, f32(grad_out), f32(x), p);
    ops::copy_(grad_w, o);
    return;
  }
  run_float<ConvBwdW>("conv2d_backward_weight", grad_w, grad_out, x, p);
}

void max_pool2d_cpu(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  if (is_half(out.dtype())) {  // exact: the max of 16-bit values is one of them
    Tensor o = empty(out.sizes(), kFloat32);
    max_pool2d_forward<float>(o, indices, f32(x), p);
    ops::copy_(out, o);
    return;
  }
  run_float<PoolFwd>("max_pool2d", out, indices, x, p);
}

void max_pool2d_backward_cpu(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                             const Pool2dParams& p) {
  if (is_half(grad_x.dtype())) {
    Tensor o = empty(grad_x.sizes(), kFloat32);
    max_pool2d_backward<float>(o, f32(grad_out), indices, p);
    ops::copy_(grad_x, o);
    return;
  }
  run_float<PoolBwd>("max_pool2d_backward", grad_x, grad_out, indices, p);
}

}  // namespace

namespace detail {
void register_conv_cpu_kernels() {
  register_kernel<Op::conv2d>(DeviceType::CPU, conv2d_cpu);
  register_kernel<Op::conv2d_backward_input>(DeviceType::CPU, conv2d_backward_input_cpu);
  register_kernel<Op::conv2d_backward_weight>(DeviceType::CPU, conv2d_backward_weight_cpu);
  register_kernel<Op::max_pool2d>(DeviceType::CPU, max_pool2d_cpu);
  register_kernel<Op::max_pool2d_backward>(DeviceType::CPU, max_pool2d_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
