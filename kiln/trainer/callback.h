// Callback: a class of no-op virtual hooks that the Trainer calls at fixed points of a run. Override the ones
// you need; every hook gets the trainer (progress, metrics, should_stop) and the module being trained.
//
// The order of one fit, as the Trainer calls them (docs/trainer.md has the full list):
//   setup(fit) -> on_fit_start -> [on_sanity_check_start -> validation ... -> on_sanity_check_end]
//   -> on_train_start -> per epoch: on_train_epoch_start -> per batch: on_train_batch_start ->
//      (training_step) -> on_before_backward -> (backward) -> on_after_backward -> [on optimizer steps:
//      on_before_optimizer_step -> (clip, step) -> on_before_zero_grad -> (zero_grad)] -> on_train_batch_end
//      -> [validation: on_validation_start -> on_validation_epoch_start -> per batch ... ->
//      on_validation_epoch_end -> on_validation_end] -> on_train_epoch_end
//   -> on_train_end -> on_fit_end -> teardown(fit)
// A TrainModule is itself a Callback: its hooks run first at each point, then each callback's in the order they
// were given, so callbacks see what the module logged.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/optim/optimizer.h"
#include "kiln/tensor/tensor.h"

namespace kiln::trainer {

class Trainer;
class TrainModule;
struct Checkpoint;

// What a run is doing: the argument of setup and teardown, and Trainer::stage().
enum class Stage { Fit, Validate, Test, Predict };
const char* stage_name(Stage stage);  // "fit", "validate", "test", "predict"

// A callback's own state in a checkpoint: text values under names it chooses.
using CallbackState = std::map<std::string, std::string>;
// A double as CallbackState text that std::strtod reads back bit for bit ("%.17g").
std::string exact_text(double value);

class Callback {
 public:
  virtual ~Callback() = default;

  // The name this callback's state is kept under in checkpoints. Two callbacks of one kind in one run must
  // return different keys (ModelCheckpoint puts its monitor in it).
  virtual std::string state_key() const { return "Callback"; }
  // State to keep in checkpoints, and its restoration when a run resumes. (Not named state_dict: a TrainModule
  // is a Callback and an nn::Module, whose state_dict() is its weights.)
  virtual CallbackState checkpoint_state() const { return {}; }
  virtual void load_checkpoint_state(const CallbackState& state) {}

  // Called when fit, validate, test or predict begins, before anything else, and when it ends, after all else.
  virtual void setup(Trainer& trainer, TrainModule& module, Stage stage) {}
  virtual void teardown(Trainer& trainer, TrainModule& module, Stage stage) {}

  // fit() begins (after setup and loading a checkpoint) and ends.
  virtual void on_fit_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_fit_end(Trainer& trainer, TrainModule& module) {}
  // The few validation batches run before training, to catch bugs in validation_step early.
  virtual void on_sanity_check_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_sanity_check_end(Trainer& trainer, TrainModule& module) {}

  // The training loop begins and ends (inside fit).
  virtual void on_train_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_train_end(Trainer& trainer, TrainModule& module) {}
  // A training epoch begins; ends after its validation, when epoch-level metrics are known.
  virtual void on_train_epoch_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_train_epoch_end(Trainer& trainer, TrainModule& module) {}
  // Around one training batch; `loss` is what training_step returned (undefined if it returned none).
  virtual void on_train_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                                    int64_t batch_idx) {}
  virtual void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss,
                                  const data::Batch& batch, int64_t batch_idx) {}

  // A validation run (inside fit, or validate()); its epoch; one batch.
  virtual void on_validation_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_validation_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_validation_epoch_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_validation_epoch_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_validation_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                                         int64_t batch_idx) {}
  virtual void on_validation_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                                       const data::Batch& batch, int64_t batch_idx) {}

  // test(): the run, its epoch, one batch.
  virtual void on_test_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_test_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_test_epoch_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_test_epoch_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_test_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                                   int64_t batch_idx) {}
  virtual void on_test_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                                 const data::Batch& batch, int64_t batch_idx) {}

  // predict(): the run, its epoch, one batch (`output` is what predict_step returned).
  virtual void on_predict_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_predict_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_predict_epoch_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_predict_epoch_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_predict_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                                      int64_t batch_idx) {}
  virtual void on_predict_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                                    const data::Batch& batch, int64_t batch_idx) {}

  // Just before loss.backward() (the loss already divided by accumulate_grad_batches), and just after.
  virtual void on_before_backward(Trainer& trainer, TrainModule& module, const Tensor& loss) {}
  virtual void on_after_backward(Trainer& trainer, TrainModule& module) {}
  // Before an optimizer's step, before gradient clipping: grads are final (accumulated, unclipped).
  virtual void on_before_optimizer_step(Trainer& trainer, TrainModule& module, optim::Optimizer& optimizer) {}
  // After the step, before the grads are cleared.
  virtual void on_before_zero_grad(Trainer& trainer, TrainModule& module, optim::Optimizer& optimizer) {}

  // A checkpoint is being written (add entries to it) or has been read to resume (read them back). The
  // callback's checkpoint_state() is stored and restored by the Trainer without help from these.
  virtual void on_save_checkpoint(Trainer& trainer, TrainModule& module, Checkpoint& checkpoint) {}
  virtual void on_load_checkpoint(Trainer& trainer, TrainModule& module, const Checkpoint& checkpoint) {}

  // A hook, a step or the loop threw: called with the error before the Trainer rethrows it.
  virtual void on_exception(Trainer& trainer, TrainModule& module, const std::exception& error) {}
};

}  // namespace kiln::trainer
