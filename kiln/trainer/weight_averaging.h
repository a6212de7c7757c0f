// WeightAveraging: an average of the module's weights kept during fit (an exponential moving average after
// every optimizer step, or stochastic weight averaging's equal mean at the end of each epoch), validated with,
// and left in the module when fit ends, as Lightning's WeightAveraging callback. (Lightning's averages after
// every step by default; here that is the EMA mode, and SWA takes the weights at each epoch's end, as its
// StochasticWeightAveraging callback does.)
//
//   o.callbacks = {std::make_shared<WeightAveraging>(WeightAveragingOptions{.decay = 0.999}),
//                  std::make_shared<ModelCheckpoint>(...)};
//
// - Validation inside fit runs with the averaged weights (swapped in, and out again after), so monitored
//   metrics and the checkpoints ModelCheckpoint keeps are the averaged model's.
// - A checkpoint holds the averaged weights as the model's (what `kiln eval` and `kiln export` read) and the
//   trained ones, with the update count, under this callback's entries; resuming puts the trained ones back,
//   so a resumed run goes on bit for bit, and a resume with other settings is refused. The Trainer runs
//   checkpoint callbacks after all others, so a checkpoint holds this callback's update of its step or epoch
//   whatever the order they were listed in.
// - Batch norm: use_buffers (the default here, as Lightning's EMA) averages the running statistics too; without
//   it, run optim::update_bn after fit.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kiln/optim/swa.h"
#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct WeightAveragingOptions {
  // Set: an exponential moving average with this decay, updated after every optimizer step. Unset: the equal
  // mean of the weights at the end of each epoch (SWA).
  std::optional<double> decay;
  // Updates begin at this epoch (counted from 0): SWA averages the late weights, after the lr has settled.
  int64_t start_epoch = 0;
  bool use_buffers = true;
};

class WeightAveraging : public Callback {
 public:
  explicit WeightAveraging(WeightAveragingOptions options = {});

  const WeightAveragingOptions& options() const { return options_; }
  // The average (null before fit's setup).
  const optim::AveragedWeights* average() const { return average_.get(); }

  std::string state_key() const override { return "WeightAveraging"; }
  CallbackState checkpoint_state() const override;
  void load_checkpoint_state(const CallbackState& state) override;

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const data::Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_start(Trainer& trainer, TrainModule& module) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_train_end(Trainer& trainer, TrainModule& module) override;
  void on_save_checkpoint(Trainer& trainer, TrainModule& module, Checkpoint& checkpoint) override;
  void on_load_checkpoint(Trainer& trainer, TrainModule& module, const Checkpoint& checkpoint) override;
  void on_exception(Trainer& trainer, TrainModule& module, const std::exception& error) override;

 private:
  void update(Trainer& trainer, TrainModule& module);
  std::string settings() const;

  WeightAveragingOptions options_;
  std::unique_ptr<optim::AveragedWeights> average_;
  int64_t loaded_updates_ = 0;  // from load_checkpoint_state, applied in on_load_checkpoint
  bool swapped_ = false;        // the module holds the averages, average_ its trained weights
  int64_t steps_seen_ = 0;      // the global step of the last EMA update (or of the run's start)
};

}  // namespace kiln::trainer
