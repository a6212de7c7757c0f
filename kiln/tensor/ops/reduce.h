// Reductions over any set of dims (an empty list means all dims), with keepdim, and softmax.
// Floating inputs accumulate in float64 on the CPU; sums of integer or bool tensors return int64 (as PyTorch).
#pragma once

#include <optional>
#include <utility>

#include "kiln/tensor/tensor.h"

namespace kiln::ops {

Tensor sum(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);  // float dtypes only
Tensor prod(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor amax(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements; an empty tensor is an error
Tensor min(const Tensor& x);
// Values and (int64) indices of the max/min along dim; ties give the first index; NaN counts as the max.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// Without dim: the index into the flattened tensor.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1); std is its square root.
Tensor var(const Tensor& x, IntArrayRef dims = {}, double correction = 1.0, bool keepdim = false);
Tensor std(const Tensor& x, IntArrayRef dims = {}, double correction = 1.0, bool keepdim = false);
// The p-norm (p = 2 by default; p = inf gives max |x|, p = 0 the count of non-zeros).
Tensor norm(const Tensor& x, double p = 2.0, IntArrayRef dims = {}, bool keepdim = false);
// log(sum(exp(x))) computed as max + log(sum(exp(x - max))), so large inputs do not overflow. Empty dims:
// all dims.
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim = false);
Tensor all(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);  // bool result
Tensor any(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);  // bool result

// Numerically stable softmax along dim; log_softmax is computed directly (not log(softmax)), which would
// underflow to -inf.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace kiln::ops
