// PLACEHOLDER
#include "kiln/tensor/ops/reduce.h"
namespace kiln {
Tensor sum(const Tensor& x, IntArrayRef, bool, std::optional<DType>) { KILN_CHECK(false, "sum: todo"); return x; }
Tensor mean(const Tensor& x, IntArrayRef, bool) { KILN_CHECK(false, "todo"); return x; }
Tensor max(const Tensor& x) { KILN_CHECK(false, "todo"); return x; }
Tensor min(const Tensor& x) { KILN_CHECK(false, "todo"); return x; }
Tensor argmax(const Tensor& x, std::optional<int64_t>, bool) { KILN_CHECK(false, "todo"); return x; }
Tensor argmin(const Tensor& x, std::optional<int64_t>, bool) { KILN_CHECK(false, "todo"); return x; }
}
