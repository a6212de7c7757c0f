// Ops along one dim that depend on the order of its elements: cumulative sums, sorting and the k largest.
//
//   auto [values, indices] = ops::sort(x, 1, /*descending=*/true);
//   auto [top, where] = ops::topk(logits, 5);           // the 5 largest of each row, largest first
//   Tensor running = ops::cumsum(x, 0);
//
// Sorting is stable (equal elements keep their order, and -0.0 equals 0.0) and NaN sorts above every number,
// as PyTorch's stable sort; the CPU and CUDA kernels give the same indices.
#pragma once

#include <optional>
#include <utility>

#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...] along dim. Integer and bool inputs sum in int64
// unless a dtype is asked for (x is converted to it first), as sum does; floating inputs accumulate in float64.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// (values, indices): x's lines along dim in order, and where each value was (int64). A 0-dim x is one element.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

// (values, indices) of the k largest (largest = false: smallest) elements of each line along dim, in order
// (largest first, or smallest first); ties go to the smaller index. 0 <= k <= x.size(dim).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

}  // namespace kiln::ops
