// CPU kernels for copy (with dtype conversion), fill and arange.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/ops/loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

// One tile: out's rows i in [a0, a1) (stride out_stride_a apart), columns j in [l0, l1), from x, whose elements
// along i are adjacent. Everything by value: read through references, each store might change the bounds.
template <typename E>
void copy_tile(E* __restrict dst, const E* __restrict src, int64_t a0, int64_t a1, int64_t l0, int64_t l1,
               int64_t out_stride_a, int64_t x_stride_l) {
  for (int64_t i = a0; i < a1; ++i)
    for (int64_t j = l0; j < l1; ++j) dst[i * out_stride_a + j] = src[i + j * x_stride_l];
}

// A copy into a contiguous out from an x of the same dtype whose unit-stride dim `a` is not the last (a
// transpose made contiguous: x.t().contiguous()). Element by element, each row of out reads one element from
// every line of x along a, and each of those lines is fetched again for every row; 2.9x LibTorch's time for a
// (4096, 1024) float transpose. In square tiles of dims a and last, the tile's lines of both stay in the cache.
template <typename E>
void copy_in_tiles(const Tensor& out, const Tensor& x, int64_t a) {
  constexpr int64_t kTile = 32;
  const int64_t n = x.dim(), last = n - 1;
  const int64_t size_a = x.size(a), size_l = x.size(last);
  const int64_t out_stride_a = out.stride(a), x_stride_l = x.stride(last);
  const int64_t tiles_a = (size_a + kTile - 1) / kTile, tiles_l = (size_l + kTile - 1) / kTile;
  const int64_t others = x.numel() / (size_a * size_l);
  E* dst = static_cast<E*>(out.raw_data_ptr());
  const E* src = static_cast<const E*>(x.raw_data_ptr());
  parallel_for(0, others * tiles_a * tiles_l, std::max<int64_t>(1, kDefaultGrain / (kTile * kTile)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t tl = t % tiles_l, ta = t / tiles_l % tiles_a;
                   // Where the other dims stand, from the last of them to the first.
                   int64_t rest = t / (tiles_l * tiles_a), out_base = 0, x_base = 0;
                   for (int64_t d = n - 2; d >= 0; --d) {
                     if (d == a) continue;
                     const int64_t i = rest % x.size(d);
                     rest /= x.size(d);
                     out_base += i * out.stride(d), x_base += i * x.stride(d);
                   }
                   copy_tile(dst + out_base, src + x_base, ta * kTile, std::min(size_a, (ta + 1) * kTile),
                             tl * kTile, std::min(size_l, (tl + 1) * kTile), out_stride_a, x_stride_l);
                 }
               });
}

// The dim along which x's elements are adjacent, when it is not the last and copying in tiles pays (both dims
// of the tiles at least 16 long); -1 otherwise.
int64_t tile_dim(const Tensor& out, const Tensor& x) {
  if (out.dtype() != x.dtype() || !out.is_contiguous() || x.dim() < 2) return -1;
  const int64_t last = x.dim() - 1;
  if (x.stride(last) == 1 || x.size(last) < 16) return -1;
  for (int64_t d = 0; d < last; ++d)
    if (x.stride(d) == 1 && x.size(d) >= 16) return d;
  return -1;
}

// out: any strides; x: out's shape (broadcast already applied), any dtype.
void copy_cpu(const Tensor& out, const Tensor& x) {
  KILN_CHECK(out.device().is_cpu() && x.device().is_cpu(), "copy: the CPU kernel cannot copy from ", x.device(),
             " to ", out.device());
  if (out.dtype() == x.dtype() && out.is_contiguous() && x.is_contiguous()) {
    if (out.raw_data_ptr() != x.raw_data_ptr()) std::memcpy(out.raw_data_ptr(), x.raw_data_ptr(), out.nbytes());
    return;
  }
  if (const int64_t a = tile_dim(out, x); a >= 0) {
    switch (out.element_size()) {
      case 1: return copy_in_tiles<uint8_t>(out, x, a);
      case 2: return copy_in_tiles<uint16_t>(out, x, a);
      case 4: return copy_in_tiles<uint32_t>(out, x, a);
      case 8: return copy_in_tiles<uint64_t>(out, x, a);
      default: break;
    }
  }
  visit_dtype(out.dtype(), "copy", [&]<typename O>() {
    visit_dtype(x.dtype(), "copy", [&]<typename I>() { cpu::cpu_kernel<O, I>(out, functors::Identity{}, x); });
  });
}

void fill_cpu(const Tensor& out, const Scalar& value) {
  visit_dtype(out.dtype(), "fill", [&]<typename T>() {
    const T v = value.to<T>();
    if (out.is_contiguous()) {
      T* p = out.data_ptr<T>();
      parallel_for(0, out.numel(), kDefaultGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) p[i] = v;
      });
      return;
    }
    cpu::StridedIter<1> iter({&out});
    iter.run([&](char** ptrs, const int64_t* strides, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(ptrs[0] + i * strides[0]) = v;
    });
  });
}

// out: contiguous (the frontend allocates it).
void arange_cpu(const Tensor& out, const Scalar& start, const Scalar& step) {
  KILN_ASSERT(out.is_contiguous());
  visit_dtype<kNumericSet>(out.dtype(), "arange", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    if constexpr (std::is_integral_v<T>) {
      if (!start.is_floating() && !step.is_floating()) {
        const int64_t s = start.to_int(), st = step.to_int();
        parallel_for(0, out.numel(), kDefaultGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(s + i * st);
        });
        return;
      }
    }
    const double s = start.to_double(), st = step.to_double();
    parallel_for(0, out.numel(), kDefaultGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(static_cast<opmath_t<T>>(s + static_cast<double>(i) * st));
    });
  });
}

}  // namespace

namespace detail {
void register_copy_cpu_kernels() {
  register_kernel<Op::copy>(DeviceType::CPU, copy_cpu);
  // Between two CPU tensors there is nothing to wait for: a non-blocking copy is the same copy.
  register_kernel<Op::copy_async>(DeviceType::CPU, copy_cpu);
  register_kernel<Op::fill>(DeviceType::CPU, fill_cpu);
  register_kernel<Op::arange>(DeviceType::CPU, arange_cpu);
}
}  // namespace detail
}  // namespace kiln
