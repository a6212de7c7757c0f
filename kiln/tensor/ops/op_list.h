// The one list of ops that have kernels, with the signature their kernels take.
//
// It generates the Op enum, the op names and the slots of the dispatch table (dispatch.h). Ops built from
// other ops (stack, tril, one_hot, constant pad, ...) are not here: they have no kernels of their own and run on every
// device that runs their parts.
//
// Kernels receive outputs already allocated with the right shape and dtype, and inputs already broadcast
// (expanded) to the output's shape and converted to the dtype the op computes in; the frontends in
// kiln/tensor/ops/*.cpp do that checking and preparation once, for every device.
#pragma once

#include <cstdint>
#include <span>

#include "kiln/tensor/ops/activation_kind.h"
#include "kiln/tensor/scalar.h"
#include "kiln/tensor/shape.h"

namespace kiln {

class Tensor;

// out = f(x); out and x have one shape.
using UnaryKernel = void(const Tensor& out, const Tensor& x);
// out = f(x; p0, p1), e.g. clamp(x, lo, hi), pow(x, e), leaky_relu(x, slope).
using UnaryParamKernel = void(const Tensor& out, const Tensor& x, double p0, double p1);
// out = f(x) for one of the activations of activation_kind.h.
using ActivationKernel = void(const Tensor& out, const Tensor& x, Activation kind, const ActivationParams& p);
// grad_x = grad_y * f'(x) for one of those activations; all three have one shape.
using ActivationBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x, Activation kind,
                                      const ActivationParams& p);
// out = f(a, b); all three have one shape.
using BinaryKernel = void(const Tensor& out, const Tensor& a, const Tensor& b);
// out = a + alpha * b (and a - alpha * b).
using BinaryAlphaKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha);
// out = f(a, b, c), e.g. where(cond, a, b), lerp(a, b, w).
using TernaryKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c);
// out[i] = value.
using FillKernel = void(const Tensor& out, const Scalar& value);
// out[i] = start + i * step, i over out's elements in row-major order; computed in int64 for integer
// outputs when start and step are integers (exact beyond 2^53), else in double.
using RangeKernel = void(const Tensor& out, const Scalar& start, const Scalar& step);
// Fills out with random numbers from Philox(seed) starting at counter `offset`; (a, b) parametrize the
// distribution. See rng.h for how element i maps to the counter.
// (randint takes integer Scalars, exact over the whole int64 range.)
using RandomKernel = void(const Tensor& out, uint64_t seed, uint64_t offset, const Scalar& a, const Scalar& b);
// out: x's shape with size 1 along `dims` (keepdim); reduces x over `dims`.
using ReduceKernel = void(const Tensor& out, const Tensor& x, IntArrayRef dims);
// As ReduceKernel, with a parameter (the p of a p-norm, the correction of var).
using ReduceParamKernel = void(const Tensor& out, const Tensor& x, IntArrayRef dims, double p);
// values, indices: x's shape with size 1 along dim; the max (min) along dim and where it is (first one).
using ReduceIndexKernel = void(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim);
// out = f(x) along dim (softmax, log_softmax, cumsum); out and x have one shape.
using DimKernel = void(const Tensor& out, const Tensor& x, int64_t dim);
// values, indices (int64): x's shape; each line of x along dim sorted, ascending or descending, stably (equal
// values keep their order; -0.0 equals 0.0), NaN above every number; indices[...] is where values[...] was.
using SortKernel = void(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim, bool descending);
// values, indices (int64): x's shape with k (1 <= k <= x.size(dim)) along dim; each line's first k in sort's order,
// descending when largest (the k largest, largest first) and ascending when not; equal values in index order.
using TopKKernel = void(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim, int64_t k,
                        bool largest);
// out: x's shape with out = idx.size(1) along dim; out[..., d, ...] = sum over taps k of
// x[..., idx[k][d], ...] * w[k][d], in tap order. x, idx (taps, out) int64 and w (taps, out) in x's dtype are
// contiguous and on one device (resize_taps.h).
using ResizeTapsKernel = void(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& w);
// grad_x: x's shape, written whole: the adjoint of ResizeTapsKernel applied to grad_out (contiguous).
using ResizeTapsBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, int64_t dim, const Tensor& idx,
                                      const Tensor& w);
// out: (B, M, N), a: (B, M, K), b: (B, K, N); out = beta * out + alpha * (a @ b). With beta == 0 the old
// contents of out are ignored (NaN included), as BLAS does.
using BmmKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, double beta, double alpha);
// Matrix factorizations (decompositions.h). Inputs are contiguous (B, m, n) batches of float32/float64, outputs
// fresh contiguous tensors; info (B, int64) says per matrix what went wrong (0: nothing), as LAPACK's info does,
// for the frontend to report (a kernel does not throw). Only a's lower triangle is read where a is symmetric.
// l: the lower Cholesky factor of each positive-definite a; info: 0, or k when the leading minor of order k is
// not positive definite (or not finite), or -1 when the factorization broke down in rounding alone.
using CholeskyKernel = void(const Tensor& l, const Tensor& info, const Tensor& a);
// P a = L U with partial pivoting: lu (B, n, n) holds L below the diagonal (unit diagonal implied) and U on and
// above; perm (B, n, int64): row i of P a is row perm[i] of a; info: 0, or k when U[k-1][k-1] is exactly 0.
using LuFactorKernel = void(const Tensor& lu, const Tensor& perm, const Tensor& info, const Tensor& a);
// x (B, n, k) = a^-1 b, or a^-T b with transpose, from a's lu and perm.
using LuSolveKernel = void(const Tensor& x, const Tensor& lu, const Tensor& perm, const Tensor& b, bool transpose);
// x (B, n, k) with a x = b for a (B, n, n) upper (lower) triangular; the other triangle is not read, nor the
// diagonal when unit (taken as ones).
using TriangularSolveKernel = void(const Tensor& x, const Tensor& a, const Tensor& b, bool upper, bool unit);
// w (B, n) ascending and v (B, n, n) the orthonormal eigenvectors as columns (undefined: values only) of the
// symmetric a; info: 0, -1 for a matrix with a NaN or infinity, 1 when the iteration did not converge.
using EighKernel = void(const Tensor& w, const Tensor& v, const Tensor& info, const Tensor& a);
// a = q r: r (B, rows, n) upper trapezoidal, q (B, m, rows) orthonormal columns (undefined: r only), rows = min(m, n)
// (reduced) or m (complete).
using QrKernel = void(const Tensor& q, const Tensor& r, const Tensor& a);
// a = u diag(s) vh: s (B, min(m, n)) descending, u (B, m, m or min(m, n)) and vh (B, n or min(m, n), n) as
// their shapes say (both undefined: s only); info as EighKernel's.
using SvdKernel = void(const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& info, const Tensor& a);
// out = x.index_select(dim, index) / x.gather(dim, index); index is int64.
using IndexKernel = void(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
// In place on self along dim at index: scatter (self[index] = src), scatter_add (+=), index_add (+= alpha*src).
using ScatterKernel = void(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                           const Scalar& alpha);
// out: (count, D) int64, the coordinates of x's nonzero elements (NaN is nonzero, -0.0 zero) in row-major order;
// x contiguous with D >= 1 dims and exactly `count` nonzero elements (the frontend counted them).
using NonzeroKernel = void(const Tensor& out, const Tensor& x);

// 2-d convolution and pooling geometry, NCHW: for each spatial dim, out = (in + 2 pad - dil (k - 1) - 1) / stride + 1.
struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};
// What padding fills the border with (kiln/tensor/ops/pad.h): a constant, or copies of the input's own
// elements, mirrored about the edge (Reflect), the edge repeated (Replicate) or wrapped around (Circular).
enum class PadMode : uint8_t { Constant, Reflect, Replicate, Circular };
struct PadParams {
  PadMode mode = PadMode::Reflect;  // one of the copying modes
  int64_t before[3] = {0, 0, 0};    // the pad before each of dims D, H, W (negative: a crop)
};
struct Pool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};  // implicit -inf padding for max pooling
  int64_t dilation[2] = {1, 1};
  // The output size rounds up (ops::pool_out_size): a last window may run past the padded input's end, and the
  // kernels clip it there.
  bool ceil_mode = false;
};
// out (N, Cout, OH, OW) = x (N, Cin, H, W) conv weight (Cout, Cin / groups, KH, KW) + bias (Cout; undefined: none).
// All contiguous, one floating dtype.
using Conv2dKernel = void(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Conv2dParams& p);
// grad_x (N, Cin, H, W) = the gradient of conv2d with respect to x, from grad_out (N, Cout, OH, OW) and weight.
using Conv2dBackwardInputKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                       const Conv2dParams& p);
// grad_weight (Cout, Cin / groups, KH, KW) from grad_out and x (overwritten, not accumulated).
using Conv2dBackwardWeightKernel = void(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                        const Conv2dParams& p);
// out (N, C, OH, OW): the max of each window of x (N, C, H, W); indices (int64, out's shape): where each max is, as
// h * W + w within its (n, c) plane (the first one on ties; a NaN wins). All contiguous.
using MaxPool2dKernel = void(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p);
// grad_x (N, C, H, W), zeroed by the kernel, receives grad_out at the recorded indices (summed where windows overlap).
using MaxPool2dBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                     const Pool2dParams& p);
// Adaptive average pooling over three spatial dims (fewer are size-1 dims), bins as adaptive_pool.h gives them.
// Forward: out (B, OD, OH, OW) from x (B, D, H, W). Backward: grad_x (B, D, H, W), overwritten, from grad_out
// (B, OD, OH, OW): each input position gets grad_out / bin size of every output whose bin holds it. All
// contiguous, one floating dtype.
using AdaptiveAvgPoolKernel = void(const Tensor& out, const Tensor& x);
using AdaptiveAvgPoolBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out);
// Padding by copies (PadParams): out (B, OD, OH, OW) from x (B, D, H, W), each output reading padding::source
// (pad.h) along each dim (any dtype). Backward: grad_x (B, D, H, W), overwritten, each input the sum of the
// outputs that read it (floating). All contiguous.
using PadKernel = void(const Tensor& out, const Tensor& x, const PadParams& p);
using PadBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const PadParams& p);
// Adaptive max pooling's argmax over the same bins: indices (B, OD, OH, OW), int64, where each bin's max of x
// (B, D, H, W) is, as (d H + h) W + w within its (D, H, W) volume; the first on ties, a NaN wins. Contiguous.
using AdaptiveMaxPoolKernel = void(const Tensor& indices, const Tensor& x);

// The fused optimizer updates (fused_optim.h): each kernel updates a list of parameters and their state in place,
// one pass over each parameter. The lists have one length; every tensor is contiguous, of one floating dtype and
// one device, and each gradient and state tensor has its parameter's size.
struct SgdStepParams {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
  bool first = false;  // the momentum buffers are filled (with the gradient), not updated
};
struct AdamStepParams {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = false, maximize = false;  // decoupled: AdamW's weight decay
};
// p -= lr * d, with d the gradient after weight decay, momentum and nesterov (SGD's step; sgd.h). bufs (the
// momentum buffers) is empty when momentum == 0.
using SgdStepKernel = void(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                           const SgdStepParams& s);
// Adam's (decoupled: AdamW's) update of each parameter and its two moments, without amsgrad; steps[i] is
// parameter i's count of updates including this one (from 1), for its bias corrections.
using AdamStepKernel = void(std::span<const Tensor> params, std::span<const Tensor> grads,
                            std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                            std::span<const double> steps, const AdamStepParams& s);

// Cross-entropy over class indices, fused with its log_softmax (ops/cross_entropy.h has the math).
struct CrossEntropyParams {
  int64_t ignore_index = -100;  // rows whose target is this contribute nothing
  double label_smoothing = 0;   // in [0, 1]
};
// logits: (N, C) contiguous, target: (N) int64 contiguous, weight: (C) in logits' dtype or undefined.
// loss, row_weight: (N) in logits' dtype; stats: (N, 2) in logits' op-math dtype (float32, or float64), each
// row's max and the log of its sum of exp(z - max).
using CrossEntropyKernel = void(const Tensor& loss, const Tensor& row_weight, const Tensor& stats,
                                const Tensor& logits, const Tensor& target, const Tensor& weight,
                                const CrossEntropyParams& p);
// grad_logits: (N, C), grad_loss: (N), the rest as the forward's.
using CrossEntropyBackwardKernel = void(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                        const Tensor& stats, const Tensor& target, const Tensor& weight,
                                        const CrossEntropyParams& p);

// Connectionist temporal classification (ops/ctc.h has the math). log_probs: (T, N, C), float32 or float64;
// targets: (N, S) int64, row n's labels its first target_lengths[n] entries; input_lengths, target_lengths: (N)
// int64, checked by the frontend (0 <= input_lengths <= T, 0 <= target_lengths <= S, labels in [0, C) and not
// blank). All contiguous, on one device. nll: (N); log_alpha: (N, T, 2S + 1), -inf where unreachable or past
// the sequence; both in log_probs' dtype and written whole.
using CtcLossKernel = void(const Tensor& nll, const Tensor& log_alpha, const Tensor& log_probs, const Tensor& targets,
                           const Tensor& input_lengths, const Tensor& target_lengths, int64_t blank);
// grad_log_probs: (T, N, C), written whole (0 past each input length); grad_nll: (N); the rest as the
// forward's inputs and outputs. zero_infinity: rows of infinite nll get zero gradients (else NaN).
using CtcLossBackwardKernel = void(const Tensor& grad_log_probs, const Tensor& grad_nll, const Tensor& log_probs,
                                   const Tensor& targets, const Tensor& input_lengths, const Tensor& target_lengths,
                                   const Tensor& nll, const Tensor& log_alpha, int64_t blank, bool zero_infinity);

// embedding_bag's fused kernels (ops/embedding_bag.h has the layout and the math). weight: (V, D) float32 or
// float64; psw (per-sample weights): (the flattened input's numel) in weight's dtype, or undefined; bags: on
// weight's device. All contiguous. out: (B, D), written whole; argmax: (B, D) int64 for Max (each element's
// row, -1 in an empty bag), else undefined.
enum class BagReduce : uint8_t;
struct BagLayout;
using EmbeddingBagKernel = void(const Tensor& out, const Tensor& argmax, const Tensor& weight, const Tensor& psw,
                                const BagLayout& bags, BagReduce mode);
// grad_weight: (V, D), written whole, from grad_out (B, D); psw and argmax as the forward's. A kernel that needs
// the entries grouped by row groups them (ops::group_by_row).
using EmbeddingBagBackwardKernel = void(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& psw,
                                        const Tensor& argmax, const BagLayout& bags, BagReduce mode);
// grad_psw: (the flattened input's numel), written whole (0 where an entry left its bag).
using EmbeddingBagPswBackwardKernel = void(const Tensor& grad_psw, const Tensor& grad_out, const Tensor& weight,
                                           const BagLayout& bags);

// grid_sample over images, bilinear or nearest (ops/grid_sample.h has the math).
enum class GridPadding : uint8_t { Zeros, Border, Reflection };
struct GridSampleParams {
  bool bilinear = true;  // else the nearest pixel
  GridPadding padding = GridPadding::Zeros;
  bool align_corners = false;
};
// out: (N, C, Ho, Wo) from x (N, C, H, W) read at grid (N, Ho, Wo, 2); all contiguous, one dtype (float32 or
// float64), one device.
using GridSample2dKernel = void(const Tensor& out, const Tensor& x, const Tensor& grid, const GridSampleParams& p);
// grad_x (x's shape, zeroed by the caller: the kernels add into it) and grad_grid (grid's shape, written whole),
// each undefined where not wanted, from grad_out (out's shape); x and grid as the forward's.
using GridSample2dBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_grid, const Tensor& grad_out,
                                        const Tensor& x, const Tensor& grid, const GridSampleParams& p);

// Layer normalization over the last dim, fused (ops/normalization.h has the math).
// x, y: (M, D) contiguous; weight, bias: (D) in x's dtype or undefined; mean, rstd: (M) in x's op-math dtype.
using LayerNormKernel = void(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps);
// grad_x: (M, D) or undefined; grad_weight, grad_bias: (D) or undefined (not wanted); grad_y: (M, D).
using LayerNormBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& weight);

// Batch normalization over (N, S) per channel, fused (ops/normalization.h has the math).
// x, y: (N, C, S) contiguous; weight, bias: (C) in x's dtype or undefined; mean, var: (C) in x's op-math dtype,
// written from the batch when training (var biased), read (the running statistics) when not. With y undefined
// (and training) the kernel only writes the statistics.
using BatchNormKernel = void(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps, bool training);
// grad_x: (N, C, S) or undefined; grad_weight, grad_bias: (C) or undefined; grad_y: (N, C, S).
using BatchNormBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                     const Tensor& weight, double eps, bool training);
// grad_x: (N, C, S), the training-mode input gradient with sums (2, C) in op-math dtype, [sum g, sum g xhat]
// over count values, given (ops::batch_norm_backward_input).
using BatchNormBackwardInputKernel = void(const Tensor& grad_x, const Tensor& grad_y, const Tensor& x,
                                          const Tensor& mean, const Tensor& var, const Tensor& weight,
                                          const Tensor& sums, int64_t count, double eps);

// X(op, kernel signature)
#define KILN_FORALL_OPS(X)                 \
  /* data movement and creation */         \
  X(copy, UnaryKernel)                     \
  X(copy_async, UnaryKernel)               \
  X(fill, FillKernel)                      \
  X(arange, RangeKernel)                   \
  X(uniform, RandomKernel)                 \
  X(normal, RandomKernel)                  \
  X(randint, RandomKernel)                 \
  X(bernoulli, RandomKernel)               \
  /* element-wise unary */                 \
  X(neg, UnaryKernel)                      \
  X(abs, UnaryKernel)                      \
  X(sign, UnaryKernel)                     \
  X(exp, UnaryKernel)                      \
  X(log, UnaryKernel)                      \
  X(log1p, UnaryKernel)                    \
  X(expm1, UnaryKernel)                    \
  X(erf, UnaryKernel)                      \
  X(sqrt, UnaryKernel)                     \
  X(rsqrt, UnaryKernel)                    \
  X(log2, UnaryKernel)                     \
  X(log10, UnaryKernel)                    \
  X(reciprocal, UnaryKernel)               \
  X(sin, UnaryKernel)                      \
  X(cos, UnaryKernel)                      \
  X(tan, UnaryKernel)                      \
  X(asin, UnaryKernel)                     \
  X(acos, UnaryKernel)                     \
  X(atan, UnaryKernel)                     \
  X(sinh, UnaryKernel)                  \
  X(cosh, UnaryKernel)                  \
  X(asinh, UnaryKernel)                 \
  X(acosh, UnaryKernel)                 \
  X(atanh, UnaryKernel)                 \
  X(floor, UnaryKernel)                    \
  X(ceil, UnaryKernel)                     \
  X(round, UnaryKernel)                    \
  X(trunc, UnaryKernel)                    \
  X(tanh, UnaryKernel)                     \
  X(sigmoid, UnaryKernel)                  \
  X(relu, UnaryKernel)                     \
  X(gelu, UnaryKernel)                     \
  X(gelu_tanh, UnaryKernel)                \
  X(silu, UnaryKernel)                     \
  X(logical_not, UnaryKernel)              \
  X(isnan, UnaryKernel)                    \
  X(isinf, UnaryKernel)                    \
  X(pow_scalar, UnaryParamKernel)          \
  X(clamp, UnaryParamKernel)               \
  X(leaky_relu, UnaryParamKernel)          \
  X(activation, ActivationKernel)          \
  X(activation_backward, ActivationBackwardKernel) \
  /* element-wise binary */                \
  X(add, BinaryAlphaKernel)                \
  X(sub, BinaryAlphaKernel)                \
  X(mul, BinaryKernel)                     \
  X(div, BinaryKernel)                     \
  X(atan2, BinaryKernel)                   \
  X(fmod, BinaryKernel)                    \
  X(remainder, BinaryKernel)               \
  X(pow, BinaryKernel)                     \
  X(maximum, BinaryKernel)                 \
  X(minimum, BinaryKernel)                 \
  X(relu_backward, BinaryKernel)           \
  X(gelu_backward, BinaryKernel)           \
  X(gelu_tanh_backward, BinaryKernel)      \
  X(eq, BinaryKernel)                      \
  X(ne, BinaryKernel)                      \
  X(lt, BinaryKernel)                      \
  X(le, BinaryKernel)                      \
  X(gt, BinaryKernel)                      \
  X(ge, BinaryKernel)                      \
  X(logical_and, BinaryKernel)             \
  X(logical_or, BinaryKernel)              \
  X(logical_xor, BinaryKernel)             \
  X(where, TernaryKernel)                  \
  X(lerp, TernaryKernel)                   \
  /* reductions */                         \
  X(sum, ReduceKernel)                     \
  X(mean, ReduceKernel)                    \
  X(prod, ReduceKernel)                    \
  X(amax, ReduceKernel)                    \
  X(amin, ReduceKernel)                    \
  X(all, ReduceKernel)                     \
  X(any, ReduceKernel)                     \
  X(norm, ReduceParamKernel)               \
  X(var, ReduceParamKernel)                \
  X(max_dim, ReduceIndexKernel)            \
  X(min_dim, ReduceIndexKernel)            \
  X(softmax, DimKernel)                    \
  X(log_softmax, DimKernel)                \
  X(cumsum, DimKernel)                     \
  /* sorting */                            \
  X(sort, SortKernel)                      \
  X(topk, TopKKernel)                      \
  /* resizing */                           \
  X(resize_taps, ResizeTapsKernel)         \
  X(resize_taps_backward, ResizeTapsBackwardKernel) \
  /* linear algebra */                     \
  X(bmm, BmmKernel)                        \
  X(cholesky, CholeskyKernel)              \
  X(lu_factor, LuFactorKernel)             \
  X(lu_solve, LuSolveKernel)               \
  X(triangular_solve, TriangularSolveKernel) \
  X(eigh, EighKernel)                      \
  X(qr, QrKernel)                          \
  X(svd, SvdKernel)                        \
  /* indexing */                           \
  X(index_select, IndexKernel)             \
  X(gather, IndexKernel)                   \
  X(scatter, ScatterKernel)                \
  X(scatter_add, ScatterKernel)            \
  X(index_add, ScatterKernel)              \
  X(nonzero, NonzeroKernel)                \
  /* convolution and pooling */            \
  X(conv2d, Conv2dKernel)                  \
  X(conv2d_backward_input, Conv2dBackwardInputKernel)   \
  X(conv2d_backward_weight, Conv2dBackwardWeightKernel) \
  X(max_pool2d, MaxPool2dKernel)           \
  X(max_pool2d_backward, MaxPool2dBackwardKernel) \
  X(adaptive_avg_pool, AdaptiveAvgPoolKernel) \
  X(adaptive_avg_pool_backward, AdaptiveAvgPoolBackwardKernel) \
  X(adaptive_max_pool, AdaptiveMaxPoolKernel) \
  X(pad, PadKernel)                        \
  X(pad_backward, PadBackwardKernel)       \
  X(grid_sample_2d, GridSample2dKernel)    \
  X(grid_sample_2d_backward, GridSample2dBackwardKernel) \
  /* lookups */                            \
  X(embedding_bag, EmbeddingBagKernel)     \
  X(embedding_bag_backward, EmbeddingBagBackwardKernel) \
  X(embedding_bag_psw_backward, EmbeddingBagPswBackwardKernel) \
  /* fused losses */                       \
  X(cross_entropy, CrossEntropyKernel)     \
  X(cross_entropy_backward, CrossEntropyBackwardKernel) \
  X(ctc_loss, CtcLossKernel)               \
  X(ctc_loss_backward, CtcLossBackwardKernel) \
  /* fused normalization */                \
  X(layer_norm, LayerNormKernel)           \
  X(layer_norm_backward, LayerNormBackwardKernel) \
  X(batch_norm, BatchNormKernel)           \
  X(batch_norm_backward, BatchNormBackwardKernel) \
  X(batch_norm_backward_input, BatchNormBackwardInputKernel) \
  /* fused optimizer updates */            \
  X(sgd_step, SgdStepKernel)               \
  X(adam_step, AdamStepKernel)

enum class Op : uint16_t {
#define KILN_OP_ENUM(name, K) name,
  KILN_FORALL_OPS(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};

#define KILN_OP_COUNT(name, K) +1
inline constexpr int kNumOps = 0 KILN_FORALL_OPS(KILN_OP_COUNT);
#undef KILN_OP_COUNT

// The kernel signature of each op.
template <Op op>
struct OpSignature;
#define KILN_OP_SIG(name, K) \
  template <>                \
  struct OpSignature<Op::name> { using type = K; };
KILN_FORALL_OPS(KILN_OP_SIG)
#undef KILN_OP_SIG

const char* op_name(Op op);
// "add_" for Op::add: the name of the op's in-place form, a string that lives forever.
const char* op_inplace_name(Op op);

}  // namespace kiln
