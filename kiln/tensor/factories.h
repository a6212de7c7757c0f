// Making tensors: empty/zeros/ones/full, ranges, identity, random, and wrapping or copying existing memory.
#pragma once

#include <functional>
#include <vector>

#include "kiln/tensor/rng.h"
#include "kiln/tensor/tensor.h"

namespace kiln {

// Uninitialized memory (the contents are whatever was there).
Tensor empty(IntArrayRef shape, TensorOptions options = {});
Tensor zeros(IntArrayRef shape, TensorOptions options = {});
Tensor ones(IntArrayRef shape, TensorOptions options = {});
// The dtype, if not given, follows the value: bool, int64, or the default float dtype.
Tensor full(IntArrayRef shape, const Scalar& value, TensorOptions options = {});
// A 0-dim tensor.
Tensor scalar_tensor(const Scalar& value, TensorOptions options = {});

// [start, end) in steps; int64 when all three are integers, else the default float dtype.
Tensor arange(const Scalar& end, TensorOptions options = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, TensorOptions options = {});
// `steps` evenly spaced values from start to end inclusive.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// n x m identity (m = n if omitted).
Tensor eye(int64_t n, int64_t m = -1, TensorOptions options = {});

// Uniform on [0, 1); standard normal; integers uniform on [low, high). gen = nullptr uses the default one.
Tensor rand(IntArrayRef shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(IntArrayRef shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, IntArrayRef shape, TensorOptions options = kInt64, Generator* gen = nullptr);
Tensor randint(int64_t high, IntArrayRef shape, TensorOptions options = kInt64, Generator* gen = nullptr);
Tensor randperm(int64_t n, TensorOptions options = kInt64, Generator* gen = nullptr);
// Category indices (int64) drawn from probs: (n) non-negative weights (they need not sum to 1) -> (num_samples),
// or (rows, n) -> (rows, num_samples), one draw per row, as torch.multinomial. Without replacement a row
// yields distinct categories, each next one in proportion to the weights left (num_samples at most the
// categories of positive weight). A weight that is negative, infinite or NaN, or a row without a positive
// one, is an error. Any device; the same draws there as on the CPU (ops/multinomial.cpp).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);
// In place: x = U[from, to), N(mean, std), Bernoulli(p) (1 with probability p).
Tensor& uniform_(Tensor& x, double from = 0.0, double to = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& x, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& bernoulli_(Tensor& x, double p, Generator* gen = nullptr);

Tensor empty_like(const Tensor& x, TensorOptions options = {});  // options default to x's dtype and device
Tensor zeros_like(const Tensor& x, TensorOptions options = {});
Tensor ones_like(const Tensor& x, TensorOptions options = {});
Tensor full_like(const Tensor& x, const Scalar& value, TensorOptions options = {});
Tensor rand_like(const Tensor& x, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn_like(const Tensor& x, TensorOptions options = {}, Generator* gen = nullptr);

// Copies values into a new tensor (shape defaults to 1-D), converting from T to the dtype (default: T's).
template <typename T>
Tensor tensor(const std::vector<T>& values, IntArrayRef shape = {}, TensorOptions options = {});
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});
// Copies nbytes-worth of `dtype` elements from `data` (a CPU buffer) into a new tensor of `shape`.
Tensor from_buffer(const void* data, IntArrayRef shape, DType dtype, TensorOptions options = {});
// Wraps memory without copying: the tensor views `data` (contiguous unless strides are given); `deleter`
// (if any) runs when the last view is gone. The memory must stay valid until then.
Tensor from_blob(void* data, IntArrayRef shape, DType dtype, std::function<void(void*)> deleter = {},
                 Device device = kCPU);
Tensor from_blob(void* data, IntArrayRef shape, IntArrayRef strides, DType dtype,
                 std::function<void(void*)> deleter = {}, Device device = kCPU);

}  // namespace kiln
