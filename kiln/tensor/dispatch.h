// The dispatch table: one kernel per (op, device type), looked up in one step.
//
//   call_kernel<Op::exp>(x.device(), out, x);   // throws "exp: no CUDA kernel" if the slot is empty
//
// Frontends call kernels through call_kernel, which is also where the profiler (profiler.h) times each call.
// The CPU kernels are installed the first time the table is used; the CUDA ones too, in a build with CUDA.
// Anyone may replace a slot (a faster variant to benchmark, a custom kernel): register_kernel returns the
// kernel it replaced so it can be put back.
#pragma once

#include <array>
#include <utility>

#include "kiln/tensor/device.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/ops/op_list.h"
#include "kiln/tensor/profiler.h"

namespace kiln {

namespace detail {
using AnyKernel = void (*)();
AnyKernel& kernel_slot(Op op, DeviceType device);  // installs the built-in kernels on first use
[[noreturn]] void throw_no_kernel(Op op, DeviceType device);
}  // namespace detail

template <Op op>
using KernelFn = typename OpSignature<op>::type*;

template <Op op>
KernelFn<op> get_kernel(Device device) {
  auto fn = detail::kernel_slot(op, device.type);
  if (fn == nullptr) [[unlikely]] detail::throw_no_kernel(op, device.type);
  return reinterpret_cast<KernelFn<op>>(fn);
}

// Runs op's kernel for `device` on args. While a profiler records kernels, the call is one of its events.
template <Op op, class... Args>
void call_kernel(Device device, Args&&... args) {
  const KernelFn<op> fn = get_kernel<op>(device);
  if (profiler::detail::recording(profiler::Kind::Kernel)) [[unlikely]] {
    profiler::detail::KernelScope scope(op_name(op), device);
    fn(std::forward<Args>(args)...);
    return;
  }
  fn(std::forward<Args>(args)...);
}

template <Op op>
bool has_kernel(DeviceType device) {
  return detail::kernel_slot(op, device) != nullptr;
}

// Installs `fn` for op on a device type; returns the previous kernel (nullptr if none).
template <Op op>
KernelFn<op> register_kernel(DeviceType device, KernelFn<op> fn) {
  auto& slot = detail::kernel_slot(op, device);
  auto previous = reinterpret_cast<KernelFn<op>>(slot);
  slot = reinterpret_cast<detail::AnyKernel>(fn);
  return previous;
}

}  // namespace kiln
