// Loss modules: each holds one of nn::functional's losses with its options, as PyTorch's nn.*Loss do.
//
//   nn::CrossEntropyLoss criterion(nn::F::CrossEntropyOptions{.label_smoothing = 0.1});
//   Tensor loss = criterion(model(x), y);      // forward(input, target)
//
// A loss's weight tensors (CrossEntropyLoss's and NLLLoss's class weights, BCE's weight and pos_weight) are
// persistent buffers under PyTorch's names, so they move with to(), show in state_dict and load from it. The
// two-argument call runs forward directly: forward hooks, which see one input, do not run for losses.
#pragma once

#include <string>

#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// "none", "mean" or "sum", as PyTorch spells the reduction.
std::string reduction_name(functional::Reduction reduction);

class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(functional::Reduction reduction = functional::Reduction::Mean)
      : Module("MSELoss"), reduction_(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::mse_loss(input, target, reduction_);
  }
  std::string extra_repr() const override { return "reduction=" + reduction_name(reduction_); }

 private:
  functional::Reduction reduction_;
};
using MSELoss = ModuleHolder<MSELossImpl>;

class L1LossImpl : public Module {
 public:
  explicit L1LossImpl(functional::Reduction reduction = functional::Reduction::Mean)
      : Module("L1Loss"), reduction_(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::l1_loss(input, target, reduction_);
  }
  std::string extra_repr() const override { return "reduction=" + reduction_name(reduction_); }

 private:
  functional::Reduction reduction_;
};
using L1Loss = ModuleHolder<L1LossImpl>;

struct SmoothL1LossOptions {
  functional::Reduction reduction = functional::Reduction::Mean;
  double beta = 1.0;  // >= 0; where the quadratic part ends
};
class SmoothL1LossImpl : public Module {
 public:
  using Options = SmoothL1LossOptions;  // ModuleHolder takes it as a braced list
  explicit SmoothL1LossImpl(SmoothL1LossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::smooth_l1_loss(input, target, options_.reduction, options_.beta);
  }
  std::string extra_repr() const override;

 private:
  SmoothL1LossOptions options_;
};
using SmoothL1Loss = ModuleHolder<SmoothL1LossImpl>;

struct HuberLossOptions {
  functional::Reduction reduction = functional::Reduction::Mean;
  double delta = 1.0;  // > 0
};
class HuberLossImpl : public Module {
 public:
  using Options = HuberLossOptions;  // ModuleHolder takes it as a braced list
  explicit HuberLossImpl(HuberLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::huber_loss(input, target, options_.reduction, options_.delta);
  }
  std::string extra_repr() const override;

 private:
  HuberLossOptions options_;
};
using HuberLoss = ModuleHolder<HuberLossImpl>;

// Options as functional::cross_entropy's; a defined weight becomes the buffer "weight".
class CrossEntropyLossImpl : public Module {
 public:
  using Options = functional::CrossEntropyOptions;  // ModuleHolder takes it as a braced list
  explicit CrossEntropyLossImpl(functional::CrossEntropyOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::cross_entropy(input, target, options_);
  }
  std::string extra_repr() const override;
  const functional::CrossEntropyOptions& options() const { return options_; }

 private:
  functional::CrossEntropyOptions options_;  // its weight is the buffer's handle
};
using CrossEntropyLoss = ModuleHolder<CrossEntropyLossImpl>;

class NLLLossImpl : public Module {
 public:
  using Options = functional::NllLossOptions;  // ModuleHolder takes it as a braced list
  explicit NLLLossImpl(functional::NllLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::nll_loss(input, target, options_);
  }
  std::string extra_repr() const override;

 private:
  functional::NllLossOptions options_;
};
using NLLLoss = ModuleHolder<NLLLossImpl>;

struct BCELossOptions {
  Tensor weight;  // broadcast against the loss of each element, or undefined
  functional::Reduction reduction = functional::Reduction::Mean;
};
// input: probabilities in [0, 1].
class BCELossImpl : public Module {
 public:
  using Options = BCELossOptions;  // ModuleHolder takes it as a braced list
  explicit BCELossImpl(BCELossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::binary_cross_entropy(input, target, options_.weight, options_.reduction);
  }
  std::string extra_repr() const override { return "reduction=" + reduction_name(options_.reduction); }

 private:
  BCELossOptions options_;
};
using BCELoss = ModuleHolder<BCELossImpl>;

struct BCEWithLogitsLossOptions {
  Tensor weight;      // as BCELoss's
  Tensor pos_weight;  // (C): the positive examples' weight per class, or undefined
  functional::Reduction reduction = functional::Reduction::Mean;
};
// input: logits (BCELoss after a sigmoid, computed stably).
class BCEWithLogitsLossImpl : public Module {
 public:
  using Options = BCEWithLogitsLossOptions;  // ModuleHolder takes it as a braced list
  explicit BCEWithLogitsLossImpl(BCEWithLogitsLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::binary_cross_entropy_with_logits(input, target, options_.weight, options_.pos_weight,
                                                        options_.reduction);
  }
  std::string extra_repr() const override { return "reduction=" + reduction_name(options_.reduction); }

 private:
  BCEWithLogitsLossOptions options_;
};
using BCEWithLogitsLoss = ModuleHolder<BCEWithLogitsLossImpl>;

struct KLDivLossOptions {
  functional::Reduction reduction = functional::Reduction::Mean;
  bool batchmean = false;   // with Mean: divide by the batch size (PyTorch's reduction="batchmean")
  bool log_target = false;  // the target holds log-probabilities
};
// input: log-probabilities; target: probabilities (log-probabilities with log_target).
class KLDivLossImpl : public Module {
 public:
  using Options = KLDivLossOptions;  // ModuleHolder takes it as a braced list
  explicit KLDivLossImpl(KLDivLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::kl_div(input, target, options_.reduction, options_.log_target, options_.batchmean);
  }
  std::string extra_repr() const override;

 private:
  KLDivLossOptions options_;
};
using KLDivLoss = ModuleHolder<KLDivLossImpl>;

// ---- the margin, embedding and likelihood losses (functional's of the same names) ----

struct MarginRankingLossOptions {
  double margin = 0.0;
  functional::Reduction reduction = functional::Reduction::Mean;
};
// Called with (x1, x2, y): y = 1 ranks x1 above x2, y = -1 below.
class MarginRankingLossImpl : public Module {
 public:
  using Options = MarginRankingLossOptions;  // ModuleHolder takes it as a braced list
  explicit MarginRankingLossImpl(Options options = {}) : Module("MarginRankingLoss"), options_(options) {}
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& y) const {
    return functional::margin_ranking_loss(x1, x2, y, options_.margin, options_.reduction);
  }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using MarginRankingLoss = ModuleHolder<MarginRankingLossImpl>;

struct HingeEmbeddingLossOptions {
  double margin = 1.0;
  functional::Reduction reduction = functional::Reduction::Mean;
};
class HingeEmbeddingLossImpl : public Module {
 public:
  using Options = HingeEmbeddingLossOptions;  // ModuleHolder takes it as a braced list
  explicit HingeEmbeddingLossImpl(Options options = {}) : Module("HingeEmbeddingLoss"), options_(options) {}
  Tensor forward(const Tensor& x, const Tensor& y) const {
    return functional::hinge_embedding_loss(x, y, options_.margin, options_.reduction);
  }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using HingeEmbeddingLoss = ModuleHolder<HingeEmbeddingLossImpl>;

class SoftMarginLossImpl : public Module {
 public:
  explicit SoftMarginLossImpl(functional::Reduction reduction = functional::Reduction::Mean)
      : Module("SoftMarginLoss"), reduction_(reduction) {}
  Tensor forward(const Tensor& x, const Tensor& y) const { return functional::soft_margin_loss(x, y, reduction_); }
  std::string extra_repr() const override { return "reduction=" + reduction_name(reduction_); }

 private:
  functional::Reduction reduction_;
};
using SoftMarginLoss = ModuleHolder<SoftMarginLossImpl>;

struct CosineEmbeddingLossOptions {
  double margin = 0.0;  // in [-1, 1]
  functional::Reduction reduction = functional::Reduction::Mean;
};
// Called with (x1, x2, y).
class CosineEmbeddingLossImpl : public Module {
 public:
  using Options = CosineEmbeddingLossOptions;  // ModuleHolder takes it as a braced list
  explicit CosineEmbeddingLossImpl(Options options = {});
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& y) const {
    return functional::cosine_embedding_loss(x1, x2, y, options_.margin, options_.reduction);
  }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using CosineEmbeddingLoss = ModuleHolder<CosineEmbeddingLossImpl>;

// Called with (anchor, positive, negative).
class TripletMarginLossImpl : public Module {
 public:
  using Options = functional::TripletMarginOptions;  // ModuleHolder takes it as a braced list
  explicit TripletMarginLossImpl(Options options = {});
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) const {
    return functional::triplet_margin_loss(anchor, positive, negative, options_);
  }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using TripletMarginLoss = ModuleHolder<TripletMarginLossImpl>;

class PoissonNLLLossImpl : public Module {
 public:
  using Options = functional::PoissonNLLOptions;  // ModuleHolder takes it as a braced list
  explicit PoissonNLLLossImpl(Options options = {}) : Module("PoissonNLLLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return functional::poisson_nll_loss(input, target, options_);
  }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using PoissonNLLLoss = ModuleHolder<PoissonNLLLossImpl>;

// Called with (input, target, var).
class GaussianNLLLossImpl : public Module {
 public:
  using Options = functional::GaussianNLLOptions;  // ModuleHolder takes it as a braced list
  explicit GaussianNLLLossImpl(Options options = {}) : Module("GaussianNLLLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target, const Tensor& var) const {
    return functional::gaussian_nll_loss(input, target, var, options_);
  }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using GaussianNLLLoss = ModuleHolder<GaussianNLLLossImpl>;

struct MultiLabelSoftMarginLossOptions {
  Tensor weight;  // (C), the buffer "weight", or undefined
  functional::Reduction reduction = functional::Reduction::Mean;
};
class MultiLabelSoftMarginLossImpl : public Module {
 public:
  using Options = MultiLabelSoftMarginLossOptions;  // ModuleHolder takes it as a braced list
  explicit MultiLabelSoftMarginLossImpl(Options options = {});
  Tensor forward(const Tensor& x, const Tensor& y) const {
    return functional::multilabel_soft_margin_loss(x, y, options_.weight, options_.reduction);
  }
  std::string extra_repr() const override { return "reduction=" + reduction_name(options_.reduction); }

 private:
  Options options_;
};
using MultiLabelSoftMarginLoss = ModuleHolder<MultiLabelSoftMarginLossImpl>;

// Its weight is the buffer "weight".
class MultiMarginLossImpl : public Module {
 public:
  using Options = functional::MultiMarginOptions;  // ModuleHolder takes it as a braced list
  explicit MultiMarginLossImpl(Options options = {});
  Tensor forward(const Tensor& x, const Tensor& y) const { return functional::multi_margin_loss(x, y, options_); }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using MultiMarginLoss = ModuleHolder<MultiMarginLossImpl>;

// Called with log_probs, targets, input_lengths and target_lengths (functional::ctc_loss), the lengths as
// tensors or as lists.
class CTCLossImpl : public Module {
 public:
  using Options = functional::CTCLossOptions;  // ModuleHolder takes it as a braced list
  explicit CTCLossImpl(Options options = {}) : Module("CTCLoss"), options_(options) {}
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths) const {
    return functional::ctc_loss(log_probs, targets, input_lengths, target_lengths, options_);
  }
  Tensor forward(const Tensor& log_probs, const Tensor& targets, IntArrayRef input_lengths,
                 IntArrayRef target_lengths) const {
    return functional::ctc_loss(log_probs, targets, input_lengths, target_lengths, options_);
  }
  std::string extra_repr() const override;

 private:
  Options options_;
};
using CTCLoss = ModuleHolder<CTCLossImpl>;

}  // namespace kiln::nn
