// Distances and similarities, and the losses of metric learning (margin ranking, hinge and cosine embedding,
// triplet), margin classification (soft margin, multi-label soft margin, multi-margin) and likelihoods (Poisson,
// Gaussian). Composites of differentiable ops; each follows PyTorch's formula closely enough to give its values
// to rounding, including where PyTorch holds a norm or a variance at eps without stopping its gradient.
#include <cmath>
#include <numbers>

#include "kiln/nn/functional.h"

namespace kiln::nn::functional {

namespace {

void check_shapes(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  KILN_CHECK(a.defined() && b.defined(), op, ": an input is undefined");
  KILN_CHECK(a.sizes() == b.sizes(), op, ": ", a_name, " of shape ", shape_str(a.sizes()), " and ", b_name,
             " of shape ", shape_str(b.sizes()), " must have the same shape");
}

// x's value held at lo or above, with x's gradient passed through unchanged: PyTorch clamps these in place
// under no_grad, which keeps the graph of the unclamped tensor.
Tensor held_at_least(const Tensor& x, double lo) { return x + (clamp(x, Scalar(lo), std::nullopt) - x).detach(); }

// log(1 + e^t), which for large t is t itself: max(t, 0) + log1p(e^-|t|).
Tensor log1p_exp(const Tensor& t) { return relu(t) + log1p(exp(-abs(t))); }

}  // namespace

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  return x / clamp(norm(x, p, {dim}, /*keepdim=*/true), Scalar(eps), std::nullopt);
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  KILN_CHECK(x1.defined() && x2.defined(), "cosine_similarity: an input is undefined");
  const Shape shape = broadcast_shapes(x1.sizes(), x2.sizes(), "cosine_similarity");
  const Tensor a = x1.expand(shape), b = x2.expand(shape);
  const Tensor na = held_at_least(norm(a, 2.0, {dim}, true), eps), nb = held_at_least(norm(b, 2.0, {dim}, true), eps);
  return ((a / na) * (b / nb)).sum({dim});
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  KILN_CHECK(x1.defined() && x2.defined(), "pairwise_distance: an input is undefined");
  const Tensor d = x1 - x2 + eps;
  KILN_CHECK(d.dim() > 0, "pairwise_distance: expected inputs with at least one dim, got 0-dim ones");
  return norm(d, p, {-1}, keepdim);
}

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin, Reduction reduction) {
  check_shapes("margin_ranking_loss", x1, "x1", x2, "x2");
  check_shapes("margin_ranking_loss", x1, "x1", y, "y");
  return reduce_loss(relu(-y * (x1 - x2) + margin), reduction);
}

Tensor hinge_embedding_loss(const Tensor& x, const Tensor& y, double margin, Reduction reduction) {
  check_shapes("hinge_embedding_loss", x, "x", y, "y");
  const Tensor below_margin = where(y != 1.0, relu(margin - x), Scalar(0.0));
  const Tensor itself = where(y != -1.0, x, Scalar(0.0));
  return reduce_loss(below_margin + itself, reduction);
}

Tensor soft_margin_loss(const Tensor& x, const Tensor& y, Reduction reduction) {
  check_shapes("soft_margin_loss", x, "x", y, "y");
  return reduce_loss(log1p_exp(-y * x), reduction);
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin, Reduction reduction) {
  check_shapes("cosine_embedding_loss", x1, "x1", x2, "x2");
  KILN_CHECK(x1.dim() == 1 || x1.dim() == 2, "cosine_embedding_loss: expected (N, D) or (D) inputs, got ",
             shape_str(x1.sizes()));
  const int64_t d = x1.dim() - 1;
  KILN_CHECK(y.dim() == d && (d == 0 || y.size(0) == x1.size(0)), "cosine_embedding_loss: y must be ",
             d == 0 ? "0-dim" : "(N)", " for inputs of shape ", shape_str(x1.sizes()), ", got ", shape_str(y.sizes()));
  constexpr double kEps = 1e-12;  // PyTorch's, added to each squared norm
  const Tensor cos = (x1 * x2).sum({d}) / sqrt(((x1 * x1).sum({d}) + kEps) * ((x2 * x2).sum({d}) + kEps));
  const Tensor alike = where(y == 1.0, 1.0 - cos, Scalar(0.0));
  const Tensor unlike = where(y == -1.0, relu(cos - margin), Scalar(0.0));
  return reduce_loss(alike + unlike, reduction);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginOptions& o) {
  check_shapes("triplet_margin_loss", anchor, "anchor", positive, "positive");
  check_shapes("triplet_margin_loss", anchor, "anchor", negative, "negative");
  KILN_CHECK(o.margin > 0, "triplet_margin_loss: margin = ", o.margin, ": expected > 0");
  const Tensor to_positive = pairwise_distance(anchor, positive, o.p, o.eps);
  Tensor to_negative = pairwise_distance(anchor, negative, o.p, o.eps);
  if (o.swap) to_negative = minimum(to_negative, pairwise_distance(positive, negative, o.p, o.eps));
  return reduce_loss(relu(to_positive - to_negative + o.margin), o.reduction);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNLLOptions& o) {
  check_shapes("poisson_nll_loss", input, "input", target, "target");
  Tensor loss = o.log_input ? exp(input) - target * input : input - target * log(input + o.eps);
  if (o.full) {
    // Stirling's approximation of log(target!), counted where target > 1 (below, log(target!) is 0 or near it).
    const Tensor stirling = target * log(target) - target + log(target * (2 * std::numbers::pi)) * 0.5;
    loss = loss + where(target > 1.0, stirling, Scalar(0.0));
  }
  return reduce_loss(loss, o.reduction);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, const GaussianNLLOptions& o) {
  check_shapes("gaussian_nll_loss", input, "input", target, "target");
  KILN_CHECK(var.defined(), "gaussian_nll_loss: var is undefined");
  Tensor v = var;
  if (v.sizes() != input.sizes()) {
    const Shape leading(input.sizes().begin(), input.sizes().end() - (input.dim() > 0 ? 1 : 0));
    const bool without_last = input.dim() > 0 && v.sizes() == leading;
    const bool last_one = input.dim() > 0 && v.dim() == input.dim() && v.size(-1) == 1 &&
                          Shape(v.sizes().begin(), v.sizes().end() - 1) == leading;
    KILN_CHECK(without_last || last_one, "gaussian_nll_loss: var of shape ", shape_str(v.sizes()),
               " fits neither the input's shape ", shape_str(input.sizes()), ", nor it without its last dim, nor ",
               "it with a last dim of 1");
    if (without_last) v = v.unsqueeze(-1);
  }
  KILN_CHECK(!ops::any(ops::lt(v, 0.0)).item<bool>(), "gaussian_nll_loss: var has negative entries");
  KILN_CHECK(o.eps > 0, "gaussian_nll_loss: eps = ", o.eps, ": expected > 0");
  v = held_at_least(v, o.eps);
  const Tensor diff = input - target;
  Tensor loss = (log(v) + diff * diff / v) * 0.5;
  if (o.full) loss = loss + 0.5 * std::log(2 * std::numbers::pi);
  return reduce_loss(loss, o.reduction);
}

Tensor multilabel_soft_margin_loss(const Tensor& x, const Tensor& y, const Tensor& weight, Reduction reduction) {
  check_shapes("multilabel_soft_margin_loss", x, "x", y, "y");
  KILN_CHECK(x.dim() == 1 || x.dim() == 2, "multilabel_soft_margin_loss: expected (N, C) or (C) inputs, got ",
             shape_str(x.sizes()));
  // -log sigmoid(x) = log(1 + e^-x), and -log sigmoid(-x) = log(1 + e^x).
  Tensor loss = y * log1p_exp(-x) + (1.0 - y) * log1p_exp(x);
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss.mean({-1}), reduction);
}

Tensor multi_margin_loss(const Tensor& x, const Tensor& y, const MultiMarginOptions& o) {
  KILN_CHECK(x.defined() && y.defined(), "multi_margin_loss: an input is undefined");
  KILN_CHECK(o.p == 1 || o.p == 2, "multi_margin_loss: p = ", o.p, ": expected 1 or 2");
  KILN_CHECK(x.dim() == 1 || x.dim() == 2, "multi_margin_loss: expected (N, C) or (C) scores, got ", shape_str(x.sizes()));
  KILN_CHECK(y.dtype() == kInt64, "multi_margin_loss: expected int64 class indices, got ", y.dtype());
  const bool batched = x.dim() == 2;
  KILN_CHECK(y.dim() == (batched ? 1 : 0) && (!batched || y.size(0) == x.size(0)), "multi_margin_loss: the ",
             "classes must be ", batched ? "(N)" : "0-dim", " for scores of shape ", shape_str(x.sizes()), ", got ",
             shape_str(y.sizes()));
  const Tensor scores = batched ? x : x.unsqueeze(0), classes = (batched ? y : y.unsqueeze(0)).unsqueeze(1);
  const int64_t c = scores.size(1);
  const Tensor bad = ops::logical_or(ops::lt(classes, 0), ops::ge(classes, c));
  KILN_CHECK(!ops::any(bad).item<bool>(), "multi_margin_loss: a class index is outside [0, ", c, ")");
  KILN_CHECK(!o.weight.defined() || (o.weight.dim() == 1 && o.weight.size(0) == c), "multi_margin_loss: weight ",
             "must be (C) = (", c, "), got ", o.weight.defined() ? shape_str(o.weight.sizes()) : "");
  const Tensor own = gather(scores, 1, classes);  // (N, 1): each sample's score for its class
  Tensor terms = relu(scores - own + o.margin);   // (N, C)
  if (o.p == 2) terms = terms * terms;
  if (o.weight.defined()) terms = terms * index_select(o.weight, 0, classes.reshape({-1})).unsqueeze(1);
  const Tensor others = ops::ne(one_hot(classes.squeeze(1), c), 1);  // the class's own term is not counted
  Tensor loss = where(others, terms, Scalar(0.0)).sum({1}) / static_cast<double>(c);
  return reduce_loss(batched ? loss : loss.squeeze(0), o.reduction);
}

}  // namespace kiln::nn::functional
