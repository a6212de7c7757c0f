// Differentiable reductions and softmax. A reduction's gradient is the output's gradient expanded back over the
// reduced dims (expand_reduced), times what each element contributed.
#include <cmath>
#include <limits>

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::expand_reduced;
using autograd::OpNode;
using autograd::requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {
// The number of elements each output of a reduction over `dims` of `shape` summed.
int64_t reduced_count(const Shape& shape, IntArrayRef dims) {
  if (dims.empty() || shape.empty()) return shape_numel(shape);  // a 0-dim input reduced over dim 0: 1
  int64_t n = 1;
  for (int64_t d : dims) n *= shape[wrap_dim(d, static_cast<int64_t>(shape.size()), "reduce")];
  return n;
}
}  // namespace

// sum: dx = g expanded
Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  Tensor out = ops::sum(x, dims, keepdim, dtype);
  if (should_record(x)) {
    record("sum", out, {x}, [shape = x.sizes(), dims = dims.vec(), keepdim](const Tensor& g, const OpNode&) {
      return TensorList{expand_reduced(g, shape, dims, keepdim)};
    });
  }
  return out;
}

// mean: dx = g expanded / count
Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  Tensor out = ops::mean(x, dims, keepdim);
  if (should_record(x)) {
    record("mean", out, {x}, [shape = x.sizes(), dims = dims.vec(), keepdim](const Tensor& g, const OpNode&) {
      double count = static_cast<double>(reduced_count(shape, dims));
      return TensorList{expand_reduced(g / count, shape, dims, keepdim)};
    });
  }
  return out;
}

// prod: dx_i = g * prod_{j != i} x_j. Dividing the product by x_i fails at zeros, so: with no zero in the
// slice it is out / x; with exactly one zero, the zero's gradient is the product of the others and the rest 0;
// with two or more, all 0. Those zeros are written as products with the zeros' sum (its value 0, its gradient
// not), so that the gradient's own gradient (create_graph) is right at zeros too.
Tensor prod(const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  Tensor out = ops::prod(x, dims, keepdim, dtype);
  if (should_record(x)) {
    record("prod", out, {x}, [sx = SavedTensor(x, false), dims = dims.vec(), keepdim](const Tensor& g, const OpNode& n) {
      Tensor x = sx.get(n);
      Tensor is_zero = ops::eq(x, 0);
      Tensor nonzero = where(is_zero, 1.0, x);
      Tensor prod_nonzero = expand_reduced(prod(nonzero, dims, keepdim), x.sizes(), dims, keepdim);
      Tensor zeros = expand_reduced(ops::sum(is_zero, dims, keepdim), x.sizes(), dims, keepdim);
      Tensor zero_sum = expand_reduced(sum(where(is_zero, x, 0.0), dims, keepdim), x.sizes(), dims, keepdim);
      Tensor one_zero = where(is_zero, prod_nonzero, zero_sum * prod_nonzero / nonzero);
      Tensor two_zeros = where(is_zero, (zero_sum - x) * prod_nonzero, 0.0);
      Tensor others = where(ops::eq(zeros, 0), prod_nonzero / nonzero,
                            where(ops::eq(zeros, 1), one_zero, where(ops::eq(zeros, 2), two_zeros, 0.0)));
      return TensorList{expand_reduced(g, x.sizes(), dims, keepdim) * others};
    });
  }
  return out;
}

// amax / amin (and max() / min() over everything): the gradient is shared evenly by the elements that reach
// the extreme, as PyTorch does.
namespace {
Tensor extreme(const char* name, const Tensor& x, IntArrayRef dims, bool keepdim, bool is_max) {
  Tensor out = is_max ? ops::amax(x, dims, keepdim) : ops::amin(x, dims, keepdim);
  if (should_record(x)) {
    record(name, out, {x},
           [sx = SavedTensor(x, false), so = SavedTensor(out, true), dims = dims.vec(), keepdim](const Tensor& g,
                                                                                               const OpNode& n) {
             Tensor x = sx.get(n);
             Tensor hit = ops::to(ops::eq(x, expand_reduced(so.get(n), x.sizes(), dims, keepdim)), g.dtype());
             Tensor count = expand_reduced(ops::sum(hit, dims, keepdim), x.sizes(), dims, keepdim);
             return TensorList{expand_reduced(g, x.sizes(), dims, keepdim) * hit / count};
           });
  }
  return out;
}
}  // namespace
Tensor amax(const Tensor& x, IntArrayRef dims, bool keepdim) { return extreme("amax", x, dims, keepdim, true); }
Tensor amin(const Tensor& x, IntArrayRef dims, bool keepdim) { return extreme("amin", x, dims, keepdim, false); }
Tensor max(const Tensor& x) {
  ops::max(x);  // its checks and messages (an empty tensor is an error)
  return extreme("max", x, {}, false, true);
}
Tensor min(const Tensor& x) {
  ops::min(x);
  return extreme("min", x, {}, false, false);
}

// max / min along a dim: the gradient goes to the element the index names (the first extreme).
namespace {
std::pair<Tensor, Tensor> extreme_dim(const char* name, const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  auto [values, indices] = is_max ? ops::max(x, dim, keepdim) : ops::min(x, dim, keepdim);
  if (should_record(x)) {
    record(name, values, {x}, [shape = x.sizes(), indices, dim, keepdim](const Tensor& g, const OpNode&) {
      if (shape.empty()) return TensorList{g};
      Tensor gk = keepdim ? g : g.unsqueeze(dim);
      Tensor ik = keepdim ? indices : ops::unsqueeze(indices, dim);
      Tensor dx = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
      scatter_(dx, dim, ik, gk);  // in place: the out-of-place scatter would copy the zeros first
      return TensorList{dx};
    });
  }
  return {values, indices};
}
}  // namespace
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("max", x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("min", x, dim, keepdim, false);
}

// var: dx = g 2 (x - mean) / (N - correction)
Tensor var(const Tensor& x, IntArrayRef dims, double correction, bool keepdim) {
  Tensor out = ops::var(x, dims, correction, keepdim);
  if (should_record(x)) {
    record("var", out, {x}, [sx = SavedTensor(x, false), dims = dims.vec(), correction, keepdim](const Tensor& g,
                                                                                               const OpNode& n) {
      Tensor x = sx.get(n);
      double count = static_cast<double>(reduced_count(x.sizes(), dims));
      Tensor centered = x - mean(x, dims, /*keepdim=*/true);
      return TensorList{expand_reduced(g, x.sizes(), dims, keepdim) * centered * (2.0 / (count - correction))};
    });
  }
  return out;
}

// std: composite, sqrt(var)
Tensor std(const Tensor& x, IntArrayRef dims, double correction, bool keepdim) {
  if (!should_record(x)) return ops::std(x, dims, correction, keepdim);
  return sqrt(var(x, dims, correction, keepdim));
}

// norm_p(x) = (sum |x|^p)^(1/p): dx = g x |x|^(p-2) / norm^(p-1); p = 1: g sign(x); p = inf: the gradient of
// amax(|x|). A zero norm gets a zero gradient.
Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim) {
  if (std::isinf(p) && should_record(x)) {
    return p > 0 ? amax(abs(x), dims, keepdim) : amin(abs(x), dims, keepdim);
  }
  Tensor out = ops::norm(x, p, dims, keepdim);
  if (should_record(x)) {
    record("norm", out, {x}, [sx = SavedTensor(x, false), so = SavedTensor(out, true), p, dims = dims.vec(),
                              keepdim](const Tensor& g, const OpNode& n) {
      Tensor x = sx.get(n);
      if (p == 0.0) return TensorList{Tensor()};
      Tensor ge = expand_reduced(g, x.sizes(), dims, keepdim);
      if (p == 1.0) return TensorList{ge * ops::sign(x)};
      Tensor norm = expand_reduced(so.get(n), x.sizes(), dims, keepdim);
      // sign(x) |x|^(p-1), not x |x|^(p-2): the latter is 0 * inf = NaN at x == 0 for 1 < p < 2.
      Tensor scaled = p == 2.0 ? x / norm : ops::sign(x) * pow(abs(x), p - 1.0) / pow(norm, p - 1.0);
      return TensorList{where(ops::eq(norm, 0), 0.0, ge * scaled)};
    });
  }
  return out;
}

// logsumexp: y = log(sum(exp(x))); dx = g exp(x - y), the softmax over the reduced dims
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim) {
  Tensor out = ops::logsumexp(x, dims, keepdim);
  if (should_record(x)) {
    record("logsumexp", out, {x}, [sx = SavedTensor(x, false), so = SavedTensor(out, true), dims = dims.vec(),
                                   keepdim](const Tensor& g, const OpNode& n) {
      Tensor x = sx.get(n);
      return TensorList{expand_reduced(g, x.sizes(), dims, keepdim) *
                        exp(x - expand_reduced(so.get(n), x.sizes(), dims, keepdim))};
    });
  }
  return out;
}

// softmax: y = softmax(x); dx = y (g - sum(g y))
Tensor softmax(const Tensor& x, int64_t dim) {
  if (autocast::wants_float32({&x})) return softmax(autocast::float32(x), dim);
  Tensor y = ops::softmax(x, dim);
  if (should_record(x)) {
    record("softmax", y, {x}, [sy = SavedTensor(y, true), dim](const Tensor& g, const OpNode& n) {
      Tensor y = sy.get(n);
      return TensorList{y * (g - sum(g * y, {dim}, /*keepdim=*/true))};
    });
  }
  return y;
}

// log_softmax: y = log_softmax(x); dx = g - exp(y) sum(g)
Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (autocast::wants_float32({&x})) return log_softmax(autocast::float32(x), dim);
  Tensor y = ops::log_softmax(x, dim);
  if (should_record(x)) {
    record("log_softmax", y, {x}, [sy = SavedTensor(y, true), dim](const Tensor& g, const OpNode& n) {
      return TensorList{g - exp(sy.get(n)) * sum(g, {dim}, /*keepdim=*/true)};
    });
  }
  return y;
}

}  // namespace kiln
