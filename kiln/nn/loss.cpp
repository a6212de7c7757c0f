#include "kiln/nn/loss.h"

namespace kiln::nn {

std::string reduction_name(functional::Reduction reduction) {
  switch (reduction) {
    case functional::Reduction::None: return "none";
    case functional::Reduction::Mean: return "mean";
    case functional::Reduction::Sum: return "sum";
  }
  return "?";
}

namespace {

// Registers a defined weight as a persistent buffer and returns the buffer's handle (which to() moves in
// place, so the options keep pointing at it).
Tensor weight_buffer(Module& m, const std::string& name, const Tensor& weight) {
  if (!weight.defined()) return weight;
  return m.register_buffer(name, weight.detach());
}

// The printed options of the losses that take a margin and a reduction.
std::string margin_repr(double margin, functional::Reduction reduction) {
  return detail::concat("margin=", margin, ", reduction=", reduction_name(reduction));
}

void check_class_weight(const Tensor& weight, const char* loss) {
  KILN_CHECK(!weight.defined() || weight.dim() == 1, loss, ": weight must be a 1-D tensor of one weight per class, ",
             "got shape ", shape_str(weight.shape()));
}

}  // namespace

SmoothL1LossImpl::SmoothL1LossImpl(SmoothL1LossOptions options) : Module("SmoothL1Loss"), options_(options) {
  KILN_CHECK(options.beta >= 0, "SmoothL1Loss: beta = ", options.beta, ": expected >= 0");
}

std::string SmoothL1LossImpl::extra_repr() const {
  return detail::concat("beta=", options_.beta, ", reduction=", reduction_name(options_.reduction));
}

HuberLossImpl::HuberLossImpl(HuberLossOptions options) : Module("HuberLoss"), options_(options) {
  KILN_CHECK(options.delta > 0, "HuberLoss: delta = ", options.delta, ": expected > 0");
}

std::string HuberLossImpl::extra_repr() const {
  return detail::concat("delta=", options_.delta, ", reduction=", reduction_name(options_.reduction));
}

CrossEntropyLossImpl::CrossEntropyLossImpl(functional::CrossEntropyOptions options)
    : Module("CrossEntropyLoss"), options_(std::move(options)) {
  check_class_weight(options_.weight, "CrossEntropyLoss");
  KILN_CHECK(options_.label_smoothing >= 0 && options_.label_smoothing <= 1, "CrossEntropyLoss: label_smoothing = ",
             options_.label_smoothing, ": expected a value in [0, 1]");
  options_.weight = weight_buffer(*this, "weight", options_.weight);
}

std::string CrossEntropyLossImpl::extra_repr() const {
  return detail::concat("ignore_index=", options_.ignore_index, ", label_smoothing=", options_.label_smoothing,
                        ", reduction=", reduction_name(options_.reduction));
}

NLLLossImpl::NLLLossImpl(functional::NllLossOptions options) : Module("NLLLoss"), options_(std::move(options)) {
  check_class_weight(options_.weight, "NLLLoss");
  options_.weight = weight_buffer(*this, "weight", options_.weight);
}

std::string NLLLossImpl::extra_repr() const {
  return detail::concat("ignore_index=", options_.ignore_index, ", reduction=", reduction_name(options_.reduction));
}

BCELossImpl::BCELossImpl(BCELossOptions options) : Module("BCELoss"), options_(std::move(options)) {
  options_.weight = weight_buffer(*this, "weight", options_.weight);
}

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(BCEWithLogitsLossOptions options)
    : Module("BCEWithLogitsLoss"), options_(std::move(options)) {
  options_.weight = weight_buffer(*this, "weight", options_.weight);
  options_.pos_weight = weight_buffer(*this, "pos_weight", options_.pos_weight);
}

KLDivLossImpl::KLDivLossImpl(KLDivLossOptions options) : Module("KLDivLoss"), options_(options) {
  KILN_CHECK(!options.batchmean || options.reduction == functional::Reduction::Mean,
             "KLDivLoss: batchmean = true divides the mean's sum by the batch size, so it needs reduction Mean; ",
             "got ", reduction_name(options.reduction));
}

std::string KLDivLossImpl::extra_repr() const {
  return detail::concat("reduction=", options_.batchmean ? "batchmean" : reduction_name(options_.reduction),
                        ", log_target=", options_.log_target ? "true" : "false");
}

std::string MarginRankingLossImpl::extra_repr() const { return margin_repr(options_.margin, options_.reduction); }

std::string HingeEmbeddingLossImpl::extra_repr() const { return margin_repr(options_.margin, options_.reduction); }

CosineEmbeddingLossImpl::CosineEmbeddingLossImpl(Options options) : Module("CosineEmbeddingLoss"), options_(options) {
  KILN_CHECK(options.margin >= -1 && options.margin <= 1, "CosineEmbeddingLoss: margin = ", options.margin,
             ": expected a value in [-1, 1]");
}

std::string CosineEmbeddingLossImpl::extra_repr() const { return margin_repr(options_.margin, options_.reduction); }

TripletMarginLossImpl::TripletMarginLossImpl(Options options) : Module("TripletMarginLoss"), options_(options) {
  KILN_CHECK(options.margin > 0, "TripletMarginLoss: margin = ", options.margin, ": expected > 0");
}

std::string TripletMarginLossImpl::extra_repr() const {
  return detail::concat("margin=", options_.margin, ", p=", options_.p, ", eps=", options_.eps,
                        ", swap=", options_.swap ? "true" : "false", ", reduction=", reduction_name(options_.reduction));
}

std::string PoissonNLLLossImpl::extra_repr() const {
  return detail::concat("log_input=", options_.log_input ? "true" : "false", ", full=", options_.full ? "true" : "false",
                        ", eps=", options_.eps, ", reduction=", reduction_name(options_.reduction));
}

std::string GaussianNLLLossImpl::extra_repr() const {
  return detail::concat("full=", options_.full ? "true" : "false", ", eps=", options_.eps,
                        ", reduction=", reduction_name(options_.reduction));
}

MultiLabelSoftMarginLossImpl::MultiLabelSoftMarginLossImpl(Options options)
    : Module("MultiLabelSoftMarginLoss"), options_(std::move(options)) {
  check_class_weight(options_.weight, "MultiLabelSoftMarginLoss");
  options_.weight = weight_buffer(*this, "weight", options_.weight);
}

MultiMarginLossImpl::MultiMarginLossImpl(Options options) : Module("MultiMarginLoss"), options_(std::move(options)) {
  KILN_CHECK(options_.p == 1 || options_.p == 2, "MultiMarginLoss: p = ", options_.p, ": expected 1 or 2");
  check_class_weight(options_.weight, "MultiMarginLoss");
  options_.weight = weight_buffer(*this, "weight", options_.weight);
}

std::string MultiMarginLossImpl::extra_repr() const {
  return detail::concat("p=", options_.p, ", margin=", options_.margin, ", reduction=", reduction_name(options_.reduction));
}

std::string CTCLossImpl::extra_repr() const {
  return detail::concat("blank=", options_.blank, ", reduction=", reduction_name(options_.reduction),
                        ", zero_infinity=", options_.zero_infinity ? "true" : "false");
}

}  // namespace kiln::nn
