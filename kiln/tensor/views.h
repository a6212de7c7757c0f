// Views and copies without autograd: the tensor layer's own versions of Tensor's view and copy methods.
//
// Code above the tensor layer calls the Tensor methods (x.view(...), x.clone()), which the autograd layer
// defines on top of these and records for backward. Code inside the tensor layer calls these directly, so
// the tensor library links and runs on its own.
#pragma once

#include <optional>
#include <vector>

#include "kiln/tensor/tensor.h"

namespace kiln::ops {

// ---- views (share storage; see the Tensor methods of the same names) ----
Tensor alias(const Tensor& self);
Tensor view(const Tensor& self, IntArrayRef shape);
Tensor reshape(const Tensor& self, IntArrayRef shape);
Tensor transpose(const Tensor& self, int64_t d0, int64_t d1);
Tensor permute(const Tensor& self, IntArrayRef order);
Tensor t(const Tensor& self);
Tensor mT(const Tensor& self);
Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& self, int64_t dim, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> stop = std::nullopt, int64_t step = 1);
Tensor select(const Tensor& self, int64_t dim, int64_t index);
Tensor index(const Tensor& self, std::initializer_list<TensorIndex> indices);
Tensor index(const Tensor& self, const std::vector<TensorIndex>& indices);
Tensor expand(const Tensor& self, IntArrayRef shape);
Tensor squeeze(const Tensor& self);
Tensor squeeze(const Tensor& self, int64_t dim);
Tensor unsqueeze(const Tensor& self, int64_t dim);
Tensor flatten(const Tensor& self, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& self, int64_t dim, IntArrayRef sizes);
Tensor unfold(const Tensor& self, int64_t dim, int64_t size, int64_t step);
Tensor diagonal(const Tensor& self, int64_t offset = 0, int64_t d0 = 0, int64_t d1 = 1);
Tensor as_strided(const Tensor& self, IntArrayRef shape, IntArrayRef strides,
                  std::optional<int64_t> offset = std::nullopt);

// ---- copies and conversion ----
Tensor contiguous(const Tensor& self);
Tensor clone(const Tensor& self);
// Writes src into dst: broadcasts src, converts dtype and device; safe when the two overlap. non_blocking: a
// copy between host and GPU whose host side is pinned memory (from the host: contiguous; to it: contiguous and
// of dst's dtype) is only queued on the GPU's current stream, and the call returns at once. The host must then
// synchronize (the stream, an event) before it reads a pinned destination or writes a pinned source it still
// holds; kiln's pinned cache only keeps memory whose tensor is gone from being reused too early. Any other copy
// waits, as without non_blocking (so does one autograd records into a tensor that requires grad).
const Tensor& copy_(const Tensor& dst, const Tensor& src, bool non_blocking = false);
// Returns self when nothing changes. non_blocking, from a GPU to the CPU: the result is pinned memory (where a
// device is present) and the copy only queued, as copy_'s.
Tensor to(const Tensor& self, Device device, DType dtype, bool non_blocking = false);
Tensor to(const Tensor& self, DType dtype);
Tensor to(const Tensor& self, Device device, bool non_blocking = false);
const Tensor& fill_(const Tensor& self, const Scalar& value);

}  // namespace kiln::ops
