// The kernel lab: a kernel of your own for one of kiln's ops, checked against the kernel it replaces and timed
// beside it, with roofline figures. For people who write kernels: no framework file is edited, and the rest of
// kiln (autograd, nn, the Trainer) runs your kernel wherever it calls the op.
//
//   // The op's kernel signature is in ops/op_list.h: KernelFn<Op::relu> is void(const Tensor& out, const Tensor& x).
//   void my_relu(const Tensor& out, const Tensor& x) { ... }
//
//   const Tensor x = randn({1 << 22});
//   auto work = [&] {          // any code that reaches the op: one call, a layer, forward and backward
//     Tensor leaf = x.detach().requires_grad_();
//     Tensor y = relu(leaf);
//     return std::vector<Tensor>{y, autograd::grad({y.sum()}, {leaf})[0]};
//   };
//   lab::Check c = lab::check_variant<Op::relu>(DeviceType::CPU, my_relu, work);
//   std::cout << c.report;     // per returned tensor: the worst error, where, and whether it is within tolerance
//   lab::Timing t = lab::time_variant<Op::relu>(DeviceType::CPU, my_relu, work,
//                                               {.bytes = 8.0 * x.numel(), .peaks = lab::measure_cpu_peaks()});
//   std::cout << t.report;     // kiln's kernel and yours: median ms, GB/s, GFLOP/s, fraction of the roofline
//
// check_variant runs `work` twice from the same random state: first with the kernel now in the table (the
// reference), then with yours installed; on both runs every new CPU and CUDA allocation is poisoned (NaN in
// floating tensors, all bits set in integer ones), so that elements your kernel leaves unwritten show (and
// elements no kernel writes, as empty()'s, compare NaN with NaN). It compares the tensors work returns, one by
// one, within a tolerance per dtype, and counts your kernel's calls on their way to it: a variant that work
// never reached fails the check (one that hands every call back to the kernel it replaced passes: the check
// sees calls, not what they did). `work` must give the same results when run again: compute gradients with
// autograd::grad (a leaf's .grad would add up across the runs), or clear them. One check of an op at a time.
//
// time_variant runs work with each kernel in turn, interleaved, and reports medians (BENCHMARKS.md: this
// machine is shared; ratios, not absolute times). Make the inputs outside work, so that only the op is timed.
// The roofline bound of work is max(flops / peak GFLOP/s, bytes / peak GB/s): the fraction reported is that
// bound over the measured time (1 is the machine's limit). On CUDA each run ends with a device synchronize.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/tensor.h"

namespace kiln::lab {

using Work = std::function<std::vector<Tensor>()>;

// |variant - reference| <= atol + rtol * |reference| elementwise; a negative value takes the dtype's default
// (float64 1e-12 and 1e-12, float32 1e-5 and 1e-6, float16 1e-3 and 1e-3, bfloat16 1.6e-2 and 1e-2; integers
// and bool exactly). NaN must meet NaN and an infinity the same infinity.
struct Tolerance {
  double rtol = -1;
  double atol = -1;
};

struct Check {
  bool ok = false;
  int64_t variant_calls = 0;  // calls of the variant during work
  double max_abs_error = 0;   // over every floating output
  double max_rel_error = 0;   // |variant - reference| / |reference| where the reference is not 0
  std::string report;         // what was compared and, for a failure, where and by how much
};

// A machine's ceilings: the fp32 multiply-add peak and the streaming memory bandwidth.
struct Peaks {
  double gflops = 0;
  double gbps = 0;
};

struct TimingOptions {
  int reps = 9;
  int warmup = 2;
  double flops = 0;  // the work's arithmetic (a multiply-add is 2), for GFLOP/s; 0: not reported
  double bytes = 0;  // the least memory traffic the work needs (inputs read once, outputs written once)
  Peaks peaks;       // for the roofline fraction; zeros: not reported
};

struct Timing {
  double reference_seconds = 0;  // median, the kernel that was in the table
  double variant_seconds = 0;    // median, yours
  double speedup = 0;            // reference_seconds / variant_seconds
  std::string report;
};

// This machine's ceilings, measured now on `threads` threads (0: kiln's thread count): independent FMA chains on
// the widest vectors the build targets, and the best of a streaming sum, copy, triad and update over three
// buffers of `buffer_bytes` each (far larger than the caches). Takes a few seconds.
Peaks measure_cpu_peaks(int threads = 0, size_t buffer_bytes = size_t{256} << 20);
double fma_peak_gflops(int threads);  // 0 in a build without FMA vectors
double stream_bandwidth_gbs(int threads, size_t buffer_bytes = size_t{256} << 20, int reps = 5);

// Installs a kernel for op on a device type while it lives, and puts the one it replaced back.
template <Op op>
class ScopedKernel {
 public:
  ScopedKernel(DeviceType device, KernelFn<op> fn) : device_(device), previous_(register_kernel<op>(device, fn)) {}
  ~ScopedKernel() { register_kernel<op>(device_, previous_); }
  ScopedKernel(const ScopedKernel&) = delete;
  ScopedKernel& operator=(const ScopedKernel&) = delete;
  // The kernel it replaced (for a variant that hands the cases it does not cover back to it).
  KernelFn<op> previous() const { return previous_; }

 private:
  DeviceType device_;
  KernelFn<op> previous_;
};

namespace detail {
// Swaps the variant in (true) or the reference back (false).
using Install = std::function<void(bool variant)>;
Check check_variant(Op op, DeviceType device, const Install& install, const std::function<int64_t()>& calls,
                    const Work& work, Tolerance tolerance);
Timing time_variant(Op op, DeviceType device, const Install& install, const Work& work, const TimingOptions& options);

// A kernel with op's signature that counts its calls and passes them on to `target`: what check_variant
// installs in the variant's place.
template <Op op, class Signature = typename OpSignature<op>::type>
struct CountingKernel;
template <Op op, class R, class... A>
struct CountingKernel<op, R(A...)> {
  static inline KernelFn<op> target = nullptr;
  static inline std::atomic<int64_t> calls{0};
  static R call(A... args) {
    calls.fetch_add(1, std::memory_order_relaxed);
    return target(std::forward<A>(args)...);
  }
};
}  // namespace detail

template <Op op>
Check check_variant(DeviceType device, KernelFn<op> variant, const Work& work, Tolerance tolerance = {}) {
  using Counting = detail::CountingKernel<op>;
  const auto reference = reinterpret_cast<KernelFn<op>>(kiln::detail::kernel_slot(op, device));
  Counting::target = variant;
  Counting::calls = 0;
  return detail::check_variant(
      op, device, [&](bool use) { register_kernel<op>(device, use ? &Counting::call : reference); },
      [] { return Counting::calls.load(); }, work, tolerance);
}

template <Op op>
Timing time_variant(DeviceType device, KernelFn<op> variant, const Work& work, const TimingOptions& options = {}) {
  const auto reference = reinterpret_cast<KernelFn<op>>(kiln::detail::kernel_slot(op, device));
  return detail::time_variant(
      op, device, [&](bool use) { register_kernel<op>(device, use ? variant : reference); }, work, options);
}

}  // namespace kiln::lab
