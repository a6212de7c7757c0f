// TrainModule: the user's model together with how to train it, shaped like Lightning's LightningModule.
//
//   struct Classifier : trainer::TrainModule {
//     nn::Sequential net = ...;
//     Classifier() { register_module("net", net); }
//     Tensor training_step(const data::Batch& b, int64_t) override {
//       Tensor loss = nn::F::cross_entropy(net(b[0]), b[1]);
//       log("train/loss", loss, {.prog_bar = true});
//       return loss;
//     }
//     Tensor validation_step(const data::Batch& b, int64_t) override {
//       Tensor logits = net(b[0]);
//       log("val/acc", (argmax(logits, 1) == b[1]).to(kFloat32).mean());
//       return {};
//     }
//     trainer::OptimizerSetup configure_optimizers() override {
//       return std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 1e-3});
//     }
//   };
//
// It is an nn::Module (register layers as in any module; the same object trains in a plain loop too) and a
// Callback (override any hook; the module's run before the callbacks'). The Trainer moves it to the device,
// sets train/eval mode, runs backward and the optimizers: the steps only compute and log.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/nn/module.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/trainer/callback.h"

namespace kiln::trainer {

// How a logged value is reported. The defaults follow where log() is called: in training_step a value is
// reported every step (on_step) and not averaged per epoch; in validation and test steps and in hooks it is
// averaged over the epoch (on_epoch), weighted by batch size. When both are on, the names get "_step" and
// "_epoch" suffixes, as in Lightning.
struct LogOptions {
  std::optional<bool> on_step = std::nullopt;
  std::optional<bool> on_epoch = std::nullopt;
  bool prog_bar = false;  // show it in the progress bar
  bool logger = true;     // send it to the loggers (it is in callback_metrics either way)
};

// One learning-rate scheduler and when to step it.
struct SchedulerConfig {
  // Exactly one of the two.
  std::shared_ptr<optim::LRScheduler> scheduler;
  std::shared_ptr<optim::ReduceLROnPlateau> plateau;
  std::string interval = "epoch";    // "epoch": after each training epoch; "step": after each optimizer step
  int64_t frequency = 1;             // every this many epochs or steps
  std::string monitor = "val/loss";  // the metric ReduceLROnPlateau watches
};

// What configure_optimizers returns: one or more optimizers (all step together, in order) and schedulers.
struct OptimizerSetup {
  std::vector<std::shared_ptr<optim::Optimizer>> optimizers;
  std::vector<SchedulerConfig> schedulers;

  OptimizerSetup() = default;
  template <class O>
  OptimizerSetup(std::shared_ptr<O> optimizer) : optimizers{std::move(optimizer)} {}  // NOLINT: implicit
  OptimizerSetup(std::vector<std::shared_ptr<optim::Optimizer>> opts, std::vector<SchedulerConfig> scheds = {})
      : optimizers(std::move(opts)), schedulers(std::move(scheds)) {}
};

class TrainModule : public nn::Module, public Callback {
 public:
  explicit TrainModule(std::string type_name = "TrainModule") : nn::Module(std::move(type_name)) {}

  // One training batch: returns the loss to minimize (a scalar), or an undefined Tensor to skip the batch.
  virtual Tensor training_step(const data::Batch& batch, int64_t batch_idx) = 0;
  // One validation / test batch: log metrics; the return value goes to the batch-end hooks.
  virtual Tensor validation_step(const data::Batch& batch, int64_t batch_idx);
  virtual Tensor test_step(const data::Batch& batch, int64_t batch_idx);
  // One prediction batch; by default forward on the batch's first field.
  virtual Tensor predict_step(const data::Batch& batch, int64_t batch_idx);
  // The optimizers (and schedulers) over this module's parameters. Called once per fit, after the module is on
  // its device.
  virtual OptimizerSetup configure_optimizers() = 0;

  // Records a scalar metric (a one-element tensor, detached, or a number) under `name`.
  void log(const std::string& name, const Tensor& value, LogOptions options = {});
  void log(const std::string& name, double value, LogOptions options = {});

  // Hyperparameters: written to the loggers and into checkpoints.
  void save_hyperparameters(std::map<std::string, std::string> hparams) { hparams_ = std::move(hparams); }
  const std::map<std::string, std::string>& hparams() const { return hparams_; }

  // The trainer running this module (a kiln::Error outside fit/validate/test/predict).
  Trainer& trainer() const;
  bool has_trainer() const { return trainer_ != nullptr; }

  std::string state_key() const override { return "module"; }

 private:
  friend class Trainer;
  Trainer* trainer_ = nullptr;
  std::map<std::string, std::string> hparams_;
};

}  // namespace kiln::trainer
