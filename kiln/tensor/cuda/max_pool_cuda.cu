// CUDA kernels of 2-d max pooling, NCHW, every tensor contiguous: the device twins of ops/conv_cpu.cpp's,
// whose loops are the reference they match (convolution's CUDA kernels, through cuDNN, are in conv_cuda.cu).
//
// Forward: a thread per output; the first index wins ties, a NaN wins and stays, padding is -inf and never
// wins. Backward: grad_x is zeroed, then each grad_out is added at its recorded index
// with atomicAdd (into a float32 buffer for float16/bfloat16, rounded once at the end, as on the CPU).
// NOTE: where windows overlap, floating atomics add in no fixed order, so those sums may differ in the last bits
// from run to run and from the CPU's; where windows do not overlap an element receives at most one add (exact).
// Under deterministic algorithms (determinism.h) a thread per input element gathers instead, in the CPU's order.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/grid_stride.cuh"
#include "kiln/tensor/cuda/operand_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/determinism.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

using cuda::check_operand;

using namespace cuda::grid_stride;  // kThreads, blocks_for, first_index, grid_step

// ---- max pooling ----

struct PoolGeometry {
  int64_t H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// out, indices: (planes, OH, OW) from x: (planes, H, W); an index is y * W + z within its plane.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_pool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t* __restrict__ indices,
                              int64_t total, PoolGeometry g) {
  using M = opmath_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_step()) {
    const int64_t j = i % g.OW, rest = i / g.OW;
    const int64_t oh = rest % g.OH, plane = rest / g.OH;
    const T* xp = x + plane * g.H * g.W;
    // The first in-range element seeds the max (it is the answer when every element is -inf); a window wholly
    // in the padding gives -inf at index -1, as on the CPU.
    M best = -std::numeric_limits<M>::infinity();
    int64_t arg = -1;
    for (int64_t u = 0; u < g.kh; ++u) {
      const int64_t y = oh * g.sh - g.ph + u * g.dh;
      if (y < 0 || y >= g.H) continue;
      for (int64_t v = 0; v < g.kw; ++v) {
        const int64_t z = j * g.sw - g.pw + v * g.dw;
        if (z < 0 || z >= g.W) continue;
        const M val = static_cast<M>(xp[y * g.W + z]);
        // strictly greater keeps the first of ties; the first NaN wins (val != val) and nothing beats it
        if (arg < 0 || val > best || (val != val && best == best)) {
          best = val;
          arg = y * g.W + z;
        }
      }
    }
    out[i] = static_cast<T>(best);
    indices[i] = arg;
  }
}

// dst (planes, HW), zeroed, += grad_out (planes, OHW) at the recorded indices. D: the type summed in (T for
// float32/float64, float for the 16-bit floats).
template <typename T, typename D>
__global__ void __launch_bounds__(kThreads)
    max_pool2d_backward_kernel(const T* __restrict__ grad_out, const int64_t* __restrict__ indices, D* dst,
                               int64_t total, int64_t HW, int64_t OHW) {
  for (int64_t i = first_index(); i < total; i += grid_step()) {
    const int64_t at = indices[i];
    if (at < 0 || at >= HW) continue;  // -1: a window wholly in the padding had no element to pass it to
    atomicAdd(dst + (i / OHW) * HW + at, static_cast<D>(static_cast<opmath_t<T>>(grad_out[i])));
  }
}

// The deterministic form (determinism.h): one thread per element of grad_x (planes, H, W) sums the gradients of
// the windows that picked it, in increasing output order as the CPU adds them, in D; no zeroing, no atomics. It
// finds those windows from the geometry, so it relies on the indices being the forward's (each inside its
// window), as autograd's always are.
template <typename T, typename D>
__global__ void __launch_bounds__(kThreads)
    max_pool2d_backward_ordered_kernel(const T* __restrict__ grad_out, const int64_t* __restrict__ indices,
                                       T* __restrict__ grad_x, int64_t total, PoolGeometry g) {
  for (int64_t i = first_index(); i < total; i += grid_step()) {
    const int64_t z = i % g.W, rest = i / g.W;
    const int64_t y = rest % g.H, plane = rest / g.H, at = y * g.W + z;
    D acc = D(0);
    // A window row oh holds y where oh * sh - ph + u * dh == y for a tap u; a larger u means a smaller oh, so u
    // runs down for oh (and, within a row, v for ow) to run up.
    for (int64_t u = g.kh - 1; u >= 0; --u) {
      const int64_t ty = y + g.ph - u * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.OH) continue;
      const int64_t oh = ty / g.sh;
      for (int64_t v = g.kw - 1; v >= 0; --v) {
        const int64_t tz = z + g.pw - v * g.dw;
        if (tz < 0 || tz % g.sw != 0 || tz / g.sw >= g.OW) continue;
        const int64_t o = (plane * g.OH + oh) * g.OW + tz / g.sw;
        if (indices[o] == at) acc += static_cast<D>(static_cast<opmath_t<T>>(grad_out[o]));
      }
    }
    grad_x[i] = static_cast<T>(acc);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) round_to_kernel(const float* __restrict__ src, T* __restrict__ dst,
                                                            int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_step()) dst[i] = static_cast<T>(src[i]);
}

template <typename T>
void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolGeometry& g,
                        cudaStream_t stream) {
  const int64_t total = out.numel();
  max_pool2d_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
      static_cast<const T*>(x.raw_data_ptr()), static_cast<T*>(out.raw_data_ptr()),
      static_cast<int64_t*>(indices.raw_data_ptr()), total, g);
  KILN_CUDA_CHECK_LAUNCH("max_pool2d");
}

template <typename T>
void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices, const PoolGeometry& geom,
                         cudaStream_t stream) {
  const int64_t HW = grad_x.size(2) * grad_x.size(3), OHW = grad_out.size(2) * grad_out.size(3);
  const int64_t total = grad_out.numel(), n = grad_x.numel();
  const T* g = static_cast<const T*>(grad_out.raw_data_ptr());
  const int64_t* idx = static_cast<const int64_t*>(indices.raw_data_ptr());
  if (are_deterministic_algorithms_enabled()) {
    using D = std::conditional_t<sizeof(T) == 2, float, T>;  // the 16-bit floats sum in float, as on the CPU
    max_pool2d_backward_ordered_kernel<T, D><<<blocks_for(n), kThreads, 0, stream>>>(
        g, idx, static_cast<T*>(grad_x.raw_data_ptr()), n, geom);
    KILN_CUDA_CHECK_LAUNCH("max_pool2d_backward");
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    T* dst = static_cast<T*>(grad_x.raw_data_ptr());
    KILN_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * sizeof(T), stream), "max_pool2d_backward");
    if (total == 0) return;
    max_pool2d_backward_kernel<T, T><<<blocks_for(total), kThreads, 0, stream>>>(g, idx, dst, total, HW, OHW);
    KILN_CUDA_CHECK_LAUNCH("max_pool2d_backward");
  } else {
    // NOTE: 16-bit atomics would round every partial sum; a float32 buffer rounds once.
    Tensor acc = empty(grad_x.sizes(), TensorOptions(kFloat32).device(grad_x.device()));
    float* dst = static_cast<float*>(acc.raw_data_ptr());
    KILN_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * sizeof(float), stream), "max_pool2d_backward");
    if (total > 0) {
      max_pool2d_backward_kernel<T, float><<<blocks_for(total), kThreads, 0, stream>>>(g, idx, dst, total, HW, OHW);
      KILN_CUDA_CHECK_LAUNCH("max_pool2d_backward");
    }
    round_to_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(dst, static_cast<T*>(grad_x.raw_data_ptr()), n);
    KILN_CUDA_CHECK_LAUNCH("max_pool2d_backward");
  }
}

PoolGeometry pool_geometry(const Tensor& x, const Tensor& out, const Pool2dParams& p) {
  return {x.size(2),     x.size(3),     out.size(2),   out.size(3),   p.kernel[0],   p.kernel[1],
          p.stride[0],   p.stride[1],   p.padding[0],  p.padding[1],  p.dilation[0], p.dilation[1]};
}

// out (N, C, OH, OW), indices (int64, out's shape) = the max of each window of x (N, C, H, W) and where it is.
void max_pool2d_cuda(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  check_operand("max_pool2d", "out", out, out, out.dtype(), 4);
  check_operand("max_pool2d", "x", x, out, out.dtype(), 4);
  check_operand("max_pool2d", "indices", indices, out, kInt64, 4);
  KILN_CHECK(indices.sizes() == out.sizes() && x.size(0) == out.size(0) && x.size(1) == out.size(1),
             "max_pool2d: out ", shape_str(out.sizes()), " and indices ", shape_str(indices.sizes()),
             " do not fit x ", shape_str(x.sizes()));
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(out.device().index);
  cudaStream_t stream = cuda::current_stream(out.device().index).handle;
  const PoolGeometry g = pool_geometry(x, out, p);
  visit_dtype<kFloatingSet>(out.dtype(), "max_pool2d (CUDA)",
                            [&]<typename T>() { max_pool2d_forward<T>(out, indices, x, g, stream); });
}

// grad_x (N, C, H, W) = zeros plus grad_out (N, C, OH, OW) added at the recorded indices.
void max_pool2d_backward_cuda(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                              const Pool2dParams& p) {
  check_operand("max_pool2d_backward", "grad_x", grad_x, grad_x, grad_x.dtype(), 4);
  check_operand("max_pool2d_backward", "grad_out", grad_out, grad_x, grad_x.dtype(), 4);
  check_operand("max_pool2d_backward", "indices", indices, grad_x, kInt64, 4);
  KILN_CHECK(indices.sizes() == grad_out.sizes() && grad_x.size(0) == grad_out.size(0) &&
                 grad_x.size(1) == grad_out.size(1),
             "max_pool2d_backward: grad_out ", shape_str(grad_out.sizes()), " and indices ",
             shape_str(indices.sizes()), " do not fit grad_x ", shape_str(grad_x.sizes()));
  if (grad_x.numel() == 0) return;
  cuda::DeviceGuard guard(grad_x.device().index);
  cudaStream_t stream = cuda::current_stream(grad_x.device().index).handle;
  visit_dtype<kFloatingSet>(grad_x.dtype(), "max_pool2d_backward (CUDA)",
                            [&]<typename T>() {
                              max_pool2d_backward<T>(grad_x, grad_out, indices, pool_geometry(grad_x, grad_out, p),
                                                     stream);
                            });
}

}  // namespace

namespace detail {
void register_cuda_max_pool_kernels() {
  register_kernel<Op::max_pool2d>(DeviceType::CUDA, max_pool2d_cuda);
  register_kernel<Op::max_pool2d_backward>(DeviceType::CUDA, max_pool2d_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
