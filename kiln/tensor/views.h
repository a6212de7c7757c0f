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
// Writes src into dst: broadcasts src, converts dtype and device; safe when the two overlap.
const Tensor& copy_(const Tensor& dst, const Tensor& src);
Tensor to(const Tensor& self, Device device, DType dtype);  // returns self when nothing changes
Tensor to(const Tensor& self, DType dtype);
Tensor to(const Tensor& self, Device device);
const Tensor& fill_(const Tensor& self, const Scalar& value);

}  // namespace kiln::ops
