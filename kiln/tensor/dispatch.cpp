#include "kiln/tensor/dispatch.h"

#include <array>
#include <mutex>

#include "kiln/tensor/ops/register.h"

namespace kiln {

namespace {

constexpr const char* kOpNames[] = {
#define KILN_OP_NAME(name, K) #name,
    KILN_FORALL_OPS(KILN_OP_NAME)
#undef KILN_OP_NAME
};
static_assert(std::size(kOpNames) == kNumOps, "op names and the Op enum are out of step");

using Table = std::array<std::array<detail::AnyKernel, kNumDeviceTypes>, kNumOps>;

Table& table() {
  static Table t{};
  return t;
}

void install_builtin_kernels() {
  detail::register_copy_cpu_kernels();
  detail::register_random_cpu_kernels();
  detail::register_unary_cpu_kernels();
  detail::register_binary_cpu_kernels();
  detail::register_activation_cpu_kernels();
  detail::register_reduce_cpu_kernels();
  detail::register_softmax_cpu_kernels();
  detail::register_along_dim_cpu_kernels();
  detail::register_linalg_cpu_kernels();
  detail::register_decomposition_cpu_kernels();
  detail::register_indexing_cpu_kernels();
  detail::register_conv_cpu_kernels();
  detail::register_adaptive_pool_cpu_kernels();
  detail::register_pad_cpu_kernels();
  detail::register_optim_cpu_kernels();
  detail::register_cross_entropy_cpu_kernels();
  detail::register_ctc_cpu_kernels();
  detail::register_embedding_bag_cpu_kernels();
  detail::register_grid_sample_cpu_kernels();
  detail::register_resize_taps_cpu_kernels();
  detail::register_normalization_cpu_kernels();
#ifdef KILN_WITH_CUDA
  detail::register_cuda_kernels();
#endif
}

}  // namespace

const char* op_name(Op op) { return kOpNames[static_cast<int>(op)]; }

const char* op_inplace_name(Op op) {
  static constexpr const char* kInplaceNames[] = {
#define KILN_OP_INPLACE_NAME(name, K) #name "_",
      KILN_FORALL_OPS(KILN_OP_INPLACE_NAME)
#undef KILN_OP_INPLACE_NAME
  };
  return kInplaceNames[static_cast<int>(op)];
}

namespace detail {

AnyKernel& kernel_slot(Op op, DeviceType device) {
  // The built-ins are installed once, before anyone reads or replaces a slot. Registration itself goes through
  // register_kernel, which calls kernel_slot: the flag lets those nested calls through.
  static std::once_flag once;
  static thread_local bool installing = false;
  if (!installing) {
    std::call_once(once, [] {
      installing = true;
      install_builtin_kernels();
      installing = false;
    });
  }
  return table()[static_cast<int>(op)][static_cast<int>(device)];
}

void throw_no_kernel(Op op, DeviceType device) {
  const char* dev = device == DeviceType::CPU ? "CPU" : "CUDA";
  throw_error(concat(op_name(op), ": no ", dev, " kernel",
                     device == DeviceType::CUDA ? " (this op does not run on the GPU yet; move the tensors to the CPU)" : ""));
}

}  // namespace detail
}  // namespace kiln
