// CUDA kernels of cumsum, sort and topk; the CPU kernels (ops/along_dim_cpu.cpp) are the reference they match.
//
// cumsum: as on the CPU the input is made contiguous and seen as (outer, n, inner); one thread runs down each
// line, accumulating in float64 (floating types) or int64 (integers) in the CPU's order, so the two devices
// agree to the bit. Simple rather than fast: a line of the last dim is read n elements apart by neighbouring
// threads. A block-wide scan is the step up when a model needs it.
//
// sort: CUB's stable segmented radix sort (part of the toolkit) over the lines moved to the last dim, one
// segment per line. The keys it sorts are float32 for the 16-bit floats and float32 (exact), float64 for
// float64 and int64 for the integers and bool, with every NaN made +NaN and -0.0 made 0.0 first, so that the
// radix order is sort's order (NaN above +inf, -0.0 equal to 0.0); the values are then gathered from the input
// by the sorted positions, so they keep their own bits.
//
// topk: for k up to 16 on lines of up to 8192 elements, one warp per line (moved to the last dim). Each lane
// keeps the best k of its elements (positions lane, lane + 32, ...) in order, then the warp merges the lanes'
// lists, one shuffle reduction per place, in sort's order with equal keys in position order: the CPU's result.
// Other cases sort the lines and take the first k. The limits are a first guess, not yet tuned on a GPU.
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/row_reduce.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/ops/indexing.h"
#include "kiln/tensor/ops/unary.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

namespace kiln {
namespace {

constexpr int kThreads = 256;

template <typename T>
using cum_acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;

// x, y: (outer, n, inner) contiguous; thread `line` runs down column line % inner of block line / inner.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    cumsum_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t lines, int64_t n, int64_t inner) {
  using M = opmath_t<T>;
  using A = cum_acc_t<T>;
  const int64_t line = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (line >= lines) return;
  const int64_t base = (line / inner) * n * inner + line % inner;
  A acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += static_cast<A>(static_cast<M>(x[base + i * inner]));
    y[base + i * inner] = cuda::to_storage<T>(static_cast<M>(acc));
  }
}

void cumsum_cuda(const Tensor& out, const Tensor& x, int64_t dim) {
  KILN_ASSERT(out.dtype() == x.dtype() && out.sizes() == x.sizes());
  if (x.numel() == 0) return;
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const Tensor in = ops::contiguous(x);
  const Tensor dst = out.is_contiguous() ? out : empty(out.sizes(), TensorOptions(out.dtype()).device(out.device()));
  const int64_t n = x.size(dim);
  int64_t inner = 1;
  for (int64_t k = dim + 1; k < x.dim(); ++k) inner *= x.size(k);
  const int64_t lines = x.numel() / n;
  const int64_t blocks = (lines + kThreads - 1) / kThreads;
  KILN_CHECK(blocks <= INT32_MAX, "cumsum: too many lines (", lines, ") for one launch");
  visit_dtype<kNumericSet>(x.dtype(), "cumsum", [&]<typename T>() {
    cumsum_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const T*>(in.raw_data_ptr()), static_cast<T*>(dst.raw_data_ptr()), lines, n, inner);
    KILN_CUDA_CHECK_LAUNCH("cumsum");
  });
  if (dst.impl() != out.impl()) ops::copy_(out, dst);
}

// The positions (int64, (rows, n)) that sort each row of keys (rows, n), a contiguous tensor of K.
template <typename K>
void sort_positions(const Tensor& positions, const Tensor& keys, int64_t rows, int64_t n, bool descending,
                    cudaStream_t stream) {
  const TensorOptions longs = TensorOptions(kInt64).device(keys.device());
  const Tensor iota = ops::contiguous(ops::expand(arange(0, n, 1, longs), {rows, n}));
  const Tensor offsets = ops::mul(arange(0, rows + 1, 1, longs), Scalar(n));
  Tensor sorted_keys = empty({rows, n}, TensorOptions(keys.dtype()).device(keys.device()));
  const K* kin = static_cast<const K*>(keys.raw_data_ptr());
  K* kout = static_cast<K*>(sorted_keys.raw_data_ptr());
  const int64_t* vin = iota.data_ptr<int64_t>();
  int64_t* vout = positions.data_ptr<int64_t>();
  const int64_t* off = offsets.data_ptr<int64_t>();
  const auto run = [&](void* temp, size_t& bytes) {
    return descending ? cub::DeviceSegmentedSort::StableSortPairsDescending(temp, bytes, kin, kout, vin, vout,
                                                                            rows * n, rows, off, off + 1, stream)
                      : cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, kin, kout, vin, vout, rows * n, rows,
                                                                  off, off + 1, stream);
  };
  size_t bytes = 0;
  KILN_CUDA_CHECK(run(nullptr, bytes), "sort");
  Tensor temp = empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, TensorOptions(kUInt8).device(keys.device()));
  KILN_CUDA_CHECK(run(temp.raw_data_ptr(), bytes), "sort");
}

void sort_cuda(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim, bool descending) {
  KILN_ASSERT(indices.dtype() == kInt64 && values.dtype() == x.dtype());
  if (x.numel() == 0) return;
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t last = x.dim() - 1;
  const int64_t n = x.size(dim);
  const int64_t rows = x.numel() / n;
  const Tensor lines = ops::contiguous(ops::transpose(x, dim, last));  // (..., n)
  Tensor keys;
  if (is_floating(x.dtype())) {
    keys = ops::to(lines, x.dtype() == kFloat64 ? kFloat64 : kFloat32);
    // x + 0.0 is 0.0 for x = -0.0 and x otherwise; every NaN becomes the one +NaN.
    keys = ops::where(ops::isnan(keys), Scalar(std::numeric_limits<double>::quiet_NaN()), ops::add(keys, Scalar(0.0)));
  } else {
    keys = ops::to(lines, kInt64);
  }
  keys = ops::contiguous(keys);
  Tensor positions = empty({rows, n}, TensorOptions(kInt64).device(x.device()));
  if (keys.dtype() == kFloat32) sort_positions<float>(positions, keys, rows, n, descending, stream);
  else if (keys.dtype() == kFloat64) sort_positions<double>(positions, keys, rows, n, descending, stream);
  else sort_positions<int64_t>(positions, keys, rows, n, descending, stream);
  const Tensor sorted_positions = ops::view(positions, lines.sizes());
  const Tensor sorted_values = ops::gather(lines, last, sorted_positions);
  ops::copy_(values, ops::transpose(sorted_values, dim, last));
  ops::copy_(indices, ops::transpose(sorted_positions, dim, last));
}

constexpr int kWarpTopK = 16;           // the largest k the warp kernel keeps
constexpr int64_t kWarpTopKLine = 8192;  // and the longest line it reads (256 elements per lane)

// The type a key is compared and shuffled in: the float it is computed in, or int64 for the integers and bool.
template <typename T>
using topk_key_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, long long>;

// Whether key a at position ia comes before key b at ib in topk's result: sort's order (NaN above every number,
// -0.0 equal to 0.0), descending when largest, equal keys in position order. Position -1 is an empty slot, after
// everything.
template <typename K>
__device__ bool ranks_before(K a, int64_t ia, K b, int64_t ib, bool largest) {
  if (ib < 0) return ia >= 0;
  if (ia < 0) return false;
  if constexpr (std::is_floating_point_v<K>) {
    const bool na = isnan(a), nb = isnan(b);
    if (na != nb) return largest ? na : nb;
    if (na) return ia < ib;
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

// lines: (rows, n) contiguous; values, indices: (rows, k) contiguous, 1 <= k <= min(n, kWarpTopK).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    topk_warp_kernel(const T* __restrict__ lines, T* __restrict__ values, int64_t* __restrict__ indices,
                     int64_t rows, int64_t n, int k, bool largest) {
  using K = topk_key_t<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; row < rows; row += warps) {
    const T* line = lines + row * n;
    // This lane's best k so far, in order.
    K key[kWarpTopK];
    int64_t at[kWarpTopK];
    int count = 0;
    for (int64_t j = lane; j < n; j += 32) {
      const K v = static_cast<K>(static_cast<opmath_t<T>>(line[j]));
      if (count == k && !ranks_before(v, j, key[k - 1], at[k - 1], largest)) continue;
      int slot = count < k ? count++ : k - 1;
      for (; slot > 0 && ranks_before(v, j, key[slot - 1], at[slot - 1], largest); --slot) {
        key[slot] = key[slot - 1];
        at[slot] = at[slot - 1];
      }
      key[slot] = v;
      at[slot] = j;
    }
    // Each place goes to the best of the lanes' heads; positions are unique, so the order is strict and every
    // lane ends the reduction with the same winner, whose lane moves its head on.
    int head = 0;
    for (int place = 0; place < k; ++place) {
      K best = head < count ? key[head] : K(0);
      int64_t best_at = head < count ? at[head] : -1;
      for (int offset = 16; offset > 0; offset /= 2) {
        const K other = __shfl_xor_sync(0xffffffffu, best, offset);
        const auto other_at = static_cast<int64_t>(
            __shfl_xor_sync(0xffffffffu, static_cast<long long>(best_at), offset));
        if (ranks_before(other, other_at, best, best_at, largest)) best = other, best_at = other_at;
      }
      if (head < count && at[head] == best_at) ++head;
      if (lane == 0) {
        values[row * k + place] = line[best_at];
        indices[row * k + place] = best_at;
      }
    }
  }
}

void topk_cuda(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim, int64_t k, bool largest) {
  KILN_ASSERT(values.is_contiguous() && indices.is_contiguous() && indices.dtype() == kInt64 &&
              values.dtype() == x.dtype() && k >= 1 && k <= x.size(dim));
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  const int64_t last = x.dim() - 1, n = x.size(dim);
  if (k > kWarpTopK || n > kWarpTopKLine) {
    // The whole lines sorted, the first k kept.
    Tensor all_values = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
    Tensor all_indices = empty(x.sizes(), TensorOptions(kInt64).device(x.device()));
    sort_cuda(all_values, all_indices, x, dim, /*descending=*/largest);
    ops::copy_(values, ops::narrow(all_values, dim, 0, k));
    ops::copy_(indices, ops::narrow(all_indices, dim, 0, k));
    return;
  }
  cudaStream_t stream = cuda::current_stream(device).handle;
  const Tensor lines = ops::contiguous(ops::transpose(x, dim, last));  // (..., n)
  const int64_t rows = x.numel() / n;
  // Along the last dim the results go straight into values and indices; otherwise into lines of k, moved back.
  Shape moved = lines.sizes();
  moved.back() = k;
  const bool direct = dim == last;
  const Tensor v = direct ? values : empty(moved, TensorOptions(x.dtype()).device(x.device()));
  const Tensor i = direct ? indices : empty(moved, TensorOptions(kInt64).device(x.device()));
  const int64_t warps_per_block = kThreads / 32;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((rows + warps_per_block - 1) / warps_per_block,
                                                              int64_t{1} << 20));
  visit_dtype(x.dtype(), "topk (CUDA)", [&]<typename T>() {
    topk_warp_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(lines.raw_data_ptr()),
                                                          static_cast<T*>(v.raw_data_ptr()),
                                                          static_cast<int64_t*>(i.raw_data_ptr()), rows, n,
                                                          static_cast<int>(k), largest);
    KILN_CUDA_CHECK_LAUNCH("topk");
  });
  if (!direct) {
    ops::copy_(values, ops::transpose(v, dim, last));
    ops::copy_(indices, ops::transpose(i, dim, last));
  }
}

}  // namespace

namespace detail {
void register_cuda_along_dim_kernels() {
  register_kernel<Op::cumsum>(DeviceType::CUDA, cumsum_cuda);
  register_kernel<Op::sort>(DeviceType::CUDA, sort_cuda);
  register_kernel<Op::topk>(DeviceType::CUDA, topk_cuda);
}
}  // namespace detail
}  // namespace kiln
