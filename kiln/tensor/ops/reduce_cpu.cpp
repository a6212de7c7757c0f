// PLACEHOLDER: replaced by the reduction kernels.
#include "kiln/tensor/ops/register.h"
namespace kiln::detail {
void register_reduce_cpu_kernels() {}
}  // namespace kiln::detail
