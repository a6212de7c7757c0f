// Frontends of the reductions and of softmax: argument checks, the dims to reduce, the result's dtype
// (PyTorch's rules), allocation, dispatch.
//
// Kernels always write the keepdim shape (x's shape with size 1 along the reduced dims); dropping those
// dims is a view of it. An empty dims list means every dim. logsumexp and std are composites of other ops
// and have no kernels of their own, so they run wherever their parts do.
#include "kiln/tensor/views.h"
#include "kiln/tensor/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/ops/unary.h"

namespace kiln::ops {
namespace {

// What a reduction does to x's shape.
struct ReduceShape {
  Shape dims;         // the reduced dims, wrapped and ascending (none for a 0-dim x)
  Shape keep_shape;   // x's shape with size 1 along `dims`: what kernels write
  Shape out_shape;    // keep_shape, or keep_shape without the reduced dims
  int64_t count = 1;  // elements reduced into each output
};

ReduceShape reduce_shape(const char* op, const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_CHECK(x.defined(), op, ": input tensor is undefined");
  const int64_t nd = x.dim();
  // A 0-dim tensor accepts dim 0 and -1 (wrap_dim), and reducing it changes nothing.
  std::vector<bool> reduced(static_cast<size_t>(std::max<int64_t>(nd, 1)), dims.empty());
  if (!dims.empty()) {
    for (int64_t d : dims) {
      int64_t w = wrap_dim(d, nd, op);
      KILN_CHECK(!reduced[w], op, ": dim ", w, " appears more than once in dims ", shape_str(dims),
                 " (tensor of shape ", shape_str(x.sizes()), ")");
      reduced[w] = true;
    }
  }
  ReduceShape r;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) {
      r.dims.push_back(d);
      r.keep_shape.push_back(1);
      r.count *= x.size(d);
      if (keepdim) r.out_shape.push_back(1);
    } else {
      r.keep_shape.push_back(x.size(d));
      r.out_shape.push_back(x.size(d));
    }
  }
  return r;
}

void check_floating(const char* op, const Tensor& x) {
  KILN_CHECK(is_floating(x.dtype()), op, ": expected a floating point tensor, got ", x.dtype(),
             " (as in PyTorch; convert it first, e.g. x.to(kFloat32))");
}

// max, amax, argmax, ... have no value for zero elements.
void check_nonempty(const char* op, const Tensor& x, const ReduceShape& r) {
  KILN_CHECK(r.count > 0, op, ": cannot reduce over zero elements: the tensor of shape ", shape_str(x.sizes()),
             " has size 0 along the reduced dims ", shape_str(r.dims), ", and ", op, " of nothing is undefined");
}

template <Op op, typename... Param>
Tensor run_reduce(const Tensor& x, const ReduceShape& r, DType out_dtype, bool keepdim, Param... param) {
  Tensor out = empty(r.keep_shape, TensorOptions(out_dtype).device(x.device()));
  call_kernel<op>(x.device(), out, x, r.dims, param...);
  return keepdim ? out : ops::view(out, r.out_shape);
}

// sum and prod: integer and bool inputs give int64 unless a dtype is asked for; with one, x is converted to
// it first (PyTorch's rule).
template <Op op>
Tensor sum_like(const char* name, const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  ReduceShape r = reduce_shape(name, x, dims, keepdim);
  if (dtype) return run_reduce<op>(ops::to(x, *dtype), r, *dtype, keepdim);
  return run_reduce<op>(x, r, is_floating(x.dtype()) ? x.dtype() : kInt64, keepdim);
}

std::pair<Tensor, Tensor> extreme_dim(const char* name, bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  KILN_CHECK(x.defined(), name, ": input tensor is undefined");
  const int64_t d = wrap_dim(dim, x.dim(), name);
  ReduceShape r = reduce_shape(name, x, IntArrayRef(d), keepdim);
  check_nonempty(name, x, r);
  Tensor values = empty(r.keep_shape, TensorOptions(x.dtype()).device(x.device()));
  Tensor indices = empty(r.keep_shape, TensorOptions(kInt64).device(x.device()));
  // A 0-dim x is reduced as a 1-element vector; the views write through to values and indices.
  bool scalar = x.dim() == 0;
  const Tensor xs = scalar ? ops::view(x, {1}) : x;
  const Tensor vs = scalar ? ops::view(values, {1}) : values;
  const Tensor is = scalar ? ops::view(indices, {1}) : indices;
  if (is_max) call_kernel<Op::max_dim>(x.device(), vs, is, xs, scalar ? 0 : d);
  else call_kernel<Op::min_dim>(x.device(), vs, is, xs, scalar ? 0 : d);
  if (keepdim) return {values, indices};
  return {ops::view(values, r.out_shape), ops::view(indices, r.out_shape)};
}

Tensor arg_extreme(const char* name, bool is_max, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (dim) return extreme_dim(name, is_max, x, *dim, keepdim).second;
  KILN_CHECK(x.defined(), name, ": input tensor is undefined");
  KILN_CHECK(x.numel() > 0, name, ": cannot find the index of the ", is_max ? "max" : "min",
             " of an empty tensor (shape ", shape_str(x.sizes()), ")");
  // Without a dim: the index into the flattened tensor.
  Tensor index = extreme_dim(name, is_max, ops::reshape(x, {-1}), 0, false).second;
  return keepdim ? ops::view(index, Shape(static_cast<size_t>(x.dim()), 1)) : index;
}

Tensor var_impl(const char* name, const Tensor& x, IntArrayRef dims, double correction, bool keepdim) {
  ReduceShape r = reduce_shape(name, x, dims, keepdim);
  check_floating(name, x);
  return run_reduce<Op::var>(x, r, x.dtype(), keepdim, correction);
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  return sum_like<Op::sum>("sum", x, dims, keepdim, dtype);
}

Tensor prod(const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  return sum_like<Op::prod>("prod", x, dims, keepdim, dtype);
}

Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReduceShape r = reduce_shape("mean", x, dims, keepdim);
  check_floating("mean", x);
  return run_reduce<Op::mean>(x, r, x.dtype(), keepdim);
}

Tensor amax(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReduceShape r = reduce_shape("amax", x, dims, keepdim);
  check_nonempty("amax", x, r);
  return run_reduce<Op::amax>(x, r, x.dtype(), keepdim);
}

Tensor amin(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReduceShape r = reduce_shape("amin", x, dims, keepdim);
  check_nonempty("amin", x, r);
  return run_reduce<Op::amin>(x, r, x.dtype(), keepdim);
}

Tensor max(const Tensor& x) {
  KILN_CHECK(x.defined(), "max: input tensor is undefined");
  KILN_CHECK(x.numel() > 0, "max: the max of all elements of an empty tensor (shape ", shape_str(x.sizes()),
             ") is undefined; give a dim whose size is not 0");
  return amax(x);
}

Tensor min(const Tensor& x) {
  KILN_CHECK(x.defined(), "min: input tensor is undefined");
  KILN_CHECK(x.numel() > 0, "min: the min of all elements of an empty tensor (shape ", shape_str(x.sizes()),
             ") is undefined; give a dim whose size is not 0");
  return amin(x);
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim("max", true, x, dim, keepdim); }
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim("min", false, x, dim, keepdim); }

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_extreme("argmax", true, x, dim, keepdim); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_extreme("argmin", false, x, dim, keepdim); }

Tensor var(const Tensor& x, IntArrayRef dims, double correction, bool keepdim) {
  return var_impl("var", x, dims, correction, keepdim);
}

Tensor std(const Tensor& x, IntArrayRef dims, double correction, bool keepdim) {
  return sqrt(var_impl("std", x, dims, correction, keepdim));
}

Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim) {
  ReduceShape r = reduce_shape("norm", x, dims, keepdim);
  check_floating("norm", x);
  KILN_CHECK(!std::isnan(p), "norm: p is nan");
  // max |x| (p = inf), min |x| (p = -inf) and (sum |x|^p)^(1/p) for p < 0 (1/0 = inf) have no value for
  // zero elements.
  if (p < 0 || p == kInf) check_nonempty("norm", x, r);
  return run_reduce<Op::norm>(x, r, x.dtype(), keepdim, p);
}

Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReduceShape r = reduce_shape("logsumexp", x, dims, keepdim);
  check_floating("logsumexp", x);
  if (r.count == 0) return full(r.out_shape, -kInf, TensorOptions(x.dtype()).device(x.device()));  // log(0)
  Tensor m = amax(x, dims, true);
  // NOTE: where the max is infinite (a row of -inf, or one holding +inf), x - max would give nan; shifting
  // those rows by 0 instead gives log(0) = -inf and log(inf) = inf, the right answers.
  Tensor shift = where(isinf(m), 0.0, m);
  Tensor out = add(log(sum(exp(sub(x, shift)), dims, true)), shift);
  return keepdim ? out : ops::view(out, r.out_shape);
}

Tensor all(const Tensor& x, IntArrayRef dims, bool keepdim) {
  return run_reduce<Op::all>(x, reduce_shape("all", x, dims, keepdim), kBool, keepdim);
}

Tensor any(const Tensor& x, IntArrayRef dims, bool keepdim) {
  return run_reduce<Op::any>(x, reduce_shape("any", x, dims, keepdim), kBool, keepdim);
}

// ---- softmax ----

namespace {

template <Op op>
Tensor softmax_like(const char* name, const Tensor& x, int64_t dim) {
  KILN_CHECK(x.defined(), name, ": input tensor is undefined");
  check_floating(name, x);
  const int64_t d = wrap_dim(dim, x.dim(), name);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  if (x.numel() == 0) return out;
  if (x.dim() == 0) call_kernel<op>(x.device(), ops::view(out, {1}), ops::view(x, {1}), 0);  // a 1-element softmax
  else call_kernel<op>(x.device(), out, x, d);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_like<Op::softmax>("softmax", x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_like<Op::log_softmax>("log_softmax", x, dim); }

}  // namespace kiln::ops
