// PLACEHOLDER: replaced by the indexing kernels.
#include "kiln/tensor/ops/register.h"
namespace kiln::detail {
void register_indexing_cpu_kernels() {}
}  // namespace kiln::detail
