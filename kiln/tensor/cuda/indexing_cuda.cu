// CUDA kernels of the indexed reads (index_select, gather) and writes (scatter, scatter_add, index_add): the
// device twins of indexing_cpu.cpp, with the same trick. The indexed operand is seen with stride 0 along `dim`
// over the iteration's shape, so every operand's offset comes from one linear position, and the element an
// index value names is that offset plus index * stride(dim). index_select and index_add expand their (k)
// index to the iteration's shape the same way (stride 0 outside dim).
//
// One thread per element of the iteration. Reads and the plain scatter move bytes, so they are compiled per
// element size, not per dtype. Colliding writes: scatter lets any one win (as PyTorch); scatter_add and
// index_add add atomically, in the same op-math arithmetic as the CPU (float for the 16-bit floats), so
// without duplicates the result equals the CPU's, and with duplicates only the order of a float sum differs.
// Under deterministic algorithms (determinism.h) a floating-point index_add sorts its index and adds each
// element's terms in the CPU's order instead, and a floating-point scatter_add gives each line along dim to one
// thread, which adds its terms in order.
//
// Index values are checked on the device (index_check.cuh): a bad index is skipped (a read gives 0) and the
// next CUDA indexing op launched after the faulty one has finished throws the error.
//
// nonzero keeps the positions of the nonzero elements with CUB's DeviceSelect::If, in order, then unravels them.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <utility>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/index_check.cuh"
#include "kiln/tensor/cuda/loops_cuda.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/determinism.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

namespace kiln {

namespace cuda {

const char* index_op_name(IndexOpId op) {
  static const char* const names[] = {"index_select", "gather", "scatter", "scatter_add", "index_add",
                                      "cross_entropy", "cross_entropy_backward"};
  static_assert(std::size(names) == kNumIndexOps);
  return op >= 0 && op < kNumIndexOps ? names[op] : "CUDA indexing";
}

std::pair<IndexError*, IndexError*> index_error_slot() {
  // A mutex and a pointer, not std::call_once: the allocation can throw, and libstdc++'s call_once can hang
  // the next caller after an exceptional call (GCC bug 66146), as cublas_loader.cpp notes too. A failed
  // allocation leaves the slot empty, so the next call tries again and reports its own error.
  static std::mutex mutex;
  static std::pair<IndexError*, IndexError*> slot{nullptr, nullptr};
  std::lock_guard<std::mutex> lock(mutex);
  if (slot.first != nullptr) return slot;
  void* host = nullptr;
  void* device = nullptr;
  // Portable: with unified addressing the one device pointer is valid on every device.
  KILN_CUDA_CHECK(cudaHostAlloc(&host, sizeof(IndexError), cudaHostAllocMapped | cudaHostAllocPortable),
                  "CUDA indexing: the index error slot");
  std::memset(host, 0, sizeof(IndexError));
  KILN_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0), "CUDA indexing: the index error slot");
  slot = {static_cast<IndexError*>(host), static_cast<IndexError*>(device)};
  return slot;
}

void raise_pending_index_error() {
  volatile IndexError* e = index_error_slot().first;
  if (e->set == 0) return;
  std::atomic_thread_fence(std::memory_order_acquire);
  const int64_t value = e->value, size = e->size;
  const int32_t dim = e->dim, op = e->op;
  e->set = 0;
  const char* name = index_op_name(static_cast<IndexOpId>(op));
  if (op == kCrossEntropyId || op == kCrossEntropyBackwardId)
    KILN_CHECK(false, name, ": target ", value, " is out of range for ", size, " classes",
               " (found on the GPU by an earlier launch)");
  KILN_CHECK(false, name, ": index ", value, " is out of range for dim ", dim, " of size ", size,
             " (found on the GPU by an earlier launch)");
}

}  // namespace cuda

namespace {

using cuda::IndexCheck;
using cuda::IndexOpId;
using cuda::kGatherId;
using cuda::kIndexAddId;
using cuda::kIndexSelectId;
using cuda::kScatterAddId;
using cuda::kScatterId;
using cuda::raise_pending_index_error;

// ---- geometry: the operands' offsets come from cuda::Layout / cuda::OffsetCalc (loops_cuda.cuh) ----

constexpr int kIndexBlock = 256;

// t's strides with 0 along dim: t seen over the iteration's shape.
Shape strides_without(const Tensor& t, int64_t dim) {
  Shape s = t.strides();
  s[dim] = 0;
  return s;
}

// A (k) index's strides over an iteration of `ndim` dims: index[c] = index[c[dim]].
Shape expanded_index_strides(const Tensor& index, int64_t ndim, int64_t dim) {
  Shape s(static_cast<size_t>(ndim), 0);
  s[dim] = index.stride(0);
  return s;
}

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kIndexBlock - 1) / kIndexBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > (1 << 16) ? (1 << 16) : blocks);
}

// ---- atomic adds in op-math arithmetic ----

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), v); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  // Two's complement: an unsigned add wraps exactly as the CPU's int64 add does.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// 8- and 16-bit types (bool, uint8, Half, BFloat16): a compare-and-swap loop on the aligned 32-bit word that
// holds the element, computing T(opmath(old) + v) exactly as the CPU does. (Native __half atomicAdd would round
// index_add's alpha * src to half first.)
template <typename T>
__device__ void atomic_add_narrow(T* p, opmath_t<T> v) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2);
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(addr & 3u) * 8u;
  const unsigned mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
    Bits bits = static_cast<Bits>((assumed & mask) >> shift);
    T cur;
    memcpy(&cur, &bits, sizeof(T));
    T next = static_cast<T>(static_cast<opmath_t<T>>(cur) + v);
    memcpy(&bits, &next, sizeof(T));
    old = atomicCAS(word, assumed, (assumed & ~mask) | (static_cast<unsigned>(bits) << shift));
  } while (old != assumed);
}
__device__ __forceinline__ void atomic_add(bool* p, bool v) { atomic_add_narrow(p, v); }
__device__ __forceinline__ void atomic_add(uint8_t* p, uint8_t v) { atomic_add_narrow(p, v); }
__device__ __forceinline__ void atomic_add(Half* p, float v) { atomic_add_narrow(p, v); }
__device__ __forceinline__ void atomic_add(BFloat16* p, float v) { atomic_add_narrow(p, v); }

// ---- kernels ----

// out[o] = x[xo + index[io] * x_step]; operands: 0 out, 1 x (stride 0 along dim), 2 index.
// T: an unsigned integer of the element's size.
template <typename T, typename Index>
__global__ void gather_kernel(int64_t n, cuda::OffsetCalc<3, Index> g, T* out, const T* x, const int64_t* index,
                              int64_t x_step, IndexCheck check) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const auto off = g.get(static_cast<Index>(i));
    const int64_t idx = index[off[2]];
    if (!check.ok(idx)) {
      check.report(idx);
      out[off[0]] = T{0};
      continue;
    }
    out[off[0]] = x[off[1] + idx * x_step];
  }
}

// self[so + index[io] * self_step] = src[vo]; operands: 0 self (stride 0 along dim), 1 index, 2 src.
template <typename T, typename Index>
__global__ void scatter_kernel(int64_t n, cuda::OffsetCalc<3, Index> g, T* self, const int64_t* index, const T* src,
                               int64_t self_step, IndexCheck check) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const auto off = g.get(static_cast<Index>(i));
    const int64_t idx = index[off[1]];
    if (!check.ok(idx)) {
      check.report(idx);
      continue;
    }
    self[off[0] + idx * self_step] = src[off[2]];
  }
}

// self[so + index[io] * self_step] += alpha * src[vo], atomically; scatter_add is alpha = 1 (exact in every
// dtype, so the same as the CPU's plain +).
template <typename T, typename Index>
__global__ void scatter_add_kernel(int64_t n, cuda::OffsetCalc<3, Index> g, T* self, const int64_t* index, const T* src,
                                   int64_t self_step, opmath_t<T> alpha, IndexCheck check) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const auto off = g.get(static_cast<Index>(i));
    const int64_t idx = index[off[1]];
    if (!check.ok(idx)) {
      check.report(idx);
      continue;
    }
    atomic_add(self + off[0] + idx * self_step, static_cast<M>(alpha * static_cast<M>(src[off[2]])));
  }
}

// ---- launchers ----

template <typename F>
void visit_element_size(size_t bytes, const char* op, F&& f) {
  switch (bytes) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    case 8: return f.template operator()<uint64_t>();
    default: KILN_CHECK(false, op, ": no CUDA kernel for elements of ", bytes, " bytes");
  }
}

// Calls launch.template operator()<Index>() with the narrowest offset type that fits.
template <int N, typename F>
void with_index_type(const cuda::Layout<N>& geom, F&& launch) {
  if (geom.fits_int32()) launch.template operator()<int32_t>();
  else launch.template operator()<int64_t>();
}

// After a launch: in KILN_CUDA_SYNC_DEBUG builds the kernel has finished, so its index errors are known now.
void check_launch(IndexOpId op) {
  KILN_CUDA_CHECK_LAUNCH(cuda::index_op_name(op));
#ifdef KILN_CUDA_SYNC_DEBUG
  raise_pending_index_error();
#endif
}

// out: index's shape (gather) or x's with dim -> k (index_select), contiguous or not; x: any strides.
void gather_launch(IndexOpId op, const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index,
                   const Shape& index_strides) {
  const char* name = cuda::index_op_name(op);
  const Shape x_strides = strides_without(x, dim);
  const cuda::Layout<3> geom(out.sizes(), {out.strides(), x_strides, index_strides});
  if (geom.numel == 0) return;
  cuda::DeviceGuard guard(out.device().index);
  raise_pending_index_error();
  cudaStream_t stream = cuda::current_stream(out.device().index).handle;
  const IndexCheck check = cuda::make_index_check(op, dim, x.size(dim));
  visit_element_size(out.element_size(), name, [&]<typename T>() {
    with_index_type(geom, [&]<typename Index>() {
      gather_kernel<T, Index><<<blocks_for(geom.numel), kIndexBlock, 0, stream>>>(
          geom.numel, geom.template calc<Index>(name), static_cast<T*>(out.raw_data_ptr()),
          static_cast<const T*>(x.raw_data_ptr()), static_cast<const int64_t*>(index.raw_data_ptr()), x.stride(dim),
          check);
    });
  });
  check_launch(op);
}

// out: x's shape with dim -> k, x: (..., n, ...), index: (k)
void index_select_cuda(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  gather_launch(kIndexSelectId, out, x, dim, index, expanded_index_strides(index, out.dim(), dim));
}

// out, index: one shape, no larger than x outside dim
void gather_cuda(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  gather_launch(kGatherId, out, x, dim, index, index.strides());
}

// Iterates over `shape` (index's for scatter and scatter_add, src's for index_add) with operands self (stride
// 0 along dim), index and src.
void scatter_launch(IndexOpId op, const Tensor& self, int64_t dim, const Tensor& index, const Shape& index_strides,
                    const Tensor& src, const Shape& shape, const Scalar& alpha) {
  const char* name = cuda::index_op_name(op);
  const Shape self_strides = strides_without(self, dim);
  const cuda::Layout<3> geom(shape, {self_strides, index_strides, src.strides()});
  if (geom.numel == 0) return;
  cuda::DeviceGuard guard(self.device().index);
  raise_pending_index_error();
  cudaStream_t stream = cuda::current_stream(self.device().index).handle;
  const IndexCheck check = cuda::make_index_check(op, dim, self.size(dim));
  const auto* index_ptr = static_cast<const int64_t*>(index.raw_data_ptr());
  if (op == kScatterId) {
    visit_element_size(self.element_size(), name, [&]<typename T>() {
      with_index_type(geom, [&]<typename Index>() {
        scatter_kernel<T, Index><<<blocks_for(geom.numel), kIndexBlock, 0, stream>>>(
            geom.numel, geom.template calc<Index>(name), static_cast<T*>(self.raw_data_ptr()), index_ptr,
            static_cast<const T*>(src.raw_data_ptr()), self.stride(dim), check);
      });
    });
  } else {
    visit_dtype(self.dtype(), name, [&]<typename T>() {
      const opmath_t<T> a = alpha.to<opmath_t<T>>();
      with_index_type(geom, [&]<typename Index>() {
        scatter_add_kernel<T, Index><<<blocks_for(geom.numel), kIndexBlock, 0, stream>>>(
            geom.numel, geom.template calc<Index>(name), static_cast<T*>(self.raw_data_ptr()), index_ptr,
            static_cast<const T*>(src.raw_data_ptr()), self.stride(dim), a, check);
      });
    });
  }
  check_launch(op);
}

// index: no larger than src, nor than self outside dim; src is read over index's shape.
void scatter_cuda(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar&) {
  scatter_launch(kScatterId, self, dim, index, index.strides(), src, index.sizes(), 1);
}

// ---- scatter_add in a fixed order (deterministic algorithms) ----

// A thread per line of the index along dim (one position outside dim), adding the line's terms in order along
// dim. Two lines differ outside dim, and so do the elements of self they name: no element has two writers, no
// atomics, and each element's terms come in the CPU's order (scatter_loop's, along dim). Operands over the
// lines' shape (index's, 1 along dim): 0 self (stride 0 along dim), 1 index, 2 src.
template <typename T, typename Index>
__global__ void scatter_add_lines_kernel(int64_t lines, cuda::OffsetCalc<3, Index> g, T* self, const int64_t* index,
                                         const T* src, int64_t self_step, int64_t len, int64_t index_step,
                                         int64_t src_step, IndexCheck check) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; l < lines; l += stride) {
    const auto off = g.get(static_cast<Index>(l));
    for (int64_t j = 0; j < len; ++j) {
      const int64_t idx = index[off[1] + j * index_step];
      if (!check.ok(idx)) {
        check.report(idx);
        continue;
      }
      T* p = self + off[0] + idx * self_step;
      *p = static_cast<T>(static_cast<M>(*p) + static_cast<M>(src[off[2] + j * src_step]));
    }
  }
}

void scatter_add_lines(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* name = "scatter_add (deterministic)";
  Shape lines_shape = index.sizes();
  const int64_t len = lines_shape[static_cast<size_t>(dim)];
  lines_shape[static_cast<size_t>(dim)] = 1;
  const cuda::Layout<3> geom(lines_shape, {strides_without(self, dim), index.strides(), src.strides()});
  if (geom.numel == 0 || len == 0) return;
  cuda::DeviceGuard guard(self.device().index);
  raise_pending_index_error();
  cudaStream_t stream = cuda::current_stream(self.device().index).handle;
  const IndexCheck check = cuda::make_index_check(kScatterAddId, dim, self.size(dim));
  visit_dtype<kFloatingSet>(self.dtype(), name, [&]<typename T>() {
    with_index_type(geom, [&]<typename Index>() {
      scatter_add_lines_kernel<T, Index><<<blocks_for(geom.numel), kIndexBlock, 0, stream>>>(
          geom.numel, geom.template calc<Index>(name), static_cast<T*>(self.raw_data_ptr()),
          static_cast<const int64_t*>(index.raw_data_ptr()), static_cast<const T*>(src.raw_data_ptr()),
          self.stride(dim), len, index.stride(dim), src.stride(dim), check);
    });
  });
  check_launch(kScatterAddId);
}

// Floating-point sums with atomics vary in their last bits from run to run where two terms meet; under
// deterministic algorithms each line along dim is added in order by one thread instead.
void scatter_add_cuda(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar&) {
  if (is_floating(self.dtype()) && are_deterministic_algorithms_enabled()) {
    return scatter_add_lines(self, dim, index, src);
  }
  scatter_launch(kScatterAddId, self, dim, index, index.strides(), src, index.sizes(), 1);
}

// ---- index_add in a fixed order (deterministic algorithms) ----

// Reports the first bad value of a (k) index; the deterministic kernel below only visits valid ones.
__global__ void check_index_kernel(const int64_t* __restrict__ index, int64_t k, IndexCheck check) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < k; p += stride)
    if (!check.ok(index[p])) check.report(index[p]);
}

// The first position of sorted[0, k) whose value is not below v (`above`: above v).
__device__ __forceinline__ int64_t bound(const int64_t* sorted, int64_t k, int64_t v, bool above) {
  int64_t lo = 0, hi = k;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (above ? sorted[mid] <= v : sorted[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// alpha * v rounded before it is added, never fused with the add into an FMA (nvcc fuses by default): the
// CPU's index_add, compiled with -ffp-contract=off, rounds it so too.
__device__ __forceinline__ float product_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double product_rn(double a, double b) { return __dmul_rn(a, b); }

// self (outer, n, inner) and src (outer, k, inner), both contiguous; keys: the index values sorted, positions:
// where each came from, in increasing order among equal keys. One thread per element of self adds its terms
// one after another in the order of their positions, which is the CPU's order, in the atomics' arithmetic.
template <typename T>
__global__ void index_add_ordered_kernel(T* __restrict__ self, const T* __restrict__ src,
                                         const int64_t* __restrict__ keys, const int64_t* __restrict__ positions,
                                         int64_t outer, int64_t n, int64_t inner, int64_t k, opmath_t<T> alpha) {
  using M = opmath_t<T>;
  const int64_t total = outer * n * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total; e += stride) {
    const int64_t o = e / (n * inner), j = (e / inner) % n, i = e % inner;
    const int64_t first = bound(keys, k, j, false), last = bound(keys, k, j, true);
    if (first == last) continue;
    T acc = self[e];
    for (int64_t q = first; q < last; ++q) {
      const M v = product_rn(alpha, static_cast<M>(src[(o * k + positions[q]) * inner + i]));
      acc = static_cast<T>(static_cast<M>(acc) + v);
    }
    self[e] = acc;
  }
}

// index_add with every element's terms added in the CPU's order: the index's values sorted stably with their
// positions (CUB's radix sort), then index_add_ordered_kernel. Works on contiguous copies where the operands are
// not contiguous.
void index_add_ordered(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  const char* name = "index_add (deterministic)";
  const int64_t k = index.numel(), n = self.size(dim);
  if (k == 0) return;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  cuda::DeviceGuard guard(self.device().index);
  raise_pending_index_error();
  cudaStream_t stream = cuda::current_stream(self.device().index).handle;
  const TensorOptions longs = TensorOptions(kInt64).device(self.device());
  const Tensor keys_in = ops::contiguous(index), positions_in = arange(k, longs);
  const Tensor keys = empty({k}, longs), positions = empty({k}, longs);
  KILN_CHECK(k <= INT_MAX, name, ": an index of ", k, " values is more than CUB's sort takes (", INT_MAX, ")");
  const auto* kin = static_cast<const int64_t*>(keys_in.raw_data_ptr());
  const auto* vin = static_cast<const int64_t*>(positions_in.raw_data_ptr());
  auto* kout = static_cast<int64_t*>(keys.raw_data_ptr());
  auto* vout = static_cast<int64_t*>(positions.raw_data_ptr());
  const IndexCheck check = cuda::make_index_check(kIndexAddId, dim, n);
  check_index_kernel<<<blocks_for(k), kIndexBlock, 0, stream>>>(kin, k, check);
  // Not check_launch: as on the atomic path, a bad index is reported after the valid terms are added.
  KILN_CUDA_CHECK_LAUNCH(name);
  if (self.numel() == 0) return check_launch(kIndexAddId);  // a self empty along dim: every index was bad
  size_t bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin, kout, vin, vout, static_cast<int>(k), 0, 64,
                                                  stream),
                  name);
  const Tensor temp = empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, TensorOptions(kUInt8).device(self.device()));
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data_ptr(), bytes, kin, kout, vin, vout,
                                                  static_cast<int>(k), 0, 64, stream),
                  name);
  const Tensor src_c = ops::contiguous(src);
  const bool in_place = self.is_contiguous();
  const Tensor target = in_place ? self : ops::contiguous(self);
  visit_dtype<kFloatingSet>(self.dtype(), name, [&]<typename T>() {
    const int64_t total = self.numel();
    index_add_ordered_kernel<T><<<blocks_for(total), kIndexBlock, 0, stream>>>(
        static_cast<T*>(target.raw_data_ptr()), static_cast<const T*>(src_c.raw_data_ptr()), kout, vout, outer, n,
        inner, k, alpha.to<opmath_t<T>>());
  });
  check_launch(kIndexAddId);
  if (!in_place) ops::copy_(self, target);
}

// self: (..., n, ...), index: (k), src: self's shape with dim -> k. Floating-point sums with atomics vary in
// their last bits from run to run where an index repeats; under deterministic algorithms they are added in order.
void index_add_cuda(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  if (is_floating(self.dtype()) && are_deterministic_algorithms_enabled()) {
    return index_add_ordered(self, dim, index, src, alpha);
  }
  scatter_launch(kIndexAddId, self, dim, index, expanded_index_strides(index, src.dim(), dim), src, src.sizes(),
                 alpha);
}

// ---- nonzero ----

// Whether element i of x is nonzero (NaN is, -0.0 is not), compared as the frontend counted: in op-math.
template <typename T>
struct IsNonzeroAt {
  const T* x;
  __device__ bool operator()(int64_t i) const { return static_cast<opmath_t<T>>(x[i]) != opmath_t<T>(0); }
};

// out (count, dims): row f holds the coordinates of flat position flat[f] in a tensor of `sizes`.
__global__ void __launch_bounds__(256)
    unravel_kernel(const int64_t* __restrict__ flat, int64_t* __restrict__ out, int64_t count,
                   const int64_t* __restrict__ sizes, int64_t dims) {
  for (int64_t f = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < count;
       f += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = flat[f];
    for (int64_t d = dims - 1; d >= 0; --d) {
      out[f * dims + d] = rest % sizes[d];
      rest /= sizes[d];
    }
  }
}

// CUB's DeviceSelect::If over the positions 0..n-1 keeps, in order, those whose element is nonzero; for more
// than one dim a kernel then unravels each kept position into its coordinates. The frontend counted the
// nonzeros the same way, so the selection fills out exactly.
void nonzero_cuda(const Tensor& out, const Tensor& x) {
  const int64_t n = x.numel(), count = out.size(0), dims = x.dim();
  KILN_CHECK(dims >= 1 && out.is_contiguous() && x.is_contiguous(), "nonzero (CUDA): expected a contiguous input ",
             "of at least 1 dim, got ", shape_str(x.sizes()));
  if (count == 0) return;
  const int device = x.device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;
  const TensorOptions longs = TensorOptions(kInt64).device(x.device());
  const Tensor flat = dims == 1 ? out : empty({count}, longs);
  const Tensor selected = empty({1}, longs);
  visit_dtype(x.dtype(), "nonzero (CUDA)", [&]<typename T>() {
    const IsNonzeroAt<T> nonzero_at{static_cast<const T*>(x.raw_data_ptr())};
    const thrust::counting_iterator<int64_t> positions(0);
    int64_t* kept = static_cast<int64_t*>(flat.raw_data_ptr());
    int64_t* kept_count = static_cast<int64_t*>(selected.raw_data_ptr());
    size_t bytes = 0;
    KILN_CUDA_CHECK(cub::DeviceSelect::If(nullptr, bytes, positions, kept, kept_count, n, nonzero_at, stream),
                    "nonzero");
    const Tensor temp = empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, TensorOptions(kUInt8).device(x.device()));
    KILN_CUDA_CHECK(cub::DeviceSelect::If(temp.raw_data_ptr(), bytes, positions, kept, kept_count, n, nonzero_at,
                                          stream),
                    "nonzero");
  });
  if (dims == 1) return;
  const Shape& shape = x.sizes();
  const Tensor sizes = ops::to(tensor(std::vector<int64_t>(shape.begin(), shape.end())), x.device());
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, int64_t{1} << 20));
  unravel_kernel<<<blocks, 256, 0, stream>>>(static_cast<const int64_t*>(flat.raw_data_ptr()),
                                             static_cast<int64_t*>(out.raw_data_ptr()), count,
                                             static_cast<const int64_t*>(sizes.raw_data_ptr()), dims);
  KILN_CUDA_CHECK_LAUNCH("nonzero");
}

}  // namespace

namespace detail {
// For a synchronization point that wants to report index errors at once (not yet called from one).
void raise_cuda_index_errors() { raise_pending_index_error(); }

void register_cuda_indexing_kernels() {
  register_kernel<Op::index_select>(DeviceType::CUDA, index_select_cuda);
  register_kernel<Op::gather>(DeviceType::CUDA, gather_cuda);
  register_kernel<Op::scatter>(DeviceType::CUDA, scatter_cuda);
  register_kernel<Op::scatter_add>(DeviceType::CUDA, scatter_add_cuda);
  register_kernel<Op::index_add>(DeviceType::CUDA, index_add_cuda);
  register_kernel<Op::nonzero>(DeviceType::CUDA, nonzero_cuda);
}
}  // namespace detail
}  // namespace kiln
