// CUDA kernels of the reductions: sum, mean, prod, amax, amin, all, any, norm, var, and max/min along a dim
// with the index of the first extreme. The CPU kernels (ops/reduce_cpu.cpp) are the reference they match.
//
// Every reduction is first seen as x[outer, red, inner] with three strides: the kept dims before the reduced
// ones merge into `outer`, the reduced dims into `red`, the kept dims after them into `inner` (no copy). When
// the dims do not merge that way (a kept dim between two reduced ones, a layout whose dims do not merge), x is
// copied with the reduced dims moved last, giving (outputs, red, 1). Output o * inner + i is out's element
// at that row-major position of the kept dims, so out must be contiguous (the frontends allocate it so).
// Two kernels:
//   rows    (inner == 1): a warp per output (short rows) or a block per output, 16-byte vector loads when
//           the row is contiguous, warp shuffles and a shared-memory block reduce;
//   columns (inner > 1): 32 neighbouring outputs per block, read coalesced, 8 threads down each column.
// When there are too few outputs to fill the GPU (a full sum), the reduced range is split across blocks
// (grid.y); each writes its partial accumulator and a second kernel combines them in a fixed order. Nothing
// uses atomics, so results have the same bits on every run.
//
// Accumulators: float32 and the 16-bit floats accumulate in float32, float64 in double (the CPU uses double
// for all floats; the tests compare within per-dtype tolerances); integer and bool sums and products in int64,
// wrapping around like the CPU's.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/reduce_cuda.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

namespace kiln {

int cuda::sm_count(int device) {
  static std::atomic<int> cache[64] = {};
  if (device < 0 || device >= 64) device = 0;
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "sm_count");
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

namespace {

constexpr int kThreads = 256;
using cuda::kWarpSize;

// ---- element types and the ops' pieces (host and device) ----

template <typename A>
KILN_INLINE bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

template <typename Out, typename A>
KILN_INLINE Out from_acc(A a) {
  if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>) return Out(static_cast<float>(a));
  else return static_cast<Out>(a);
}

// The accumulator of sums and products: float for float32 and the 16-bit floats, double for float64, int64
// for integers and bools.
template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;

// Maps an element (and its position along the reduced range) into the accumulator's domain.
template <typename A>
struct Load {
  template <typename T>
  KILN_INLINE A operator()(T v, int64_t) const { return static_cast<A>(static_cast<opmath_t<T>>(v)); }
};
template <typename A>
struct AbsLoad {
  template <typename T>
  KILN_INLINE A operator()(T v, int64_t) const { return fabs(static_cast<A>(static_cast<opmath_t<T>>(v))); }
};
template <typename A>
struct SquareLoad {
  template <typename T>
  KILN_INLINE A operator()(T v, int64_t) const {
    A d = static_cast<A>(static_cast<opmath_t<T>>(v));
    return d * d;
  }
};
template <typename A>
struct NonzeroLoad {
  template <typename T>
  KILN_INLINE A operator()(T v, int64_t) const { return static_cast<opmath_t<T>>(v) != opmath_t<T>(0) ? A(1) : A(0); }
};
template <typename A>
struct PowAbsLoad {
  A p;
  template <typename T>
  KILN_INLINE A operator()(T v, int64_t) const { return pow(fabs(static_cast<A>(static_cast<opmath_t<T>>(v))), p); }
};
// A NaN is nonzero, hence true, as on the CPU.
struct TruthLoad {
  template <typename T>
  KILN_INLINE bool operator()(T v, int64_t) const { return static_cast<opmath_t<T>>(v) != opmath_t<T>(0); }
};

// Integer sums and products wrap around (unsigned arithmetic: signed overflow is undefined).
struct Plus {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    else return a + b;
  }
};
struct Times {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    else return a * b;
  }
};
// max/min that let a NaN through, as the CPU's amax does.
struct NanMax {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const { return (b > a || is_nan(b)) && !is_nan(a) ? b : a; }
};
struct NanMin {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const { return (b < a || is_nan(b)) && !is_nan(a) ? b : a; }
};
struct And {
  KILN_INLINE bool operator()(bool a, bool b) const { return a && b; }
};
struct Or {
  KILN_INLINE bool operator()(bool a, bool b) const { return a || b; }
};

// Turn the final accumulator (and the count of elements reduced) into the output value.
template <typename Out>
struct AsIs {
  using type = Out;
  template <typename A>
  KILN_INLINE Out operator()(A a, int64_t) const { return from_acc<Out>(a); }
};
template <typename Out>
struct MeanOf {
  using type = Out;
  // NOTE: an empty mean is 0 / 0 = nan, as on the CPU.
  template <typename A>
  KILN_INLINE Out operator()(A a, int64_t n) const { return from_acc<Out>(a / static_cast<A>(n)); }
};
template <typename Out>
struct SqrtOf {
  using type = Out;
  template <typename A>
  KILN_INLINE Out operator()(A a, int64_t) const { return from_acc<Out>(sqrt(a)); }
};
template <typename Out, typename A>
struct PowOf {
  using type = Out;
  A inv_p;
  KILN_INLINE Out operator()(A a, int64_t) const { return from_acc<Out>(pow(a, inv_p)); }
};

// Where the results go: values (out), and for max/min along a dim, the int64 indices.
struct OutPtrs {
  void* values = nullptr;
  int64_t* indices = nullptr;
};

// A reduction as the kernels see it: Acc, identity(), fold(acc, element, position), combine(a, b) (a holds
// elements before b's, though every combine here gives the same answer either way up to rounding), and
// store(out, i, acc, count).
template <typename A, typename Map, typename Op, typename Finish>
struct Reducer {
  using Acc = A;
  A init;
  Map map;
  Op op;
  Finish finish;
  KILN_INLINE A identity() const { return init; }
  template <typename T>
  KILN_INLINE A fold(A acc, T v, int64_t r) const { return op(acc, map(v, r)); }
  KILN_INLINE A operator()(A a, A b) const { return op(a, b); }
  KILN_INLINE void store(const OutPtrs& out, int64_t i, A acc, int64_t n) const {
    static_cast<typename Finish::type*>(out.values)[i] = finish(acc, n);
  }
};

template <typename A, typename Map, typename Op, typename Finish>
Reducer<A, Map, Op, Finish> reducer(A init, Map map, Op op, Finish finish) {
  return {init, map, op, finish};
}

// ---- var: count, mean and sum of squared deviations, merged with Chan et al.'s formula ----

template <typename M>
struct Moments {
  int64_t n;
  M mean, m2;
};

// param: the correction. M2 / max(0, N - correction), so N <= correction gives inf or nan, as on the CPU.
template <typename T>
struct VarReducer {
  using M = opmath_t<T>;
  using Acc = Moments<M>;
  double correction;
  KILN_INLINE Acc identity() const { return {0, M(0), M(0)}; }
  KILN_INLINE Acc fold(Acc a, T t, int64_t) const {  // Welford's update
    M v = static_cast<M>(t);
    a.n += 1;
    M d = v - a.mean;
    a.mean += d / static_cast<M>(a.n);
    a.m2 += d * (v - a.mean);
    return a;
  }
  KILN_INLINE Acc operator()(Acc a, Acc b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const M d = b.mean - a.mean, fb = static_cast<M>(b.n) / static_cast<M>(n);
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * (static_cast<M>(a.n) * fb)};
  }
  KILN_INLINE void store(const OutPtrs& out, int64_t i, Acc acc, int64_t n) const {
    const M dof = static_cast<M>(fmax(0.0, static_cast<double>(n) - correction));
    static_cast<T*>(out.values)[i] = from_acc<T>(acc.m2 / dof);
  }
};

// ---- max / min along a dim, with the index ----

template <typename C>
struct ValueIndex {
  C value;
  int64_t index;  // -1: nothing seen yet
};

// The first extreme wins ties and a NaN beats everything (the first NaN among several): decided by the
// indices, so the answer does not depend on the order partial results meet in.
template <typename T, bool kMax>
struct ArgReducer {
  using C = opmath_t<T>;
  using Acc = ValueIndex<C>;
  KILN_INLINE Acc identity() const { return {C(0), -1}; }
  KILN_INLINE Acc operator()(Acc a, Acc b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    const bool an = is_nan(a.value), bn = is_nan(b.value);
    if (an || bn) {
      if (an && bn) return b.index < a.index ? b : a;
      return an ? a : b;
    }
    if (kMax ? b.value > a.value : b.value < a.value) return b;
    if (a.value == b.value && b.index < a.index) return b;
    return a;
  }
  KILN_INLINE Acc fold(Acc acc, T v, int64_t r) const { return (*this)(acc, Acc{static_cast<C>(v), r}); }
  KILN_INLINE void store(const OutPtrs& out, int64_t i, Acc acc, int64_t) const {
    static_cast<T*>(out.values)[i] = from_acc<T>(acc.value);
    out.indices[i] = acc.index;
  }
};

// ---- kernels ----

// x[o, r, i] = x[o * s_outer + r * s_red + i * s_inner], strides in elements.
struct Geometry {
  int64_t outer = 1, red = 1, inner = 1;
  int64_t s_outer = 0, s_red = 0, s_inner = 0;
};

template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T v[kN];
};

// Folds p[r * stride], r in [r0, r1), r = r0 + lane, r0 + lane + lanes, ... into acc.
template <typename T, typename R>
__device__ __forceinline__ typename R::Acc fold_range(const T* __restrict__ p, int64_t r0, int64_t r1, int64_t stride,
                                                      int lane, int lanes, const R& red, typename R::Acc acc) {
  if (stride != 1) {
    for (int64_t r = r0 + lane; r < r1; r += lanes) acc = red.fold(acc, p[r * stride], r);
    return acc;
  }
  // Contiguous: a scalar head up to a 16-byte boundary, then 16-byte loads, four in flight per thread.
  using V = Vec16<T>;
  constexpr int kN = V::kN;
  const T* q = p + r0;
  const int64_t n = r1 - r0;
  int64_t head = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(q) % 16) % 16) / static_cast<int64_t>(sizeof(T));
  if (head > n) head = n;
  for (int64_t k = lane; k < head; k += lanes) acc = red.fold(acc, q[k], r0 + k);
  const V* qv = reinterpret_cast<const V*>(q + head);
  const int64_t nv = (n - head) / kN, base = r0 + head;
  int64_t g = lane;
  for (; g + 3 * lanes < nv; g += 4 * lanes) {
    V a = qv[g], b = qv[g + lanes], c = qv[g + 2 * lanes], d = qv[g + 3 * lanes];
#pragma unroll
    for (int j = 0; j < kN; ++j) acc = red.fold(acc, a.v[j], base + g * kN + j);
#pragma unroll
    for (int j = 0; j < kN; ++j) acc = red.fold(acc, b.v[j], base + (g + lanes) * kN + j);
#pragma unroll
    for (int j = 0; j < kN; ++j) acc = red.fold(acc, c.v[j], base + (g + 2 * lanes) * kN + j);
#pragma unroll
    for (int j = 0; j < kN; ++j) acc = red.fold(acc, d.v[j], base + (g + 3 * lanes) * kN + j);
  }
  for (; g < nv; g += lanes) {
    V a = qv[g];
#pragma unroll
    for (int j = 0; j < kN; ++j) acc = red.fold(acc, a.v[j], base + g * kN + j);
  }
  for (int64_t k = head + nv * kN + lane; k < n; k += lanes) acc = red.fold(acc, q[k], r0 + k);
  return acc;
}

// inner == 1. lanes (32 or kThreads) threads per output; block (x, y) reduces the split y of outputs
// x * (kThreads / lanes) ... of `chunk` positions. With one split the result is stored, else the partial
// accumulator goes to partial[o * splits + y].
template <typename T, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_kernel(const T* __restrict__ x, Geometry g, int64_t chunk, int lanes, R red,
                       typename R::Acc* __restrict__ partial, OutPtrs out) {
  using A = typename R::Acc;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / lanes) + threadIdx.x / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk, r1 = min(g.red, r0 + chunk);
  A acc = red.identity();
  if (row < g.outer) acc = fold_range(x + row * g.s_outer, r0, r1, g.s_red, lane, lanes, red, acc);
  if (lanes == kWarpSize) acc = cuda::warp_reduce(acc, red);
  else acc = cuda::block_reduce<kThreads>(acc, red, cuda::shared_buffer<A, kThreads / kWarpSize>());
  if (lane != 0 || row >= g.outer) return;
  if (gridDim.y == 1) red.store(out, row, acc, g.red);
  else partial[row * gridDim.y + blockIdx.y] = acc;
}

// inner > 1. Block (32, 8): threadIdx.x picks one of 32 neighbouring outputs, threadIdx.y every 8th position
// of the block's split; the 8 partials of an output are combined through shared memory in y order.
constexpr int kColumnsX = 32, kColumnsY = kThreads / kColumnsX;

template <typename T, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_columns_kernel(const T* __restrict__ x, Geometry g, int64_t chunk, int64_t col_blocks, R red,
                          typename R::Acc* __restrict__ partial, OutPtrs out) {
  using A = typename R::Acc;
  const int64_t o = blockIdx.x / col_blocks;
  const int64_t i = (blockIdx.x % col_blocks) * kColumnsX + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk, r1 = min(g.red, r0 + chunk);
  A acc = red.identity();
  if (i < g.inner) {
    const T* p = x + o * g.s_outer + i * g.s_inner;
    int64_t r = r0 + threadIdx.y;
    const int64_t step = kColumnsY * g.s_red;
    for (; r + 3 * kColumnsY < r1; r += 4 * kColumnsY) {  // four loads in flight
      const T* q = p + r * g.s_red;
      T a = q[0], b = q[step], c = q[2 * step], d = q[3 * step];
      acc = red.fold(acc, a, r);
      acc = red.fold(acc, b, r + kColumnsY);
      acc = red.fold(acc, c, r + 2 * kColumnsY);
      acc = red.fold(acc, d, r + 3 * kColumnsY);
    }
    for (; r < r1; r += kColumnsY) acc = red.fold(acc, p[r * g.s_red], r);
  }
  A* smem = cuda::shared_buffer<A, kThreads>();
  smem[threadIdx.y * kColumnsX + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= g.inner) return;
#pragma unroll
  for (int k = 1; k < kColumnsY; ++k) acc = red(acc, smem[k * kColumnsX + threadIdx.x]);
  const int64_t idx = o * g.inner + i;
  if (gridDim.y == 1) red.store(out, idx, acc, g.red);
  else partial[idx * gridDim.y + blockIdx.y] = acc;
}

// Second pass: a warp per output combines its `splits` partials (lane l takes l, l + 32, ...; then the warp
// tree) and stores the result.
template <typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_partials_kernel(const typename R::Acc* __restrict__ partial, int64_t num_out, int splits, int64_t count,
                           R red, OutPtrs out) {
  using A = typename R::Acc;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarpSize) + threadIdx.x / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  A acc = red.identity();
  if (o < num_out)
    for (int s = lane; s < splits; s += kWarpSize) acc = red(acc, partial[o * splits + s]);
  acc = cuda::warp_reduce(acc, red);
  if (lane == 0 && o < num_out) red.store(out, o, acc, count);
}

// ---- host side ----

// Product and stride of dims ds (in order) when they merge into one dim of x; false when they do not.
bool merge_dims(const Tensor& x, const std::vector<int64_t>& ds, int64_t* size, int64_t* stride) {
  *size = 1;
  *stride = 0;
  for (size_t j = 0; j < ds.size(); ++j) {
    if (j + 1 < ds.size() && x.stride(ds[j]) != x.stride(ds[j + 1]) * x.size(ds[j + 1])) return false;
    *size *= x.size(ds[j]);
  }
  if (!ds.empty()) *stride = x.stride(ds.back());
  return true;
}

// The (outer, red, inner) view of reducing x over dims; *src becomes the tensor it describes: x itself, or a
// contiguous copy with the reduced dims moved last.
Geometry plan(const Tensor& x, IntArrayRef dims, Tensor* src) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), false);
  for (int64_t d : dims) reduced[d] = true;
  std::vector<int64_t> before, red, after;  // size-1 dims play no part
  bool fits = true;
  for (int64_t d = 0; d < nd; ++d) {
    if (x.size(d) == 1) continue;
    if (reduced[d]) {
      if (!after.empty()) fits = false;  // a kept dim between reduced ones
      red.push_back(d);
    } else {
      (red.empty() ? before : after).push_back(d);
    }
  }
  // The order in which the reduced dims are walked does not change the result (positions matter only to
  // max/min along a dim, which reduce one dim): largest stride first lets more layouts merge.
  std::stable_sort(red.begin(), red.end(), [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
  Geometry g;
  *src = x;
  fits = fits && merge_dims(x, before, &g.outer, &g.s_outer) && merge_dims(x, red, &g.red, &g.s_red) &&
         merge_dims(x, after, &g.inner, &g.s_inner);
  if (!fits) {
    std::vector<int64_t> order;
    for (int64_t d = 0; d < nd; ++d)
      if (!reduced[d]) order.push_back(d);
    for (int64_t d = 0; d < nd; ++d)
      if (reduced[d]) order.push_back(d);
    *src = ops::contiguous(ops::permute(x, order));
    g = Geometry{};
    for (int64_t d = 0; d < nd; ++d) (reduced[d] ? g.red : g.outer) *= x.size(d);
    g.s_red = 1;
    g.s_outer = g.red;
  }
  // One run of outputs with the reduced elements farther apart than the outputs (a reduction over a
  // transposed dim), or nothing to reduce: read it as columns, neighbouring threads on neighbouring outputs.
  if (g.inner == 1 && g.outer > 1 && (g.s_outer < g.s_red || g.red <= 1)) {
    g.inner = g.outer;
    g.s_inner = g.s_outer;
    g.outer = 1;
    g.s_outer = 0;
  } else if (g.outer == 1 && g.inner > 1 && g.red > 1 && g.s_red < g.s_inner) {
    // The converse: each output's elements lie closer together than the outputs do: read them as rows.
    g.outer = g.inner;
    g.s_outer = g.s_inner;
    g.inner = 1;
    g.s_inner = 0;
  }
  return g;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Reduces x over dims with `red` into out (and indices, for max/min along a dim); out: x's shape with size 1
// along dims.
template <typename T, typename R>
void launch_reduce(const char* name, const Tensor& out, const Tensor* indices, const Tensor& x, IntArrayRef dims,
                   const R& red) {
  using A = typename R::Acc;
  if (!out.is_contiguous() || (indices != nullptr && !indices->is_contiguous())) {
    Tensor o = empty(out.sizes(), TensorOptions(out.dtype()).device(out.device()));
    Tensor idx = indices ? empty(indices->sizes(), TensorOptions(kInt64).device(out.device())) : Tensor();
    launch_reduce<T>(name, o, indices ? &idx : nullptr, x, dims, red);
    ops::copy_(out, o);
    if (indices) ops::copy_(*indices, idx);
    return;
  }
  if (out.numel() == 0) return;
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  Tensor src;
  const Geometry g = plan(x, dims, &src);
  const T* data = static_cast<const T*>(src.raw_data_ptr());
  const OutPtrs ptrs{out.raw_data_ptr(), indices ? static_cast<int64_t*>(indices->raw_data_ptr()) : nullptr};
  const int64_t num_out = g.outer * g.inner;
  // Split the reduced range across blocks when the outputs alone give fewer than two blocks per
  // multiprocessor; then aim for one full wave of resident blocks (a second, partial wave would leave most of
  // the GPU idle while it runs).
  const int64_t sms = cuda::sm_count(device);
  auto choose_splits = [&](const void* kernel, int64_t blocks, int64_t min_chunk, int64_t align, int64_t* chunk) {
    int64_t splits = 1;
    if (blocks < 2 * sms && g.red >= 2 * min_chunk) {
      int per_sm = 0;
      KILN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0), name);
      const int64_t wave = std::max<int64_t>(1, per_sm) * sms;
      splits = std::min<int64_t>({std::max<int64_t>(1, wave / blocks), g.red / min_chunk, 8192});
    }
    *chunk = ceil_div(ceil_div(std::max<int64_t>(g.red, 1), splits), align) * align;
    return g.red == 0 ? int64_t{1} : ceil_div(g.red, *chunk);
  };
  int64_t chunk = 0, splits = 1, blocks = 0;
  int lanes = kThreads;
  int64_t col_blocks = 0;
  if (g.inner == 1) {
    lanes = g.red >= 512 ? kThreads : kWarpSize;
    blocks = ceil_div(g.outer, kThreads / lanes);
    splits = choose_splits(reinterpret_cast<const void*>(&reduce_rows_kernel<T, R>), blocks,
                           lanes == kThreads ? 8192 : 1024, 16, &chunk);
  } else {
    col_blocks = ceil_div(g.inner, kColumnsX);
    blocks = g.outer * col_blocks;
    splits = choose_splits(reinterpret_cast<const void*>(&reduce_columns_kernel<T, R>), blocks, 256, 1, &chunk);
  }
  KILN_CHECK(blocks <= std::numeric_limits<int32_t>::max(), name, ": too many outputs (", num_out, ") for one launch");
  Tensor workspace;
  A* partial = nullptr;
  if (splits > 1) {
    workspace = empty({num_out * splits * static_cast<int64_t>(sizeof(A))}, TensorOptions(kUInt8).device(x.device()));
    partial = reinterpret_cast<A*>(workspace.raw_data_ptr());
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  if (g.inner == 1) {
    reduce_rows_kernel<T, R><<<grid, kThreads, 0, stream>>>(data, g, chunk, lanes, red, partial, ptrs);
  } else {
    reduce_columns_kernel<T, R><<<grid, dim3(kColumnsX, kColumnsY), 0, stream>>>(data, g, chunk, col_blocks, red,
                                                                                   partial, ptrs);
  }
  KILN_CUDA_CHECK_LAUNCH(name);
  if (splits > 1) {
    const int64_t warps_per_block = kThreads / kWarpSize;
    reduce_partials_kernel<R><<<static_cast<unsigned>(ceil_div(num_out, warps_per_block)), kThreads, 0, stream>>>(
        partial, num_out, static_cast<int>(splits), g.red, red, ptrs);
    KILN_CUDA_CHECK_LAUNCH(name);
  }
}

// Calls f.template operator()<T, Out>() for x's dtype T and out's dtype Out: out has x's dtype, or x is an
// integer or bool tensor whose sum/prod the frontend asked for in int64.
template <uint32_t Set, typename F>
void visit_in_out(const char* op, const Tensor& out, const Tensor& x, F&& f) {
  visit_dtype<Set>(x.dtype(), op, [&]<typename T>() {
    if (out.dtype() == x.dtype()) {
      f.template operator()<T, T>();
    } else {
      KILN_CHECK(out.dtype() == kInt64 && !is_floating(x.dtype()), op, ": the CUDA kernel writes the result for a ",
                 x.dtype(), " input as ", x.dtype(), " (or as int64 for integer and bool inputs), not as ", out.dtype());
      if constexpr (!std::is_floating_point_v<opmath_t<T>>) f.template operator()<T, int64_t>();
    }
  });
}

// ---- the kernels of the dispatch table; out: x's shape with size 1 along dims ----

void sum_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_in_out<kAllSet>("sum", out, x, [&]<typename T, typename Out>() {
    using A = acc_t<T>;
    launch_reduce<T>("sum", out, nullptr, x, dims, reducer(A(0), Load<A>{}, Plus{}, AsIs<Out>{}));
  });
}

void mean_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_dtype<kFloatingSet>(x.dtype(), "mean", [&]<typename T>() {
    using A = acc_t<T>;
    launch_reduce<T>("mean", out, nullptr, x, dims, reducer(A(0), Load<A>{}, Plus{}, MeanOf<T>{}));
  });
}

// NOTE: a float32 product accumulates in float32, so a partial product may overflow or underflow where the
// CPU's double does not (PyTorch's CUDA prod does the same).
void prod_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_in_out<kAllSet>("prod", out, x, [&]<typename T, typename Out>() {
    using A = acc_t<T>;
    launch_reduce<T>("prod", out, nullptr, x, dims, reducer(A(1), Load<A>{}, Times{}, AsIs<Out>{}));
  });
}

// The identity of max (kMax) or min over C: -inf / +inf for floats, the type's extremes otherwise.
template <typename C, bool kMax>
C extreme_identity() {
  if constexpr (std::is_floating_point_v<C>) return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  else return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
}

template <bool kMax>
void extreme_cuda(const char* name, const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_dtype(x.dtype(), name, [&]<typename T>() {
    using C = opmath_t<T>;
    if constexpr (kMax) launch_reduce<T>(name, out, nullptr, x, dims, reducer(extreme_identity<C, true>(), Load<C>{}, NanMax{}, AsIs<T>{}));
    else launch_reduce<T>(name, out, nullptr, x, dims, reducer(extreme_identity<C, false>(), Load<C>{}, NanMin{}, AsIs<T>{}));
  });
}
void amax_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims) { extreme_cuda<true>("amax", out, x, dims); }
void amin_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims) { extreme_cuda<false>("amin", out, x, dims); }

// out: bool.
void all_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_dtype(x.dtype(), "all", [&]<typename T>() {
    launch_reduce<T>("all", out, nullptr, x, dims, reducer(true, TruthLoad{}, And{}, AsIs<bool>{}));
  });
}
void any_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_dtype(x.dtype(), "any", [&]<typename T>() {
    launch_reduce<T>("any", out, nullptr, x, dims, reducer(false, TruthLoad{}, Or{}, AsIs<bool>{}));
  });
}

// p = 2: sqrt(sum x^2); 1: sum |x|; inf / -inf: max / min |x|; 0: the count of nonzeros; else (sum |x|^p)^(1/p).
void norm_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims, double p) {
  visit_dtype<kFloatingSet>(x.dtype(), "norm", [&]<typename T>() {
    using A = acc_t<T>;
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (p == 2) {
      launch_reduce<T>("norm", out, nullptr, x, dims, reducer(A(0), SquareLoad<A>{}, Plus{}, SqrtOf<T>{}));
    } else if (p == 1) {
      launch_reduce<T>("norm", out, nullptr, x, dims, reducer(A(0), AbsLoad<A>{}, Plus{}, AsIs<T>{}));
    } else if (p == kInf) {
      launch_reduce<T>("norm", out, nullptr, x, dims, reducer(A(0), AbsLoad<A>{}, NanMax{}, AsIs<T>{}));
    } else if (p == -kInf) {
      launch_reduce<T>("norm", out, nullptr, x, dims,
                       reducer(std::numeric_limits<A>::infinity(), AbsLoad<A>{}, NanMin{}, AsIs<T>{}));
    } else if (p == 0) {
      launch_reduce<T>("norm", out, nullptr, x, dims, reducer(A(0), NonzeroLoad<A>{}, Plus{}, AsIs<T>{}));
    } else {
      launch_reduce<T>("norm", out, nullptr, x, dims,
                       reducer(A(0), PowAbsLoad<A>{static_cast<A>(p)}, Plus{}, PowOf<T, A>{static_cast<A>(1.0 / p)}));
    }
  });
}

// param: the correction (1 for Bessel's).
void var_cuda(const Tensor& out, const Tensor& x, IntArrayRef dims, double correction) {
  visit_dtype<kFloatingSet>(x.dtype(), "var", [&]<typename T>() {
    launch_reduce<T>("var", out, nullptr, x, dims, VarReducer<T>{correction});
  });
}

// values: x's shape with size 1 along dim (x's dtype); indices: the same shape, int64.
template <bool kMax>
void extreme_dim_cuda(const char* name, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  KILN_CHECK(x.size(dim) > 0, name, ": cannot reduce dim ", dim, " of size 0 (shape ", shape_str(x.sizes()), ")");
  KILN_ASSERT(indices.dtype() == kInt64 && values.dtype() == x.dtype());
  visit_dtype(x.dtype(), name, [&]<typename T>() {
    launch_reduce<T>(name, values, &indices, x, IntArrayRef(dim), ArgReducer<T, kMax>{});
  });
}
void max_dim_cuda(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  extreme_dim_cuda<true>("max", values, indices, x, dim);
}
void min_dim_cuda(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  extreme_dim_cuda<false>("min", values, indices, x, dim);
}

}  // namespace

namespace detail {
void register_cuda_reduce_kernels() {
#define KILN_REGISTER(op) register_kernel<Op::op>(DeviceType::CUDA, op##_cuda);
  KILN_REGISTER(sum)
  KILN_REGISTER(mean)
  KILN_REGISTER(prod)
  KILN_REGISTER(amax)
  KILN_REGISTER(amin)
  KILN_REGISTER(all)
  KILN_REGISTER(any)
  KILN_REGISTER(norm)
  KILN_REGISTER(var)
  KILN_REGISTER(max_dim)
  KILN_REGISTER(min_dim)
#undef KILN_REGISTER
}
}  // namespace detail
}  // namespace kiln
