// CUDA loops for element-wise ops: the device twin of loops_cpu.h.
//
// cuda_kernel<Out, In...>(out, f, inputs...) computes out = f(inputs...) element-wise with the same functors
// the CPU runs (elementwise_functors.h), so both devices do the same arithmetic in the same op-math type.
// Inputs arrive already expanded to out's shape (a broadcast dim has stride 0) and in the dtypes the frontend
// chose. Two paths:
//   - every operand contiguous, or an input that is one broadcast value: each thread handles kVec consecutive
//     elements with one aligned vector load/store per operand (when the pointers allow it), the broadcast
//     value read once;
//   - anything else: dims are coalesced as on the CPU and each element's offsets computed from its linear
//     index (OffsetCalc), in 32-bit arithmetic when every offset fits.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <cuda/std/tuple>
#include <type_traits>
#include <utility>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dtype.h"
#include "kiln/tensor/tensor.h"

namespace kiln::cuda {

inline constexpr int kMaxDims = 16;       // after coalescing; more is an error
inline constexpr int kBlockSize = 256;
inline constexpr int kVec = 4;            // elements per thread on the contiguous path

// The coalesced geometry of N operands of one shape (operand 0 is the output): innermost dim first, strides in
// elements.
template <int N, typename Index = int64_t>
struct OffsetCalc {
  int ndim = 0;
  Index sizes[kMaxDims];
  Index strides[kMaxDims][N];

  // The element offset of each operand for the element at row-major position `linear`.
  KILN_INLINE std::array<Index, N> get(Index linear) const {
    std::array<Index, N> off{};
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      Index i = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[d][k];
    }
    return off;
  }
};

// Builds the coalesced layout of N operands over one shape on the host: size-1 dims dropped, then a dim merged
// into the next inner one wherever every operand steps through both as one run. The operands are tensors of
// that shape, or (for the indexing kernels) any strides over it, e.g. stride 0 along an indexed dim.
template <int N>
struct Layout {
  int ndim = 0;
  int64_t sizes[64];        // innermost first
  int64_t strides[64][N];   // elements
  int64_t numel = 1;

  explicit Layout(const std::array<const Tensor*, N>& ops) {
    std::array<IntArrayRef, N> op_strides;
    for (int k = 0; k < N; ++k) op_strides[k] = ops[k]->strides();
    build(ops[0]->sizes(), op_strides);
  }
  Layout(IntArrayRef shape, const std::array<IntArrayRef, N>& op_strides) { build(shape, op_strides); }

 private:
  void build(IntArrayRef shape, const std::array<IntArrayRef, N>& op_strides) {
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      numel *= shape[d];
      if (shape[d] == 1) continue;
      bool merge = ndim > 0;
      for (int k = 0; k < N && merge; ++k) merge = op_strides[k][d] == strides[ndim - 1][k] * sizes[ndim - 1];
      if (merge) {
        sizes[ndim - 1] *= shape[d];
      } else {
        KILN_CHECK(ndim < 64, "CUDA element-wise: more than 64 dims");
        sizes[ndim] = shape[d];
        for (int k = 0; k < N; ++k) strides[ndim][k] = op_strides[k][d];
        ++ndim;
      }
    }
  }

 public:

  // Every operand is one contiguous run (or, for inputs, a single broadcast value).
  bool contiguous(std::array<bool, N>* broadcast) const {
    if (ndim > 1) return false;
    for (int k = 0; k < N; ++k) {
      int64_t s = ndim == 0 ? 1 : strides[0][k];
      (*broadcast)[k] = ndim == 1 && s == 0;
      if (s != 1 && !(k > 0 && s == 0)) return false;
    }
    return true;
  }

  // The largest offset any operand reaches, to choose 32-bit index math.
  bool fits_int32() const {
    if (numel > INT32_MAX) return false;
    for (int k = 0; k < N; ++k) {
      int64_t reach = 0;
      for (int d = 0; d < ndim; ++d) reach += (sizes[d] - 1) * (strides[d][k] < 0 ? -strides[d][k] : strides[d][k]);
      if (reach > INT32_MAX) return false;
    }
    return true;
  }

  template <typename Index>
  OffsetCalc<N, Index> calc(const char* what) const {
    KILN_CHECK(ndim <= kMaxDims, what, ": a CUDA element-wise op over ", ndim,
               " dims that do not merge (at most ", kMaxDims, "); make an operand contiguous first");
    OffsetCalc<N, Index> c;
    c.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      c.sizes[d] = static_cast<Index>(sizes[d]);
      for (int k = 0; k < N; ++k) c.strides[d][k] = static_cast<Index>(strides[d][k]);
    }
    return c;
  }
};

// The number of blocks for n work items of `per_block` each, capped (the kernels loop over the grid).
inline unsigned grid_for(int64_t n, int64_t per_block) {
  int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks > (1 << 20) ? (1 << 20) : blocks);
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

namespace detail {

// NOTE: a variadic __global__ template may have one parameter pack only, and last; so the kernels take their
// input pointers as one tuple, and these device helpers unpack it.
template <typename... In>
using InPtrs = ::cuda::std::tuple<const In*...>;

// f at element i of contiguous inputs (broadcast bit k set: input k is one value at [0]).
template <typename Out, typename F, typename... In, size_t... I>
__device__ __forceinline__ Out apply_contiguous(const F& f, const InPtrs<In...>& in, unsigned broadcast, int64_t i,
                                                std::index_sequence<I...>) {
  return convert<Out>(f(static_cast<opmath_t<In>>(::cuda::std::get<I>(in)[((broadcast >> I) & 1u) ? 0 : i])...));
}

template <typename Out, typename F, typename... In>
__global__ void contiguous_kernel(int64_t n, F f, unsigned broadcast, Out* out, InPtrs<In...> in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = apply_contiguous<Out>(f, in, broadcast, i, std::index_sequence_for<In...>{});
}

template <typename T>
__device__ __forceinline__ Vec<T, kVec> load_vec(const T* p, int64_t g, bool broadcast) {
  if (broadcast) {
    Vec<T, kVec> v;
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.v[j] = p[0];
    return v;
  }
  return reinterpret_cast<const Vec<T, kVec>*>(p)[g];
}

template <typename Out, typename F, typename... In, size_t... I>
__device__ __forceinline__ Vec<Out, kVec> apply_vec(const F& f, const InPtrs<In...>& in, unsigned broadcast, int64_t g,
                                                    std::index_sequence<I...>) {
  ::cuda::std::tuple<Vec<In, kVec>...> loaded{load_vec(::cuda::std::get<I>(in), g, ((broadcast >> I) & 1u) != 0)...};
  Vec<Out, kVec> result;
#pragma unroll
  for (int j = 0; j < kVec; ++j)
    result.v[j] = convert<Out>(f(static_cast<opmath_t<In>>(::cuda::std::get<I>(loaded).v[j])...));
  return result;
}

// kVec elements per thread with vector loads; n_vec = n / kVec groups (the tail goes to contiguous_kernel).
template <typename Out, typename F, typename... In>
__global__ void vectorized_kernel(int64_t n_vec, F f, unsigned broadcast, Out* out, InPtrs<In...> in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < n_vec; g += stride)
    reinterpret_cast<Vec<Out, kVec>*>(out)[g] = apply_vec<Out>(f, in, broadcast, g, std::index_sequence_for<In...>{});
}

template <typename Out, typename F, typename Index, int N, typename... In, size_t... I>
__device__ __forceinline__ void apply_strided(const F& f, Out* out, const InPtrs<In...>& in,
                                              const std::array<Index, N>& off, std::index_sequence<I...>) {
  out[off[0]] = convert<Out>(f(static_cast<opmath_t<In>>(::cuda::std::get<I>(in)[off[I + 1]])...));
}

// NOTE: the element index counts in 64 bits even when the offsets fit in 32 (Index = int32_t): the grid's stride
// is up to 2^28, so a 32-bit i would pass INT32_MAX on its last step once n exceeds 2^31 - 2^28 (1.88e9
// elements), wrap negative and stay below n.
template <typename Out, typename Index, int N, typename F, typename... In>
__global__ void strided_kernel(int64_t n, OffsetCalc<N, Index> calc, F f, Out* out, InPtrs<In...> in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    apply_strided<Out, F, Index, N, In...>(f, out, in, calc.get(static_cast<Index>(i)),
                                           std::index_sequence_for<In...>{});
}

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace detail

template <typename T>
struct AsTensorRef {
  using type = const Tensor&;
};

// out = f(inputs...) element-wise on out's device, on the current stream. Out and In... are the operands'
// storage types; f takes op-math values (float for the 16-bit floats) and its result is converted to Out.
// `what` names the op in errors.
template <typename Out, typename... In, typename F>
void cuda_kernel(const char* what, const Tensor& out, const F& f, typename AsTensorRef<In>::type... inputs) {
  constexpr int N = 1 + sizeof...(In);
  Layout<N> layout({&out, &inputs...});
  if (layout.numel == 0) return;
  DeviceGuard guard(out.device().index);
  cudaStream_t stream = current_stream(out.device().index).handle;
  Out* out_ptr = static_cast<Out*>(out.raw_data_ptr());
  auto seq = std::index_sequence_for<In...>{};
  std::array<const char*, N - 1> in_ptrs{static_cast<const char*>(inputs.raw_data_ptr())...};
  std::array<int64_t, N - 1> in_sizes{static_cast<int64_t>(sizeof(In))...};
  auto typed = [&]<size_t... I>(std::index_sequence<I...>, const std::array<const char*, N - 1>& p) {
    return detail::InPtrs<In...>{reinterpret_cast<const In*>(p[I])...};
  };
  std::array<bool, N> broadcast{};
  if (layout.contiguous(&broadcast)) {
    unsigned mask = 0;
    for (int k = 1; k < N; ++k) mask |= broadcast[k] ? 1u << (k - 1) : 0u;
    const int64_t n = layout.numel;
    bool vec_ok = detail::aligned(out_ptr, sizeof(Out) * kVec);
    for (int k = 0; k < N - 1; ++k)
      vec_ok = vec_ok && (broadcast[k + 1] || detail::aligned(in_ptrs[k], in_sizes[k] * kVec));
    int64_t done = 0;
    if (vec_ok && n >= kVec) {
      int64_t n_vec = n / kVec;
      detail::vectorized_kernel<Out, F, In...>
          <<<grid_for(n_vec, kBlockSize), kBlockSize, 0, stream>>>(n_vec, f, mask, out_ptr, typed(seq, in_ptrs));
      KILN_CUDA_CHECK_LAUNCH(what);
      done = n_vec * kVec;
    }
    if (done < n) {
      // The tail (or everything, when unaligned): pointers shift past what the vector kernel wrote; a
      // broadcast input keeps its one value.
      auto shifted = in_ptrs;
      for (int k = 0; k < N - 1; ++k)
        if (!broadcast[k + 1]) shifted[k] += done * in_sizes[k];
      detail::contiguous_kernel<Out, F, In...><<<grid_for(n - done, kBlockSize), kBlockSize, 0, stream>>>(
          n - done, f, mask, out_ptr + done, typed(seq, shifted));
      KILN_CUDA_CHECK_LAUNCH(what);
    }
    return;
  }
  if (layout.fits_int32()) {
    auto calc = layout.template calc<int32_t>(what);
    detail::strided_kernel<Out, int32_t, N, F, In...><<<grid_for(layout.numel, kBlockSize), kBlockSize, 0, stream>>>(
        layout.numel, calc, f, out_ptr, typed(seq, in_ptrs));
  } else {
    auto calc = layout.template calc<int64_t>(what);
    detail::strided_kernel<Out, int64_t, N, F, In...><<<grid_for(layout.numel, kBlockSize), kBlockSize, 0, stream>>>(
        layout.numel, calc, f, out_ptr, typed(seq, in_ptrs));
  }
  KILN_CUDA_CHECK_LAUNCH(what);
}

}  // namespace kiln::cuda
