// The math of nn's layers and losses, composites of differentiable ops whose gradients come from them, but for
// layer_norm and cross_entropy over class indices: those call fused ops with backward rules of their own
// (kiln/autograd/functions/normalization.cpp and cross_entropy.cpp), a kernel or two instead of a dozen.
#include "kiln/nn/functional.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <vector>

namespace kiln::nn::functional {

namespace {
thread_local bool composite_only = false;
}  // namespace

CompositeOnlyGuard::CompositeOnlyGuard() : previous_(composite_only) { composite_only = true; }
CompositeOnlyGuard::~CompositeOnlyGuard() { composite_only = previous_; }
bool CompositeOnlyGuard::active() { return composite_only; }

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return loss.sum();
    case Reduction::Mean:
      break;
  }
  return loss.mean();
}

namespace {

void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(input.sizes() == target.sizes(), op, ": input of shape ", shape_str(input.sizes()),
             " and target of shape ", shape_str(target.sizes()), " must have the same shape");
}

// A (C) weight shaped to broadcast against (N, C, d1, ...).
Tensor class_weight_view(const Tensor& weight, int64_t dims) {
  Shape shape(static_cast<size_t>(dims), 1);
  shape[1] = weight.size(0);
  return weight.view(shape);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(weight.dim() == 2, "linear: weight must be (out_features, in_features), got ", shape_str(weight.sizes()));
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input of shape ", shape_str(x.sizes()),
             " does not end in in_features = ", weight.size(1));
  // Under autocast the weight itself is cast (before the transpose makes a view of it), so the cast cache
  // serves a weight used more than once.
  if (autocast::wants_lower({&x, &weight, &bias}))
    return linear(autocast::lower(x), autocast::lower(weight), autocast::lower(bias));
  if (x.dim() == 2 && bias.defined()) return addmm(bias, x, weight.t());  // one GEMM with the bias folded in
  // The same over all the leading dims at once (see matmul), for the usual bias of shape (out_features).
  if (x.dim() > 2 && bias.defined() && bias.dim() == 1 && (weight.requires_grad() || x.is_contiguous()))
    return linear_rows(x, weight, bias);
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Tensor keep = ops::to(ops::ge(rand_like(x, {}, gen), p), x.dtype());  // 1 with probability 1 - p
  return x * (keep / (1.0 - p));
}

namespace {
// Zeroes whole channels: one draw per (sample, channel), broadcast over the `spatial` trailing dims.
Tensor channel_dropout(const char* op, const Tensor& x, double p, bool training, Generator* gen, int64_t spatial) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p);
  KILN_CHECK(x.dim() == spatial + 2 || x.dim() == spatial + 1, op, ": expected a ", spatial + 2, "-D (N, C, ...) or ",
             spatial + 1, "-D (C, ...) input, got shape ", shape_str(x.sizes()));
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Shape mask_shape = x.sizes();
  std::fill(mask_shape.end() - spatial, mask_shape.end(), 1);
  const Tensor draw = rand(mask_shape, TensorOptions(kFloat32).device(x.device()), gen);
  const Tensor keep = ops::to(ops::ge(draw, p), x.dtype());  // 1 with probability 1 - p
  return x * (keep / (1.0 - p));
}

// Alpha dropout: one draw per element, or (feature) per (sample, channel) broadcast over the other dims; kept
// elements become a x + a alpha' p, dropped ones a alpha' (p - 1) (functional.h).
Tensor alpha_dropout_impl(const char* op, const Tensor& x, double p, bool training, Generator* gen, bool feature) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p);
  KILN_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", x.dtype());
  KILN_CHECK(!feature || x.dim() >= 2, op, ": expected an input (N, C, ...) with at least two dims, got shape ",
             shape_str(x.sizes()));
  if (!training || p == 0.0 || x.numel() == 0) return x;
  if (p == 1.0) return x * 0.0;
  constexpr double kAlpha = 1.7580993408473766;  // SELU's lambda * alpha: its output's lower bound is -kAlpha
  const double a = 1.0 / std::sqrt((kAlpha * kAlpha * p + 1.0) * (1.0 - p));
  Shape mask_shape = x.sizes();
  if (feature) std::fill(mask_shape.begin() + 2, mask_shape.end(), 1);
  const Tensor draw = rand(mask_shape, TensorOptions(kFloat32).device(x.device()), gen);
  const Tensor keep = ops::to(ops::ge(draw, p), x.dtype());  // 1 with probability 1 - p
  // a keep x + (a alpha' p - a alpha' (1 - keep)): the shift is a alpha' p where kept, a alpha' (p - 1) where not.
  return x * (keep * a) + (keep * (a * kAlpha) + a * kAlpha * (p - 1.0));
}

// The checks layer_norm and rms_norm share: x ends in normalized_shape, and so do the affine tensors given.
void check_normalized_shape(const char* op, const Tensor& x, IntArrayRef normalized_shape,
                            std::initializer_list<const Tensor*> affine) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && x.dim() >= k, op, ": normalized_shape ", shape_str(normalized_shape),
             " does not fit input of shape ", shape_str(x.sizes()));
  for (int64_t i = 0; i < k; ++i)
    KILN_CHECK(x.size(x.dim() - k + i) == normalized_shape[static_cast<size_t>(i)], op, ": input of shape ",
               shape_str(x.sizes()), " does not end in normalized_shape ", shape_str(normalized_shape));
  for (const Tensor* p : affine)
    KILN_CHECK(!p->defined() || p->sizes() == Shape(normalized_shape.begin(), normalized_shape.end()), op,
               affine.size() == 1 ? ": weight" : ": weight and bias", " must have the normalized_shape ",
               shape_str(normalized_shape), ", got ", shape_str(p->sizes()));
}
}  // namespace

Tensor dropout1d(const Tensor& x, double p, bool training, Generator* gen) {
  return channel_dropout("dropout1d", x, p, training, gen, 1);
}
Tensor dropout2d(const Tensor& x, double p, bool training, Generator* gen) {
  return channel_dropout("dropout2d", x, p, training, gen, 2);
}
Tensor dropout3d(const Tensor& x, double p, bool training, Generator* gen) {
  return channel_dropout("dropout3d", x, p, training, gen, 3);
}
Tensor alpha_dropout(const Tensor& x, double p, bool training, Generator* gen) {
  return alpha_dropout_impl("alpha_dropout", x, p, training, gen, false);
}
Tensor feature_alpha_dropout(const Tensor& x, double p, bool training, Generator* gen) {
  return alpha_dropout_impl("feature_alpha_dropout", x, p, training, gen, true);
}

Tensor layer_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  if (autocast::wants_float32({&x, &weight, &bias}))
    return layer_norm(autocast::float32(x), normalized_shape, autocast::float32(weight), autocast::float32(bias), eps);
  check_normalized_shape("layer_norm", x, normalized_shape, {&weight, &bias});
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  // The normalized dims as one: rows (M, D) for the fused kernel.
  int64_t rows = 1, d = 1;
  for (int64_t i = 0; i < x.dim() - k; ++i) rows *= x.size(i);
  for (int64_t s : normalized_shape) d *= s;
  Tensor w = weight.defined() ? weight.reshape({d}) : weight;
  Tensor b = bias.defined() ? bias.reshape({d}) : bias;
  return layer_norm_rows(x.reshape({rows, d}), w, b, eps).view(x.sizes());
}

// A composite: its gradient comes from the mean, rsqrt and products it is made of.
Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight, std::optional<double> eps) {
  if (autocast::wants_float32({&x, &weight}))
    return rms_norm(autocast::float32(x), normalized_shape, autocast::float32(weight), eps);
  KILN_CHECK(is_floating(x.dtype()), "rms_norm: expected a floating input, got ", x.dtype());
  check_normalized_shape("rms_norm", x, normalized_shape, {&weight});
  const bool half = x.dtype() == kFloat16 || x.dtype() == kBFloat16;
  const Tensor xf = half ? x.to(kFloat32) : x;
  const double e = eps.value_or(xf.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                       : std::numeric_limits<float>::epsilon());
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - static_cast<int64_t>(normalized_shape.size()); d < x.dim(); ++d) dims.push_back(d);
  Tensor y = xf * rsqrt(mean(xf * xf, dims, /*keepdim=*/true) + e);
  if (half) y = y.to(x.dtype());
  return weight.defined() ? y * weight : y;
}

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(weight.dim() == 3, "bilinear: weight must be (out, in1, in2), got ", shape_str(weight.sizes()));
  const int64_t O = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  KILN_CHECK(x1.dim() >= 1 && x2.dim() >= 1 && x1.size(-1) == in1 && x2.size(-1) == in2 &&
                 Shape(x1.sizes().begin(), x1.sizes().end() - 1) == Shape(x2.sizes().begin(), x2.sizes().end() - 1),
             "bilinear: inputs ", shape_str(x1.sizes()), " and ", shape_str(x2.sizes()),
             " must share their leading dims and end in ", in1, " and ", in2, " for weight ",
             shape_str(weight.sizes()));
  KILN_CHECK(!bias.defined() || bias.sizes() == Shape{O}, "bilinear: bias must be (", O, "), got ",
             shape_str(bias.sizes()));
  // x1 times every weight[o] as one product, (M, O in2), then each row's dot with x2.
  const Tensor a = x1.reshape({-1, in1}), b = x2.reshape({-1, in2});
  const Tensor t = mm(a, weight.permute({1, 0, 2}).reshape({in1, O * in2})).view({a.size(0), O, in2});
  Tensor y = (t * b.unsqueeze(1)).sum({2});
  if (bias.defined()) y = y + bias;
  Shape out(x1.sizes().begin(), x1.sizes().end() - 1);
  out.push_back(O);
  return y.view(out);
}

// ---- losses ----

namespace {
// Checks class-index targets: int64, shape (N, d1, ...) for input (N, C, d1, ...), values in [0, C) or ignored.
// The dtype and shape of class-index targets: int64, (N, d1, ...) for input (N, C, d1, ...).
void check_class_target_shape(const char* op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(target.dtype() == kInt64, op, ": class-index targets must be int64, got ", target.dtype());
  Shape expected = input.sizes();
  expected.erase(expected.begin() + 1);
  KILN_CHECK(target.sizes() == expected, op, ": input of shape ", shape_str(input.sizes()), " needs a target of shape ",
             shape_str(expected), ", got ", shape_str(target.sizes()));
}

// Also the values: in [0, C) or ignore_index (a host sync on a GPU: the fused cross-entropy checks in its kernel).
void check_class_targets(const char* op, const Tensor& input, const Tensor& target, int64_t ignore_index) {
  check_class_target_shape(op, input, target);
  int64_t classes = input.size(1);
  Tensor bad = ops::logical_and(ops::logical_or(ops::lt(target, 0), ops::ge(target, classes)),
                                ops::ne(target, ignore_index));
  if (ops::any(bad).item<bool>()) {
    Tensor first = ops::argmax(ops::to(ops::reshape(bad, {-1}), kInt64));  // the first bad position
    int64_t value = ops::index_select(ops::reshape(target, {-1}), 0, ops::reshape(first, {1})).item<int64_t>();
    detail::throw_error(detail::concat(op, ": target ", value, " is out of range for ", classes,
                                       " classes (expected 0..", classes - 1, " or ignore_index ", ignore_index, ")"));
  }
}

// (N) targets with (N, C) input, or the unbatched forms (C) with a 0-dim target: made batched here.
bool unbatched(const Tensor& input) { return input.dim() == 1; }
}  // namespace

namespace {
// nll_loss, whose errors name `op`.
Tensor nll(const char* op, const Tensor& input_in, const Tensor& target_in, const NllLossOptions& options) {
  bool single = unbatched(input_in);
  Tensor input = single ? input_in.unsqueeze(0) : input_in;
  Tensor target = single ? target_in.unsqueeze(0) : target_in;
  KILN_CHECK(input.dim() >= 2, op, ": input must be (N, C) or (N, C, d1, ...), got ", shape_str(input_in.sizes()));
  check_class_targets(op, input, target, options.ignore_index);
  Tensor ignored = ops::eq(target, options.ignore_index);
  Tensor safe_target = ops::masked_fill(target, ignored, 0);
  Tensor picked = -gather(input, 1, safe_target.unsqueeze(1)).squeeze(1);  // (N, d1, ...)
  Tensor w = options.weight.defined() ? index_select(options.weight, 0, safe_target.reshape({-1})).view(target.sizes())
                                      : ones(target.sizes(), TensorOptions(input.dtype()).device(input.device()));
  w = masked_fill(w, ignored, 0.0);
  Tensor loss = picked * w;
  switch (options.reduction) {
    case Reduction::None:
      return single ? loss.squeeze(0) : loss;
    case Reduction::Sum:
      return loss.sum();
    case Reduction::Mean:
      break;
  }
  return loss.sum() / w.sum();  // a weighted mean: NaN when every target is ignored, as in PyTorch
}
}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const NllLossOptions& options) {
  if (autocast::wants_float32({&input, &options.weight})) {
    NllLossOptions o = options;
    o.weight = autocast::float32(o.weight);
    return nll_loss(autocast::float32(input), target, o);
  }
  return nll("nll_loss", input, target, options);
}

Tensor cross_entropy(const Tensor& input_in, const Tensor& target_in, const CrossEntropyOptions& options) {
  if (autocast::wants_float32({&input_in, &target_in, &options.weight})) {  // float32 under autocast
    CrossEntropyOptions o = options;
    o.weight = autocast::float32(o.weight);
    return cross_entropy(autocast::float32(input_in), autocast::float32(target_in), o);
  }
  KILN_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
             "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  bool single = unbatched(input_in);
  Tensor input = single ? input_in.unsqueeze(0) : input_in;
  KILN_CHECK(input.dim() >= 2, "cross_entropy: input must be (N, C) or (N, C, d1, ...) logits, got ",
             shape_str(input_in.sizes()));
  int64_t classes = input.size(1);
  KILN_CHECK(!options.weight.defined() || (options.weight.dim() == 1 && options.weight.size(0) == classes),
             "cross_entropy: weight must be (", classes, "), got ", shape_str(options.weight.sizes()));
  double eps = options.label_smoothing;

  if (target_in.is_floating_point()) {  // class probabilities, input's shape
    Tensor target = single ? target_in.unsqueeze(0) : target_in;
    check_same_shape("cross_entropy", input, target);
    // NOTE: log_softmax, not log(softmax): the latter underflows to -inf for very unlikely classes.
    Tensor logp = log_softmax(input, 1);
    if (eps > 0) target = target * (1.0 - eps) + eps / static_cast<double>(classes);
    Tensor weighted = options.weight.defined() ? logp * class_weight_view(options.weight, input.dim()) : logp;
    Tensor loss = -(weighted * target).sum({1});  // (N, d1, ...)
    if (options.reduction == Reduction::Mean) return loss.sum() / static_cast<double>(loss.numel());
    if (options.reduction == Reduction::None && single) return loss.squeeze(0);
    return reduce_loss(loss, options.reduction);
  }

  // Class indices: the fused kernel (log_softmax, pick, weights, ignore_index and smoothing in one pass; the
  // target values are checked there, without a host sync on a GPU) over rows (N d1 ..., C).
  Tensor target = single ? target_in.unsqueeze(0) : target_in;
  check_class_target_shape("cross_entropy", input, target);
  std::vector<int64_t> class_last;  // (N, C, d1, ...) -> (N, d1, ..., C)
  for (int64_t d = 0; d < input.dim(); ++d)
    if (d != 1) class_last.push_back(d);
  class_last.push_back(1);
  Tensor rows = input.dim() == 2 ? input : input.permute(class_last).reshape({-1, classes});
  auto [loss, row_weight] =
      cross_entropy_rows(rows, target.reshape({-1}), options.weight, {options.ignore_index, eps});
  switch (options.reduction) {
    case Reduction::None: {
      Tensor per_position = loss.view(target.sizes());
      return single ? per_position.squeeze(0) : per_position;
    }
    case Reduction::Sum:
      return loss.sum();
    case Reduction::Mean:
      break;
  }
  // PyTorch's weighted mean, smoothing term included: the sum over the weights of the targets (NaN when every
  // target is ignored). Both sums in at least float32: 16-bit logits would count at most 65504 weights.
  if (input.dtype() == kFloat16 || input.dtype() == kBFloat16)
    return (sum(loss, {}, false, kFloat32) / ops::sum(row_weight, {}, false, kFloat32)).to(input.dtype());
  return loss.sum() / ops::sum(row_weight);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast::wants_float32({&input, &target}))
    return mse_loss(autocast::float32(input), autocast::float32(target), reduction);
  check_same_shape("mse_loss", input, target);
  Tensor d = input - target;
  return reduce_loss(d * d, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast::wants_float32({&input, &target}))
    return l1_loss(autocast::float32(input), autocast::float32(target), reduction);
  check_same_shape("l1_loss", input, target);
  return reduce_loss(abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  if (autocast::wants_float32({&input, &target}))
    return smooth_l1_loss(autocast::float32(input), autocast::float32(target), reduction, beta);
  check_same_shape("smooth_l1_loss", input, target);
  KILN_CHECK(beta >= 0, "smooth_l1_loss: beta must be non-negative, got ", beta);
  Tensor d = abs(input - target);
  if (beta == 0.0) return reduce_loss(d, reduction);
  return reduce_loss(where(ops::lt(d, beta), d * d * (0.5 / beta), d - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (autocast::wants_float32({&input, &target}))
    return huber_loss(autocast::float32(input), autocast::float32(target), reduction, delta);
  check_same_shape("huber_loss", input, target);
  KILN_CHECK(delta > 0, "huber_loss: delta must be positive, got ", delta);
  Tensor d = abs(input - target);
  return reduce_loss(where(ops::le(d, delta), d * d * 0.5, (d - 0.5 * delta) * delta), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  if (autocast::wants_float32({&input, &target, &weight}))
    return binary_cross_entropy(autocast::float32(input), autocast::float32(target), autocast::float32(weight),
                                reduction);
  check_same_shape("binary_cross_entropy", input, target);
  KILN_CHECK(ops::all(ops::logical_and(ops::ge(input, 0), ops::le(input, 1))).item<bool>(),
             "binary_cross_entropy: input must hold probabilities in [0, 1] (for logits use "
             "binary_cross_entropy_with_logits)");
  // NOTE: log clamped at -100, as PyTorch does, so that a probability of exactly 0 or 1 gives a finite loss.
  Tensor loss = -(target * clamp(log(input), -100.0, std::nullopt) +
                  (1 - target) * clamp(log(1 - input), -100.0, std::nullopt));
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  if (autocast::wants_float32({&input, &target, &weight, &pos_weight}))
    return binary_cross_entropy_with_logits(autocast::float32(input), autocast::float32(target),
                                            autocast::float32(weight), autocast::float32(pos_weight), reduction);
  check_same_shape("binary_cross_entropy_with_logits", input, target);
  // -[p t log s(x) + (1 - t) log(1 - s(x))] = (1 - t) x + (1 + (p - 1) t) softplus(-x), with softplus(-x) =
  // log(1 + exp(-x)) computed without overflow.
  Tensor sp = softplus(-input);
  Tensor log_weight = pos_weight.defined() ? (pos_weight - 1) * target + 1 : Tensor();
  Tensor loss = (1 - target) * input + (log_weight.defined() ? log_weight * sp : sp);
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target, bool batchmean) {
  if (autocast::wants_float32({&input, &target}))
    return kl_div(autocast::float32(input), autocast::float32(target), reduction, log_target, batchmean);
  check_same_shape("kl_div", input, target);
  Tensor loss = log_target ? exp(target) * (target - input)
                           // t log t is 0 at t = 0 (its limit), not NaN
                           : where(ops::gt(target, 0), target * (log(where(ops::gt(target, 0), target, 1.0)) - input), 0.0);
  if (batchmean && reduction == Reduction::Mean) return loss.sum() / static_cast<double>(input.dim() > 0 ? input.size(0) : 1);
  return reduce_loss(loss, reduction);
}

}  // namespace kiln::nn::functional
