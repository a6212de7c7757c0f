// CUDA kernels of cumsum and sort; the CPU kernels (ops/along_dim_cpu.cpp) are the reference they match.
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
#include <cub/device/device_segmented_sort.cuh>

#include <cstdint>
#include <limits>

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

}  // namespace

namespace detail {
void register_cuda_along_dim_kernels() {
  register_kernel<Op::cumsum>(DeviceType::CUDA, cumsum_cuda);
  register_kernel<Op::sort>(DeviceType::CUDA, sort_cuda);
}
}  // namespace detail
}  // namespace kiln
