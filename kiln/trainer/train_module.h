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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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
  // With several evaluation loaders, the name gets "/dataloader_idx_<k>" for loader k; turn it off to log
  // one name from every loader (then averaged over all of them).
  bool add_dataloader_idx = true;
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

// One of the module's optimizers under manual optimization (TrainModule::optimizers()), as Lightning's
// LightningOptimizer: step() does what the Trainer's own step does around optimizer.step(): the strategy's
// gradients (averaged under ddp), 16-mixed's unscaling and overflow skip (then the scaler's update), the
// on_before_optimizer_step hooks, and one global_step.
class ManualOptimizer {
 public:
  using Closure = std::function<Tensor()>;
  ManualOptimizer(Trainer& trainer, std::shared_ptr<optim::Optimizer> optimizer)
      : trainer_(&trainer), optimizer_(std::move(optimizer)) {}
  void step();
  // With a closure (which zeroes the gradients, computes the loss, calls manual_backward and returns the
  // loss): LBFGS evaluates it as often as it needs; any other optimizer calls it once, then steps as step().
  // Returns the closure's first loss.
  Tensor step(const Closure& closure);
  void zero_grad(bool set_to_none = true) { optimizer_->zero_grad(set_to_none); }
  optim::Optimizer& optimizer() const { return *optimizer_; }
  optim::Optimizer* operator->() const { return optimizer_.get(); }

 private:
  Trainer* trainer_;
  std::shared_ptr<optim::Optimizer> optimizer_;
};

class TrainModule : public nn::Module, public Callback {
 public:
  explicit TrainModule(std::string type_name = "TrainModule") : nn::Module(std::move(type_name)) {}

  // One training batch: returns the loss to minimize (a scalar), or an undefined Tensor to skip the batch.
  virtual Tensor training_step(const data::Batch& batch, int64_t batch_idx) = 0;
  // One validation / test batch: log metrics; the return value goes to the batch-end hooks.
  virtual Tensor validation_step(const data::Batch& batch, int64_t batch_idx);
  virtual Tensor test_step(const data::Batch& batch, int64_t batch_idx);
  // With several validation or test loaders, the Trainer calls these with the loader's index; by default they
  // call the two-argument steps above, so a module with one loader overrides those.
  virtual Tensor validation_step(const data::Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
    return validation_step(batch, batch_idx);
  }
  virtual Tensor test_step(const data::Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
    return test_step(batch, batch_idx);
  }
  // One prediction batch; by default forward on the batch's first field.
  virtual Tensor predict_step(const data::Batch& batch, int64_t batch_idx);
  // The optimizers (and schedulers) over this module's parameters. Called once per fit, after the module is on
  // its device.
  virtual OptimizerSetup configure_optimizers() = 0;

  // Lightning's freeze / unfreeze: every parameter stops (or starts) requiring grad, and the module goes to
  // eval (or train) mode. For using a trained module for inference, or as a fixed part of another.
  void freeze() {
    requires_grad_(false);
    eval();
  }
  void unfreeze() {
    requires_grad_(true);
    train();
  }

  // Records a scalar metric (a one-element tensor, detached, or a number) under `name`.
  void log(const std::string& name, const Tensor& value, LogOptions options = {});
  void log(const std::string& name, double value, LogOptions options = {});
  // The distribution of `values` (a layer's weights, its activations) at the current global step, to the
  // loggers that draw histograms (TensorBoard); `bins` equal-width bins over the values' range. On rank 0 only
  // under ddp, and not during the sanity check, as metrics.
  void log_histogram(const std::string& tag, const Tensor& values, int64_t bins = 64);
  // An image at the current global step (data::encode_png's shapes and values; data::make_grid for a batch),
  // to the loggers that show images (TensorBoard).
  void log_image(const std::string& tag, const Tensor& image);

  // ---- manual optimization (Lightning's automatic_optimization = false) ----
  // On by default: the Trainer runs backward, clipping, the optimizers' steps and the schedulers after each
  // training_step. Turned off (in the constructor), training_step does it all with the calls below, and its
  // return value (the loss, or nothing) only goes to the batch-end hooks; gradient accumulation and
  // gradient_clip_val are then the module's business (the Trainer rejects them), and the schedulers are the
  // module's to step. global_step counts ManualOptimizer::step() calls.
  //
  //   Tensor training_step(const data::Batch& b, int64_t) override {
  //     auto opts = optimizers();
  //     opts[0].zero_grad();
  //     manual_backward(nn::F::cross_entropy(net(b[0]), b[1]));
  //     opts[0].step();
  //     return {};
  //   }
  void set_automatic_optimization(bool on) { automatic_optimization_ = on; }
  bool automatic_optimization() const { return automatic_optimization_; }
  // configure_optimizers()'s optimizers, in its order (during fit).
  std::vector<ManualOptimizer> optimizers();
  // configure_optimizers()'s schedulers, for the module to step.
  const std::vector<SchedulerConfig>& lr_schedulers() const;
  // loss.backward() as the Trainer runs it: times the loss scale under 16-mixed, through the strategy (under
  // ddp the gradients are averaged over ranks when it returns), between the backward hooks.
  void manual_backward(const Tensor& loss);
  // Clips the gradients of the optimizer's parameters (unscaled first under 16-mixed): "norm" scales them to
  // a total 2-norm of at most `max`, "value" clamps each element to [-max, max].
  void clip_gradients(const ManualOptimizer& optimizer, double max, const std::string& algorithm = "norm");
  // Only the optimizer's parameters require grad until untoggle_optimizer, which puts every parameter's
  // requires_grad back as it was: a GAN's discriminator step then computes no generator gradients.
  void toggle_optimizer(const ManualOptimizer& optimizer);
  void untoggle_optimizer();

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
  bool automatic_optimization_ = true;
  std::vector<std::pair<Tensor, bool>> toggled_;  // toggle_optimizer: each parameter and its requires_grad
};

}  // namespace kiln::trainer
