// CPU kernels for copy (with dtype conversion), fill and arange.
#include <cstring>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/ops/loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

// out: any strides; x: out's shape (broadcast already applied), any dtype.
void copy_cpu(const Tensor& out, const Tensor& x) {
  KILN_CHECK(out.device().is_cpu() && x.device().is_cpu(), "copy: the CPU kernel cannot copy from ", x.device(),
             " to ", out.device());
  if (out.dtype() == x.dtype() && out.is_contiguous() && x.is_contiguous()) {
    if (out.raw_data_ptr() != x.raw_data_ptr()) std::memcpy(out.raw_data_ptr(), x.raw_data_ptr(), out.nbytes());
    return;
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
