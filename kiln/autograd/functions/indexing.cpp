// Differentiable joining, splitting and indexing. Index tensors never get gradients; the gradient of a gather
// is a scatter-add and the other way round.
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::requires_grad;
using autograd::record;
using autograd::record_inplace;
using autograd::should_record;
using autograd::should_record_any;
using autograd::TensorList;

// cat: each input's gradient is its slice of g along dim.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = ops::cat(tensors, dim);
  if (should_record_any(tensors)) {
    std::vector<int64_t> sizes;
    int64_t d = wrap_dim(dim, out.dim(), "cat");
    for (const Tensor& t : tensors) sizes.push_back(t.dim() == 1 && t.size(0) == 0 && out.dim() > 1 ? 0 : t.size(d));
    record("cat", out, tensors, [sizes, d](const Tensor& g, const OpNode& n) {
      TensorList grads;
      int64_t offset = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        grads.push_back(n.needs_input_grad(i) ? g.narrow(d, offset, sizes[i]) : Tensor());
        offset += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

// The composites.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (!should_record_any(tensors)) return ops::stack(tensors, dim);
  KILN_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    KILN_CHECK(t.sizes() == tensors[0].sizes(), "stack: all tensors must have one shape, got ",
               shape_str(tensors[0].sizes()), " and ", shape_str(t.sizes()));
    parts.push_back(t.unsqueeze(d));
  }
  return cat(parts, d);
}

namespace {
// split, chunk and unbind while recording: the tensor layer's pieces (views of x), all outputs of one node,
// whose backward puts the pieces' gradients together with one cat (zeros for a piece that got none; unbind's
// pieces lost `dim`, so they are stacked). A differentiable narrow per piece, as these were before, gave back
// a zero tensor of x's whole shape for every piece: quadratic in the number of pieces, and the time steps of
// a sequence taken apart that way (an RNN's) cost more in backward than the steps themselves.
std::vector<Tensor> record_pieces(const Tensor& x, std::vector<Tensor> pieces, int64_t dim, const char* op,
                                  bool stacked) {
  if (!should_record(x)) return pieces;
  std::vector<Shape> shapes;
  for (const Tensor& p : pieces) shapes.push_back(p.sizes());
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const TensorOptions options = TensorOptions(x.dtype()).device(x.device());
  autograd::record_outputs(op, pieces, {x}, [shapes, d, options, stacked](const TensorList& grads, const OpNode&) {
    TensorList parts;
    parts.reserve(grads.size());
    for (size_t i = 0; i < grads.size(); ++i)
      parts.push_back(grads[i].defined() ? grads[i] : zeros(shapes[i], options));
    if (parts.empty()) return TensorList{Tensor()};  // no pieces: x had size 0 along dim, no gradient to give
    return TensorList{stacked ? stack(parts, d) : cat(parts, d)};
  });
  return pieces;
}
}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  return record_pieces(x, ops::split(x, split_size, dim), dim, "split", false);
}

std::vector<Tensor> split(const Tensor& x, IntArrayRef sizes, int64_t dim) {
  return record_pieces(x, ops::split(x, sizes, dim), dim, "split", false);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  return record_pieces(x, ops::chunk(x, chunks, dim), dim, "chunk", false);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  return record_pieces(x, ops::unbind(x, dim), dim, "unbind", true);
}

// index_select: dx = zeros, with g added at the selected positions (repeats add up)
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::index_select(x, dim, index);
  if (should_record(x)) {
    record("index_select", out, {x}, [shape = x.sizes(), dim, index](const Tensor& g, const OpNode&) {
      if (shape.empty()) return TensorList{g.reshape({})};
      Tensor g1 = g.dim() == 0 ? g.reshape({1}) : g;
      Tensor idx = index.dim() == 0 ? ops::reshape(index, {1}) : index;
      // In place on fresh zeros: index_add would copy them first (a whole x's worth of traffic for nothing).
      Tensor dx = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
      index_add_(dx, dim, idx, g1);
      return TensorList{dx};
    });
  }
  return out;
}

// masked_select: an index_select of the flattened (broadcast) x at the mask's true positions, which gives it
// index_select's gradient.
Tensor masked_select(const Tensor& x, const Tensor& mask) {
  KILN_CHECK(x.defined() && mask.defined(), "masked_select: an input tensor is undefined");
  KILN_CHECK(mask.dtype() == kBool, "masked_select: expected a bool mask, got ", mask.dtype());
  KILN_CHECK(mask.device() == x.device(), "masked_select: expected the mask on ", x.device(),
             " like the tensor, got ", mask.device());
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  return index_select(x.expand(shape).reshape({-1}), 0, ops::flat_nonzero(ops::expand(mask, shape)));
}

// gather: dx = zeros scatter-added with g at the gathered positions
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::gather(x, dim, index);
  if (should_record(x)) {
    record("gather", out, {x}, [shape = x.sizes(), dim, index](const Tensor& g, const OpNode&) {
      Tensor dx = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
      scatter_add_(dx, dim, index, g);
      return TensorList{dx};
    });
  }
  return out;
}

namespace {
// dsrc of scatter and scatter_add: g gathered at index, zero-padded to src's shape where src is larger than index.
Tensor scatter_src_grad(const Tensor& g, int64_t dim, const Tensor& index, const Shape& src_shape) {
  Tensor gs = gather(g, dim, index);
  if (gs.sizes() == src_shape) return gs;
  std::vector<int64_t> pads;  // (before, after) pairs from the last dim, as pad takes them
  for (int64_t d = gs.dim() - 1; d >= 0; --d) {
    pads.push_back(0);
    pads.push_back(src_shape[d] - gs.size(d));
  }
  return pad(gs, pads, 0);
}
}  // namespace

// scatter (self[index] = src): dself = g with the overwritten positions zeroed, dsrc = g gathered there
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = ops::scatter(self, dim, index, src);
  if (should_record(self, src)) {
    record("scatter", out, {self, src}, [dim, index, src_shape = src.sizes()](const Tensor& g, const OpNode& n) {
      return TensorList{n.needs_input_grad(0) ? scatter(g, dim, index, 0.0) : Tensor(),
                        n.needs_input_grad(1) ? scatter_src_grad(g, dim, index, src_shape) : Tensor()};
    });
  }
  return out;
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  Tensor out = ops::scatter(self, dim, index, value);
  if (should_record(self)) {
    record("scatter", out, {self}, [dim, index](const Tensor& g, const OpNode&) {
      return TensorList{scatter(g, dim, index, 0.0)};
    });
  }
  return out;
}

// scatter_add (self[index] += src): dself = g, dsrc = g gathered
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = ops::scatter_add(self, dim, index, src);
  if (should_record(self, src)) {
    record("scatter_add", out, {self, src}, [dim, index, src_shape = src.sizes()](const Tensor& g, const OpNode& n) {
      return TensorList{g, n.needs_input_grad(1) ? scatter_src_grad(g, dim, index, src_shape) : Tensor()};
    });
  }
  return out;
}

// index_add (self.index(dim, index) += alpha src): dself = g, dsrc = alpha g selected
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  Tensor out = ops::index_add(self, dim, index, src, alpha);
  if (should_record(self, src)) {
    record("index_add", out, {self, src}, [dim, index, alpha](const Tensor& g, const OpNode& n) {
      Tensor gs;
      if (n.needs_input_grad(1)) {
        Tensor g1 = g.dim() == 0 ? g.reshape({1}) : g;
        gs = index_select(g1, dim, index.dim() == 0 ? ops::reshape(index, {1}) : index) * alpha;
      }
      return TensorList{g, gs};
    });
  }
  return out;
}

Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  if (!should_record(self, src)) return ops::scatter_(self, dim, index, src);
  return record_inplace("scatter_", self, [&](const Tensor& old) { return scatter(old, dim, index, src); }, false);
}
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  if (!should_record(self)) return ops::scatter_(self, dim, index, value);
  return record_inplace("scatter_", self, [&](const Tensor& old) { return scatter(old, dim, index, value); }, false);
}
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  if (!should_record(self, src)) return ops::scatter_add_(self, dim, index, src);
  return record_inplace("scatter_add_", self, [&](const Tensor& old) { return scatter_add(old, dim, index, src); },
                        false);
}
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  if (!should_record(self, src)) return ops::index_add_(self, dim, index, src, alpha);
  return record_inplace("index_add_", self,
                        [&](const Tensor& old) { return index_add(old, dim, index, src, alpha); }, false);
}

// tril / triu: the gradient keeps the same triangle
Tensor tril(const Tensor& x, int64_t k) {
  Tensor out = ops::tril(x, k);
  if (should_record(x)) record("tril", out, {x}, [k](const Tensor& g, const OpNode&) { return TensorList{tril(g, k)}; });
  return out;
}
Tensor triu(const Tensor& x, int64_t k) {
  Tensor out = ops::triu(x, k);
  if (should_record(x)) record("triu", out, {x}, [k](const Tensor& g, const OpNode&) { return TensorList{triu(g, k)}; });
  return out;
}

// flip: the gradient flipped back
Tensor flip(const Tensor& x, IntArrayRef dims) {
  Tensor out = ops::flip(x, dims);
  if (should_record(x)) {
    record("flip", out, {x}, [dims = dims.vec()](const Tensor& g, const OpNode&) { return TensorList{flip(g, dims)}; });
  }
  return out;
}

// repeat: the output is x tiled; seen as (r0, s0, r1, s1, ...), the gradient sums over the r dims.
Tensor repeat(const Tensor& x, IntArrayRef repeats) {
  Tensor out = ops::repeat(x, repeats);
  if (should_record(x)) {
    record("repeat", out, {x}, [shape = x.sizes(), repeats = repeats.vec()](const Tensor& g, const OpNode&) {
      size_t n = repeats.size();
      Shape padded(n - shape.size(), 1);
      padded.insert(padded.end(), shape.begin(), shape.end());
      Shape interleaved;
      std::vector<int64_t> repeat_dims;
      for (size_t i = 0; i < n; ++i) {
        interleaved.push_back(repeats[i]);
        interleaved.push_back(padded[i]);
        repeat_dims.push_back(static_cast<int64_t>(2 * i));
      }
      return TensorList{sum(g.reshape(interleaved), repeat_dims).reshape(shape)};
    });
  }
  return out;
}

Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims) {
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll: with no dims, one shift is expected (the flattened tensor's), got ",
               shifts.size());
    return roll(x.flatten(), shifts, {0}).reshape(x.sizes());
  }
  KILN_CHECK(shifts.size() == dims.size(), "roll: ", shifts.size(), " shifts for ", dims.size(),
             " dims; one shift per dim is expected");
  Tensor y = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    const int64_t n = y.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s != 0) y = cat({y.narrow(d, n - s, s), y.narrow(d, 0, n - s)}, d);
  }
  return y.impl() == x.impl() ? x.clone() : y;  // a new tensor, as PyTorch's, even for no shift
}

Tensor bincount(const Tensor& x, const Tensor& weights, int64_t minlength) {
  KILN_CHECK(x.dim() == 1, "bincount: the input must be 1-D, got shape ", shape_str(x.sizes()));
  KILN_CHECK(!is_floating(x.dtype()) && x.dtype() != kBool, "bincount: the input must hold integers, got ", x.dtype());
  KILN_CHECK(minlength >= 0, "bincount: minlength must be non-negative, got ", minlength);
  int64_t length = minlength;
  if (x.numel() > 0) {
    const Tensor x64 = x.to(kInt64);
    const int64_t low = ops::min(x64).item<int64_t>();
    KILN_CHECK(low >= 0, "bincount: the input must be non-negative, got ", low);
    length = std::max(length, ops::max(x64).item<int64_t>() + 1);
  }
  const Tensor index = x.to(kInt64);
  if (!weights.defined()) {
    return ops::index_add(zeros({length}, TensorOptions(kInt64).device(x.device())), 0, index,
                          ones({x.numel()}, TensorOptions(kInt64).device(x.device())));
  }
  KILN_CHECK(weights.sizes() == x.sizes(), "bincount: weights of shape ", shape_str(weights.sizes()),
             " for an input of shape ", shape_str(x.sizes()), "; one weight per element is expected");
  KILN_CHECK(weights.device() == x.device(), "bincount: weights on ", weights.device().str(), ", the input on ",
             x.device().str());
  return index_add(zeros({length}, TensorOptions(weights.dtype()).device(x.device())), 0, index, weights);
}

UniqueResult unique(const Tensor& x) {
  autograd::NoGradGuard no_grad;  // integer results and values that are x's own: nothing to differentiate
  const int64_t n = x.numel();
  const TensorOptions index_options = TensorOptions(kInt64).device(x.device());
  const auto [sorted, order] = ops::sort(x.reshape({n}), 0);
  if (n == 0) return {sorted, zeros(x.sizes(), index_options), zeros({0}, index_options)};
  // A group starts at the first element and wherever an element differs from the one before (NaN != NaN).
  const Tensor starts =
      cat({ones({1}, TensorOptions(kBool).device(x.device())), ne(sorted.narrow(0, 1, n - 1), sorted.narrow(0, 0, n - 1))});
  const Tensor group = cumsum(starts, 0) - 1;  // each sorted element's group, int64
  const int64_t groups = group[n - 1].item<int64_t>() + 1;
  UniqueResult r;
  r.values = sorted.masked_select(starts);
  r.inverse = zeros({n}, index_options).scatter(0, order, group).reshape(x.sizes());
  r.counts = zeros({groups}, index_options).index_add(0, group, ones({n}, index_options));
  return r;
}

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right) {
  KILN_CHECK(sorted_sequence.dim() == 1, "searchsorted: the sorted sequence must be 1-D, got shape ",
             shape_str(sorted_sequence.sizes()));
  KILN_CHECK(sorted_sequence.device() == values.device(), "searchsorted: the sequence is on ",
             sorted_sequence.device().str(), ", the values on ", values.device().str());
  KILN_CHECK(sorted_sequence.dtype() != kBool && values.dtype() != kBool, "searchsorted: bool tensors have no order");
  autograd::NoGradGuard no_grad;
  const DType common = is_floating(sorted_sequence.dtype()) || is_floating(values.dtype()) ? kFloat64 : kInt64;
  const int64_t m = sorted_sequence.numel(), n = values.numel();
  const TensorOptions index_options = TensorOptions(kInt64).device(values.device());
  if (n == 0) return zeros(values.sizes(), index_options);
  // One stable sort of both: among equal keys the values come first (left: count the elements below a value)
  // or last (right: count those at most it), by the order they are concatenated in. The sequence's elements
  // counted up to each value's place are its answer.
  const Tensor seq = sorted_sequence.to(common), vals = values.reshape({n}).to(common);
  const Tensor keys = right ? cat({seq, vals}) : cat({vals, seq});
  const Tensor is_seq = right ? cat({ones({m}, index_options), zeros({n}, index_options)})
                              : cat({zeros({n}, index_options), ones({m}, index_options)});
  const Tensor order = ops::argsort(keys, 0);
  const Tensor seq_sorted = is_seq.index_select(0, order);
  const Tensor below = cumsum(seq_sorted, 0);
  const Tensor at_values = eq(seq_sorted, 0);
  const Tensor value_index = order.masked_select(at_values) - (right ? m : 0);
  return zeros({n}, index_options).scatter(0, value_index, below.masked_select(at_values)).reshape(values.sizes());
}

Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool right) {
  return searchsorted(boundaries, input, right);
}

namespace {
// Inside a backward function: whether it runs under create_graph (the engine enables grad mode then).
bool create_graph() { return autograd::GradMode::is_enabled(); }

// pad's gradient as a differentiable op: its own gradient is the padding (they are adjoint linear maps).
Tensor pad_backward(const Tensor& g, IntArrayRef pads, PadMode mode, IntArrayRef x_shape) {
  Tensor out = ops::pad_backward(g, pads, mode, x_shape);
  if (should_record(g)) {
    record("pad_backward", out, {g}, [pads = pads.vec(), mode](const Tensor& gx, const OpNode&) {
      return TensorList{pad(gx, pads, mode)};
    });
  }
  return out;
}
}  // namespace

Tensor pad(const Tensor& x, IntArrayRef pads, PadMode mode) {
  Tensor out = ops::pad(x, pads, mode);
  if (should_record(x)) {
    record("pad", out, {x}, [pads = pads.vec(), mode, x_shape = x.sizes()](const Tensor& g, const OpNode&) {
      if (create_graph()) return TensorList{pad_backward(g, pads, mode, x_shape)};
      return TensorList{ops::pad_backward(g, pads, mode, x_shape)};
    });
  }
  return out;
}

// pad: the gradient is g with the padding cut off (and what negative pads cropped padded back with zeros):
// pad(g, -pads)
Tensor pad(const Tensor& x, IntArrayRef pads, const Scalar& value) {
  Tensor out = ops::pad(x, pads, value);
  if (should_record(x)) {
    record("pad", out, {x}, [pads = pads.vec()](const Tensor& g, const OpNode&) {
      std::vector<int64_t> inverse;
      for (int64_t p : pads) inverse.push_back(-p);
      return TensorList{pad(g, inverse, 0)};
    });
  }
  return out;
}

}  // namespace kiln
