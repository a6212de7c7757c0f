// CUDA kernels of embedding_bag (ops/embedding_bag.h), the device twins of embedding_bag_cpu.cpp over the same
// layout, moved to the device:
//   - forward: one block per bag (and per slice of a wide row), one thread per column, walking the bag's
//     entries in input order: sums, means and maxes add and compare in the CPU's order (fused multiply-adds
//     may still round a weighted sum differently in the last bit);
//   - the table's gradient: one block per row named (and per slice), one thread per column, walking the row's
//     entries (grouped by row on the host) in input order. No atomics: every element has one writer, and the
//     result is the same on every run. Max adds a bag's gradient where its argmax names the row, once per bag
//     (a bag that names a row twice has those entries next to each other in the row's group);
//   - per_sample_weights' gradient: one warp per entry, a dot product reduced with shuffles.
// float32 and float64, as on the CPU; other tables take nn's composite.
#include <algorithm>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/embedding_bag.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

// The layout's arrays on the device, and the row groups' where the kernel needs them.
struct Layout {
  const int64_t *input, *row, *bag, *start, *named, *row_start, *order;
};

const int64_t* ptr(const Tensor& t) { return t.defined() ? static_cast<const int64_t*>(t.raw_data_ptr()) : nullptr; }

Layout layout(const BagLayout& b, const RowGroups& g = {}) {
  return {ptr(b.input), ptr(b.row), ptr(b.bag), ptr(b.start), ptr(g.rows_named), ptr(g.row_start), ptr(g.order)};
}

// Threads per block along a row of D columns: a warp's multiple, at most 256; the rest of the row in
// gridDim.y slices.
unsigned column_threads(int64_t D) { return static_cast<unsigned>(std::clamp<int64_t>((D + 31) / 32 * 32, 32, 256)); }
unsigned column_slices(int64_t D, unsigned threads) { return static_cast<unsigned>((D + threads - 1) / threads); }

template <typename T>
__global__ void forward_kernel(Layout L, const T* __restrict__ w, const T* __restrict__ psw, int64_t D,
                               BagReduce mode, T* __restrict__ out, int64_t* __restrict__ argmax) {
  const int64_t b = blockIdx.x;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  const int64_t first = L.start[b], last = L.start[b + 1];
  if (mode == BagReduce::Max) {
    if (first == last) {
      out[b * D + d] = T(0), argmax[b * D + d] = -1;
      return;
    }
    int64_t at = L.row[first];
    T best = w[at * D + d];
    for (int64_t j = first + 1; j < last; ++j) {
      const int64_t r = L.row[j];
      const T v = w[r * D + d];
      if (v > best || (v != v && best == best)) best = v, at = r;  // the first maximum wins; a NaN stays
    }
    out[b * D + d] = best, argmax[b * D + d] = at;
    return;
  }
  T acc = 0;
  for (int64_t j = first; j < last; ++j) {
    const T v = w[L.row[j] * D + d];
    acc += psw != nullptr ? v * psw[L.input[j]] : v;
  }
  if (mode == BagReduce::Mean && last > first) acc /= static_cast<T>(last - first);
  out[b * D + d] = acc;
}

// Block k: the k-th row named. grad_w was zeroed; only named rows are written.
template <typename T>
__global__ void backward_weight_kernel(Layout L, const T* __restrict__ g, const T* __restrict__ psw,
                                       const int64_t* __restrict__ argmax, int64_t D, BagReduce mode,
                                       T* __restrict__ grad_w) {
  const int64_t k = blockIdx.x;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  const int64_t r = L.named[k], first = L.row_start[k], last = L.row_start[k + 1];
  T acc = 0;
  for (int64_t i = first; i < last; ++i) {
    const int64_t j = L.order[i], b = L.bag[j];
    if (mode == BagReduce::Max) {
      if (i > first && L.bag[L.order[i - 1]] == b) continue;  // this bag is counted once
      if (argmax[b * D + d] == r) acc += g[b * D + d];
      continue;
    }
    const int64_t size = L.start[b + 1] - L.start[b];  // >= 1: the bag holds entry j
    const T s = psw != nullptr ? psw[L.input[j]] : mode == BagReduce::Mean ? T(1) / static_cast<T>(size) : T(1);
    acc += s * g[b * D + d];
  }
  grad_w[r * D + d] = acc;
}

constexpr int kWarpsPerBlock = 8;

// One warp per entry j: grad_psw[input[j]] = g[bag[j]] . w[row[j]]. grad_psw was zeroed.
template <typename T>
__global__ void backward_psw_kernel(Layout L, const T* __restrict__ g, const T* __restrict__ w, int64_t D,
                                    int64_t entries, T* __restrict__ grad_psw) {
  const int lane = threadIdx.x % 32;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; j < entries;
       j += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const T* row = w + L.row[j] * D;
    const T* src = g + L.bag[j] * D;
    T dot = 0;
    for (int64_t d = lane; d < D; d += 32) dot += row[d] * src[d];
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_down_sync(0xffffffffu, dot, offset);
    if (lane == 0) grad_psw[L.input[j]] = dot;
  }
}

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data_ptr()) : nullptr;
}

void embedding_bag_cuda(const Tensor& out, const Tensor& argmax, const Tensor& weight, const Tensor& psw,
                        const BagLayout& bags, BagReduce mode) {
  const int device = weight.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const int64_t D = weight.size(1);
  const unsigned threads = column_threads(D);
  const dim3 blocks(static_cast<unsigned>(bags.count), column_slices(D, threads));
  visit_dtype<kFloat32Set | kFloat64Set>(weight.dtype(), "embedding_bag (CUDA)", [&]<typename T>() {
    forward_kernel<T><<<blocks, threads, 0, stream>>>(
        layout(bags), static_cast<const T*>(weight.raw_data_ptr()), data_or_null<T>(psw), D, mode,
        static_cast<T*>(out.raw_data_ptr()), argmax.defined() ? static_cast<int64_t*>(argmax.raw_data_ptr()) : nullptr);
    KILN_CUDA_CHECK_LAUNCH("embedding_bag");
  });
}

void embedding_bag_backward_cuda(const Tensor& grad_w, const Tensor& grad_out, const Tensor& psw,
                                 const Tensor& argmax, const BagLayout& bags, BagReduce mode) {
  const int device = grad_w.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  KILN_CUDA_CHECK(cudaMemsetAsync(grad_w.raw_data_ptr(), 0, grad_w.nbytes(), stream), "embedding_bag backward");
  // Grouped on the host: a copy of the rows there and back (and a wait for the stream).
  const RowGroups groups = ops::group_by_row(bags, grad_w.size(0));
  const int64_t R = groups.rows_named.numel(), D = grad_w.size(1);
  if (R == 0) return;
  const unsigned threads = column_threads(D);
  const dim3 blocks(static_cast<unsigned>(R), column_slices(D, threads));
  visit_dtype<kFloat32Set | kFloat64Set>(grad_w.dtype(), "embedding_bag backward (CUDA)", [&]<typename T>() {
    backward_weight_kernel<T><<<blocks, threads, 0, stream>>>(
        layout(bags, groups), static_cast<const T*>(grad_out.raw_data_ptr()), data_or_null<T>(psw),
        data_or_null<int64_t>(argmax), D, mode, static_cast<T*>(grad_w.raw_data_ptr()));
    KILN_CUDA_CHECK_LAUNCH("embedding_bag backward");
  });
}

void embedding_bag_psw_backward_cuda(const Tensor& grad_psw, const Tensor& grad_out, const Tensor& weight,
                                     const BagLayout& bags) {
  const int device = weight.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  KILN_CUDA_CHECK(cudaMemsetAsync(grad_psw.raw_data_ptr(), 0, grad_psw.nbytes(), stream),
                  "embedding_bag backward (per_sample_weights)");
  const int64_t entries = bags.row.numel();
  if (entries == 0) return;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((entries + kWarpsPerBlock - 1) / kWarpsPerBlock, int64_t{1} << 20));
  visit_dtype<kFloat32Set | kFloat64Set>(weight.dtype(), "embedding_bag backward (CUDA)", [&]<typename T>() {
    backward_psw_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        layout(bags), static_cast<const T*>(grad_out.raw_data_ptr()), static_cast<const T*>(weight.raw_data_ptr()),
        weight.size(1), entries, static_cast<T*>(grad_psw.raw_data_ptr()));
    KILN_CUDA_CHECK_LAUNCH("embedding_bag backward (per_sample_weights)");
  });
}

}  // namespace

namespace detail {
void register_cuda_embedding_bag_kernels() {
  register_kernel<Op::embedding_bag>(DeviceType::CUDA, embedding_bag_cuda);
  register_kernel<Op::embedding_bag_backward>(DeviceType::CUDA, embedding_bag_backward_cuda);
  register_kernel<Op::embedding_bag_psw_backward>(DeviceType::CUDA, embedding_bag_psw_backward_cuda);
}
}  // namespace detail
}  // namespace kiln
