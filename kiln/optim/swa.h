// Weight averaging, as torch.optim.swa_utils: stochastic weight averaging (Izmailov et al., 2018: the equal
// mean of the weights visited late in training, with a constant or cyclic lr) and exponential moving averages
// of the weights (the "EMA model" of many recipes).
//
//   optim::AveragedWeights ema(*model, {.decay = 0.999});
//   for (...) { ...; opt.step(); ema.update(*model); }
//   ema.swap(*model);  evaluate(*model);  ema.swap(*model);  // averaged weights in, and out again
//
//   optim::AveragedWeights swa(*model);           // the equal mean of every update
//   optim::SWALR swa_lr(opt, 0.05, 5);            // anneal to a constant lr over 5 epochs
//   for (epoch ...) { train(); if (epoch >= 75) { swa.update(*model); swa_lr.step(); } }
//   swa.copy_to(*model);
//   optim::update_bn(loader, *model);             // batch-norm statistics for the averaged weights
//
// PyTorch's AveragedModel deep-copies the module; C++ cannot copy an arbitrary module, so kiln keeps the
// averaged tensors by name and copies or swaps them into any module with those names and shapes (the model
// itself, or a second instance built for evaluation).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/nn/module.h"
#include "kiln/optim/lr_scheduler.h"

namespace kiln::optim {

struct AveragedWeightsOptions {
  // Unset: each update moves the average by 1 / (updates so far), the equal mean of all of them (SWA). Set: by
  // 1 - decay, an exponential moving average (EMA). The first update copies the weights either way.
  std::optional<double> decay;
  // Average the floating buffers too (batch norm's running statistics; integer ones are copied), as PyTorch's
  // use_buffers. Off: only the parameters, and copy_to and swap leave the buffers alone (run update_bn).
  bool use_buffers = false;
};

class AveragedWeights {
 public:
  // Takes the names, shapes and current values of model's parameters (and buffers, with use_buffers).
  explicit AveragedWeights(const nn::Module& model, AveragedWeightsOptions options = {});

  // Folds model's current weights into the average, outside autograd: average += w (current - average), w
  // = 1 / (num_updates + 1) or 1 - decay. model must have the names and shapes this was built from.
  void update(const nn::Module& model);
  int64_t num_updates() const { return num_updates_; }
  const AveragedWeightsOptions& options() const { return options_; }

  // Writes the averages into model's tensors in place (their identity, and optimizers' hold on them, stays).
  void copy_to(nn::Module& model) const;
  // Exchanges the averages with model's values: the model computes with the averages and this holds its own
  // weights, until a second swap puts both back. Bit for bit.
  void swap(nn::Module& model);

  // The averages by name, for checkpoints; load takes them back (the same names and shapes).
  const nn::StateDict& averages() const { return averages_; }
  void load(const nn::StateDict& averages, int64_t num_updates);

 private:
  // model's tensors under this average's names, each checked against its average's shape.
  std::vector<std::pair<Tensor, Tensor>> pairs(const nn::Module& model, const char* op) const;

  AveragedWeightsOptions options_;
  nn::StateDict averages_;
  int64_t num_updates_ = 0;
};

// The lr schedule of SWA, as torch.optim.swa_utils.SWALR: from the lr each group holds when its steps begin to
// swa_lr over anneal_epochs steps (cosine or linear), then constant. Each step works from the group's current
// lr, as PyTorch's does, so another scheduler may run before it (the usual recipe: cosine decay until the SWA
// epochs, then SWALR). One swa_lr for every group, or one per group.
class SWALR : public LRScheduler {
 public:
  SWALR(Optimizer& optimizer, std::vector<double> swa_lrs, int64_t anneal_epochs = 10,
        const std::string& anneal_strategy = "cos");
  SWALR(Optimizer& optimizer, double swa_lr, int64_t anneal_epochs = 10, const std::string& anneal_strategy = "cos")
      : SWALR(optimizer, std::vector<double>{swa_lr}, anneal_epochs, anneal_strategy) {}
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "SWALR"; }

 private:
  double anneal(double t) const;  // the share of swa_lr at progress t in [0, 1]

  std::vector<double> swa_lrs_;
  int64_t anneal_epochs_;
  bool cosine_;
};

// Recomputes the running mean and variance of every batch norm in model as the plain mean over one pass of
// loader (each batch's first tensor the input, moved to `device` when given), as torch.optim.swa_utils.update_bn:
// averaged weights never produced the statistics the running ones hold. The momenta are restored after, and
// the model's training mode by train(was_training) on the whole tree, as PyTorch does (a submodule kept in eval
// before comes out in the model's mode). Nothing is done without batch norms.
void update_bn(data::DataLoader& loader, nn::Module& model, std::optional<Device> device = std::nullopt);

}  // namespace kiln::optim
