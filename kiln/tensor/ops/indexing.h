// Moving data: joining, splitting, gathering, scattering, and the shape utilities built on them.
// Index tensors are int64 (int32 is accepted and converted); an out-of-range index is an error naming it.
#pragma once

#include <vector>

#include "kiln/tensor/ops/op_list.h"
#include "kiln/tensor/tensor.h"

namespace kiln::ops {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);  // views
std::vector<Tensor> split(const Tensor& x, IntArrayRef sizes, int64_t dim = 0);   // views
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);      // views
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);                     // views: x.select(dim, i) for each i

// x: (..., n, ...), index: (k) -> (..., k, ...)
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[index[i][j][k]][j][k] for dim 0 (and so on); index has x's number of dims and is no
// larger than x outside dim; out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// The inverses of gather: self[index[i][j]][j] = src[i][j] (dim 0). scatter with duplicate indices keeps one
// of the values (which one is unspecified, as in PyTorch); scatter_add sums them. index has self's number of
// dims and is no larger than src, nor than self outside dim; src has self's dtype.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value);
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Scalar& value);
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// self.index_select(dim, index) += alpha * src
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1);
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1);

// The coordinates of x's nonzero (true) elements, in row-major order: (count, x.dim()) int64, as torch.nonzero.
// flat_nonzero: their flat positions in x instead, (count) int64, as numpy's flatnonzero. Either reads the count
// from the device once.
Tensor nonzero(const Tensor& x);
Tensor flat_nonzero(const Tensor& x);

// indices: (...) int64 in [0, num_classes) -> (..., num_classes) int64. num_classes -1: max + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// The lower / upper triangle of the last two dims (diagonal k and below / above), zeros elsewhere.
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
Tensor flip(const Tensor& x, IntArrayRef dims);
// Tiles x: repeats has at least x.dim() entries (leading ones add dims), as torch.Tensor.repeat.
Tensor repeat(const Tensor& x, IntArrayRef repeats);
// Constant padding; pads lists (before, after) pairs starting from the LAST dim, as torch.nn.functional.pad.
Tensor pad(const Tensor& x, IntArrayRef pads, const Scalar& value = 0);
// Padding by copies of x's own elements (mode Reflect, Replicate or Circular; kiln/tensor/ops/pad.h) over at
// most the last three dims, through the pad kernels. check_pad names the first pad the mode cannot take: reflect
// needs each pad below its dim's size, replicate a non-empty dim, circular each pad in [0, the dim's size].
void check_pad(const Tensor& x, IntArrayRef pads, PadMode mode);
Tensor pad(const Tensor& x, IntArrayRef pads, PadMode mode);
// grad_out: input_shape padded by pads -> grad_x of input_shape, each element the sum of the outputs copying it.
Tensor pad_backward(const Tensor& grad_out, IntArrayRef pads, PadMode mode, IntArrayRef input_shape);

}  // namespace kiln::ops
