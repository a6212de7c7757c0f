// The differentiable ops: every tensor op of kiln/tensor/ops.h, recorded for backward when grad mode is on and
// an input requires grad. Same names, arguments and results as the tensor layer's kiln::ops functions (see
// there for what each one computes); those without a gradient (comparisons, argmax, ...) are the tensor
// layer's own, brought into namespace kiln by the using-declarations at the end.
//
// Backward rules are in kiln/autograd/functions/<family>.cpp, each right under its op.
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/tensor/ops.h"
#include "kiln/tensor/ops/conv.h"
#include "kiln/tensor/ops/cross_entropy.h"
#include "kiln/tensor/ops/normalization.h"

namespace kiln {

// ---- element-wise unary (functions/unary.cpp) ----
#define KILN_UNARY_DECL(name) \
  Tensor name(const Tensor& x); \
  Tensor& name##_(Tensor& x);
KILN_UNARY_DECL(neg)
KILN_UNARY_DECL(abs)
KILN_UNARY_DECL(sign)
KILN_UNARY_DECL(exp)
KILN_UNARY_DECL(log)
KILN_UNARY_DECL(log1p)
KILN_UNARY_DECL(expm1)
KILN_UNARY_DECL(sqrt)
KILN_UNARY_DECL(rsqrt)
KILN_UNARY_DECL(sin)
KILN_UNARY_DECL(cos)
KILN_UNARY_DECL(tanh)
KILN_UNARY_DECL(sigmoid)
KILN_UNARY_DECL(relu)
KILN_UNARY_DECL(silu)
KILN_UNARY_DECL(erf)
KILN_UNARY_DECL(log2)
KILN_UNARY_DECL(log10)
KILN_UNARY_DECL(reciprocal)
KILN_UNARY_DECL(tan)
KILN_UNARY_DECL(asin)
KILN_UNARY_DECL(acos)
KILN_UNARY_DECL(atan)
KILN_UNARY_DECL(sinh)
KILN_UNARY_DECL(cosh)
KILN_UNARY_DECL(asinh)
KILN_UNARY_DECL(acosh)
KILN_UNARY_DECL(atanh)
KILN_UNARY_DECL(floor)  // floor, ceil, round, trunc: gradient 0
KILN_UNARY_DECL(ceil)
KILN_UNARY_DECL(round)
KILN_UNARY_DECL(trunc)
#undef KILN_UNARY_DECL
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor& leaky_relu_(Tensor& x, double negative_slope = 0.01);
// The activations with fused kernels (activation_kind.h); nn::functional's elu, selu, celu, hardtanh, relu6,
// hardsigmoid, hardswish and mish are these.
Tensor activation(const Tensor& x, Activation kind, const ActivationParams& params = {});
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor& pow_(Tensor& x, const Scalar& exponent);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- element-wise binary and ternary (functions/binary.cpp) ----
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor& add_(Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor& add_(Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor& sub_(Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor& sub_(Tensor& a, const Scalar& b, const Scalar& alpha = 1);
#define KILN_BINARY_DECL(name)                   \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, const Scalar& b); \
  Tensor& name##_(Tensor& a, const Tensor& b);   \
  Tensor& name##_(Tensor& a, const Scalar& b);
KILN_BINARY_DECL(mul)
KILN_BINARY_DECL(div)
KILN_BINARY_DECL(maximum)
KILN_BINARY_DECL(minimum)
KILN_BINARY_DECL(atan2)
KILN_BINARY_DECL(fmod)
KILN_BINARY_DECL(remainder)
#undef KILN_BINARY_DECL
Tensor pow(const Tensor& a, const Tensor& b);
Tensor& pow_(Tensor& a, const Tensor& b);
Tensor pow(const Scalar& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight);

// ---- reductions and softmax (functions/reduce.cpp) ----
Tensor sum(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor amax(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);  // (values, indices)
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor var(const Tensor& x, IntArrayRef dims = {}, double correction = 1.0, bool keepdim = false);
Tensor std(const Tensor& x, IntArrayRef dims = {}, double correction = 1.0, bool keepdim = false);
Tensor norm(const Tensor& x, double p = 2.0, IntArrayRef dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- along one dim (functions/along_dim.cpp); argsort has no gradient ----
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);  // (values, indices)
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

// ---- order statistics and NaN-skipping reductions (functions/along_dim.cpp) ----
// Composites of the stable sort (NaN above every number), gather and reductions, so any device; a value's
// gradient goes back to the element it was (for quantile's interpolation, to both neighbours, by weight).
// The k-th smallest (1-based) element of each line along dim, and where it was (torch.kthvalue).
std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);
// The lower median (the smaller middle value of an even count, as PyTorch): of all elements, or of each line
// along dim with where it was. A line with a NaN has median NaN (at the first NaN); nanmedian skips NaNs (NaN
// only for a line of NaNs).
Tensor median(const Tensor& x);
std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor nanmedian(const Tensor& x);
std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim = false);
// The q-quantiles of floating x, of all elements or along dim (torch.quantile): the value at position q (n - 1)
// of the sorted line, between its neighbours by interpolation "linear", "lower", "higher", "nearest" (halves to
// even) or "midpoint". q in [0, 1], a number or a 1-D tensor of them (whose size becomes the result's first
// dim). A line with a NaN gives NaN; nanquantile skips NaNs (n counts the others).
Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                std::string_view interpolation = "linear");
Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                std::string_view interpolation = "linear");
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   std::string_view interpolation = "linear");
Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   std::string_view interpolation = "linear");
// sum and mean that skip NaNs: nansum counts them as 0, nanmean averages the others (NaN where none is left).
Tensor nansum(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor nanmean(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);

// ---- linear algebra (functions/linalg.cpp) ----
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mv(const Tensor& a, const Tensor& v);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor outer(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);
// bias + x @ weight^T with x (..., in), weight (out, in) and bias (out): one (rows, in) @ (in, out) product over all
// of x's leading dims, the bias added in the same GEMM, the result shaped (..., out) (nn's linear on batches of
// sequences; the result is not a view).
Tensor linear_rows(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);
// Products and sums over labelled dims, as torch.einsum (functions/einsum.cpp): einsum("bij,bjk->bik", {a, b}).
// "..." stands for dims no letter names, broadcast across the operands; a letter repeated in one operand takes
// its diagonal; without "->" the output is the "..." dims, then every letter seen once, upper case first.
// Contracted two operands at a time, left to right, each step one bmm.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

// ---- joining, splitting and indexing (functions/indexing.cpp) ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, IntArrayRef sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value);
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Scalar& value);
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1);
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1);
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
Tensor flip(const Tensor& x, IntArrayRef dims);
Tensor repeat(const Tensor& x, IntArrayRef repeats);
// x shifted along dims, elements that leave at one end coming back at the other (torch.roll): out[i + s] = x[i]
// modulo the dim's size. With no dims, over the flattened tensor (one shift), shaped back. A composite of
// narrow and cat, so any device and any dtype, differentiable.
Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims = {});
// How often each value of a 1-D tensor of non-negative integers occurs (torch.bincount): out[v] counts the v's,
// or, with weights (x's shape), sums their weights. Length max(x) + 1, at least minlength. int64 counts, or the
// weights' dtype (a composite of index_add, differentiable in the weights).
Tensor bincount(const Tensor& x, const Tensor& weights = {}, int64_t minlength = 0);
// The distinct values of x, flattened, in ascending order (torch.unique with sorted=True and no dim): values;
// inverse (x's shape, int64): where each element of x stands in values; counts (int64): how often each
// occurs. NaNs are all distinct, as in PyTorch. A composite of a stable sort, a comparison of neighbours and
// cumsum, so any device; no gradient.
struct UniqueResult {
  Tensor values, inverse, counts;
};
UniqueResult unique(const Tensor& x);
// For each value, where it would go in the sorted 1-D sequence to keep it sorted (torch.searchsorted): the
// number of elements below it, or with right, at most it (int64, values' shape). bucketize(input, boundaries,
// right) is the same with the arguments swapped, as in PyTorch. A composite of one stable sort of both together
// (O((n + m) log(n + m))), so any device; no gradient.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right = false);
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool right = false);
Tensor pad(const Tensor& x, IntArrayRef pads, const Scalar& value = 0);
// Padding by copies (Reflect, Replicate, Circular) of the last one to three dims, through the pad kernels; the
// gradient sums each output into the element it copied, and its own gradient is the padding again.
Tensor pad(const Tensor& x, IntArrayRef pads, PadMode mode);
// The elements of x where the bool mask (broadcast with x) is true, as a 1-D tensor in row-major order;
// dx: g at those places, 0 elsewhere.
Tensor masked_select(const Tensor& x, const Tensor& mask);
// Indexing with index tensors among the indices (functions/advanced_index.cpp), behind Tensor::index,
// operator[], index_put and index_put_; tensor.h says what they mean. Without index tensors, index is
// Tensor::index's view and index_put writes through that view.
Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices);
Tensor index_put(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values,
                 bool accumulate = false);
Tensor& index_put_(Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate = false);

// ---- convolution and pooling (functions/conv.cpp); gradients of any order (create_graph) ----
// x (N, Cin, H, W), weight (Cout, Cin / groups, KH, KW), bias (Cout) or undefined -> (N, Cout, OH, OW)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
// conv2d's gradient with respect to its input as an op: x (N, Cin, H, W) is conv2d's grad_out, weight (Cin, Cout /
// groups, KH, KW) its weight, out_shape (N, Cout, OH, OW) its input's shape; plus bias (Cout) or undefined
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                        IntArrayRef out_shape);
// x (N, C, H, W) -> {out (N, C, OH, OW), int64 indices of each max in its plane}; differentiable in out
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p);
// x's last output_size.size() dims (one to three) averaged over adaptive bins (ops::adaptive_avg_pool)
Tensor adaptive_avg_pool(const Tensor& x, IntArrayRef output_size);

// ---- fused loss and normalization (functions/cross_entropy.cpp, functions/normalization.cpp) ----
// Each backward rule calls its fused backward kernel; under create_graph it computes the same gradient from
// differentiable ops instead, so higher derivatives work too.
// logits (N, C), target (N) int64, weight (C) or undefined -> {loss (N), row weight (N)} (ops/cross_entropy.h);
// differentiable in logits (the weight is a constant, as in PyTorch)
std::pair<Tensor, Tensor> cross_entropy_rows(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                             const CrossEntropyParams& p);
// x (M, D), weight and bias (D) or undefined -> (M, D), each row normalized (ops/normalization.h)
Tensor layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// x (N, C, S), weight and bias (C) or undefined, running statistics (C) (read when not training) ->
// {y (N, C, S), the batch's (or running) mean and var} (ops/normalization.h); y differentiable in x, w, b
ops::BatchNormForward batch_norm_channels(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const Tensor& running_mean, const Tensor& running_var, double eps,
                                          bool training);
// Connectionist temporal classification (ops/ctc.h; functions/ctc.cpp): log_probs (T, N, C), targets (N, S) or
// 1-D, a length of each -> the negative log-likelihood of each target (N), differentiable in log_probs once
// (the gradient is not itself differentiable: create_graph through it is an error, as in PyTorch).
Tensor ctc_loss_nll(const Tensor& log_probs, const Tensor& targets, IntArrayRef input_lengths,
                    IntArrayRef target_lengths, int64_t blank, bool zero_infinity);

// ---- no gradient: the tensor layer's functions as they are ----
using ops::all;
using ops::any;
using ops::argmax;
using ops::argmin;
using ops::argsort;
using ops::allclose;
using ops::eq;
using ops::equal;
using ops::flat_nonzero;
using ops::ge;
using ops::gt;
using ops::isfinite;
using ops::isclose;
using ops::isinf;
using ops::isnan;
using ops::le;
using ops::logical_and;
using ops::logical_not;
using ops::logical_or;
using ops::logical_xor;
using ops::lt;
using ops::ne;
using ops::nonzero;
using ops::one_hot;
using ops::result_type;
using ops::scalar_to_tensor;

}  // namespace kiln
