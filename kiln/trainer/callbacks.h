// The built-in callbacks, as PyTorch Lightning users know them: ModelCheckpoint, EarlyStopping, ProgressBar,
// ModelSummary, WeightAveraging, BackboneFinetuning, ThroughputMonitor, the prediction writers and
// LambdaCallback (each in its own header, included here), LearningRateMonitor, GradientAccumulationScheduler,
// OnExceptionCheckpoint and Timer (small enough to live here), and add_default_callbacks, which the Trainer
// calls to add the ones its options ask for.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/trainer/callback.h"
#include "kiln/trainer/device_stats_monitor.h"
#include "kiln/trainer/early_stopping.h"
#include "kiln/trainer/finetuning.h"
#include "kiln/trainer/lambda_callback.h"
#include "kiln/trainer/model_checkpoint.h"
#include "kiln/trainer/model_summary.h"
#include "kiln/trainer/prediction_writer.h"
#include "kiln/trainer/progress_bar.h"
#include "kiln/trainer/throughput_monitor.h"
#include "kiln/trainer/weight_averaging.h"

namespace kiln::trainer {

struct TrainerOptions;

// Adds the callbacks the options ask for and the user did not give (ModelCheckpoint, ProgressBar, ModelSummary).
// A ModelCheckpoint or ProgressBar given while its enable_ option is false is an error: the two disagree.
void add_default_callbacks(const TrainerOptions& options, std::vector<std::shared_ptr<Callback>>& callbacks);

// LearningRateMonitor: sends each optimizer's learning rate to the trainer's loggers, at the global step, as
// "lr-<Optimizer>" ("lr-SGD"): "/pg1", "/pg2", ... per parameter group when there are several, and "-1", "-2"
// for the second and later optimizers of one kind ("lr-Adam", "lr-Adam-1"), as Lightning names them.
// logging_interval "epoch": at each training epoch's start; "step": at the start of every log_every_n_steps-th
// step; "" (Lightning's None): each optimizer as its scheduler steps ("step" schedulers per step, else per
// epoch). The values sent last stay readable in last_values(); without loggers that is all it does.
struct LearningRateMonitorOptions {
  std::string logging_interval;  // "", "epoch" or "step"
  bool log_momentum = false;      // also "momentum-<Optimizer>": momentum, or Adam's beta1
  bool log_weight_decay = false;  // also "weight_decay-<Optimizer>"
};

class LearningRateMonitor : public Callback {
 public:
  explicit LearningRateMonitor(LearningRateMonitorOptions options = {});
  std::string state_key() const override { return "LearningRateMonitor"; }
  const std::map<std::string, double>& last_values() const { return last_values_; }

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                            int64_t batch_idx) override;

 private:
  // Logs the optimizers whose interval is `interval`.
  void log(Trainer& trainer, const std::string& interval);
  LearningRateMonitorOptions options_;
  std::map<std::string, double> last_values_;
  int64_t last_step_logged_ = -1;  // the steps of one accumulation window share a global step: log it once
};

// Lightning's GradientAccumulationScheduler: accumulate_grad_batches by epoch, from a map of first epochs to
// factors (std::map<int64_t, int64_t>{{0, 8}, {4, 4}, {8, 1}}: 8 backward passes a step in epochs 0-3, 4 in
// 4-7, then 1). Epochs before the first key accumulate 1. It sets the Trainer's factor at each epoch's start,
// so TrainerOptions::accumulate_grad_batches must stay 1; a resume picks the epoch's factor up again.
// Trainer::estimated_stepping_batches counts each epoch's steps with its factor.
class GradientAccumulationScheduler : public Callback {
 public:
  explicit GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling);
  std::string state_key() const override { return "GradientAccumulationScheduler"; }
  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  // The factor of `epoch`.
  int64_t factor(int64_t epoch) const;
  const std::map<int64_t, int64_t>& scheduling() const { return scheduling_; }

 private:
  std::map<int64_t, int64_t> scheduling_;
};

// Lightning's OnExceptionCheckpoint: when fit() fails, writes a checkpoint of the moment to
// <dirpath>/<filename>.ckpt (dirpath "": the run folder's checkpoints/, where ModelCheckpoint writes).
// After an Interrupted (TrainerOptions::handle_signals) that moment is an optimizer-step boundary and the
// checkpoint resumes exactly. After any other error it holds the state as the error left it: the last step's
// weights when a forward or backward failed (an error inside an optimizer's step can leave them half
// updated); in the middle of a gradient-accumulation window nothing is saved, since a checkpoint cannot hold
// unstepped gradients. On several processes only an interrupt (which every rank meets at the same batch) is
// saved: after another error the other ranks may never come to write it with this one. Nothing is saved under
// fast_dev_run, during the sanity validation, or before configure_optimizers ran. What it did not save and
// why goes to stderr; the error itself always propagates.
struct OnExceptionCheckpointOptions {
  std::string dirpath;
  std::string filename = "on_exception";
};

class OnExceptionCheckpoint : public Callback {
 public:
  explicit OnExceptionCheckpoint(OnExceptionCheckpointOptions options = {});
  std::string state_key() const override { return "OnExceptionCheckpoint"; }
  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_exception(Trainer& trainer, TrainModule& module, const std::exception& error) override;
  // Where the last one was written ("" when none was).
  const std::string& saved_path() const { return saved_path_; }

 private:
  OnExceptionCheckpointOptions options_;
  std::string saved_path_;
};

// Timer: stops training once it has run `duration` seconds, checked after every step or every epoch. The time
// counts from the training loop's start and carries over a resume (it is in checkpoint_state), so a run
// resumed twice still gets one budget in all.
struct TimerOptions {
  double duration = 0;             // seconds, > 0
  std::string interval = "step";   // "step" or "epoch"
  bool verbose = true;             // print to stderr when the time is up
};

class Timer : public Callback {
 public:
  explicit Timer(TimerOptions options);
  // Seconds of training so far, this run and the runs it resumed.
  double time_elapsed() const;
  double time_remaining() const { return options_.duration - time_elapsed(); }

  std::string state_key() const override { return "Timer"; }
  CallbackState checkpoint_state() const override;
  void load_checkpoint_state(const CallbackState& state) override;

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_start(Trainer& trainer, TrainModule& module) override;
  void on_train_end(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const data::Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;

 private:
  using Clock = std::chrono::steady_clock;
  void check(Trainer& trainer);
  TimerOptions options_;
  double offset_ = 0;  // seconds of the runs this one resumed
  bool running_ = false;
  Clock::time_point start_;
};

}  // namespace kiln::trainer
