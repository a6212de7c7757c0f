// ThroughputMonitor: how fast a run goes, in batches, samples, items and FLOPs per second, sent to the loggers.
// Lightning's ThroughputMonitor, with its metric names and kiln's '/' separator. Training's clock stops while
// fit validates, so its rates are of training alone; each of fit's validations is measured on its own clock
// under "validate" (the sanity check is not).
//
// Metrics, each under its stage's prefix ("train", "validate", "test" or "predict"):
//   <stage>/time, /batches, /samples, /lengths  seconds and counts of the stage so far (lengths: the items,
//                                               with length_fn)
//   <stage>/device/batches_per_sec, /samples_per_sec, /items_per_sec, /flops_per_sec, /mfu
//                                               this process's rates over the last window_size batches, once
//                                               that many have run (items with length_fn, flops with
//                                               flops_per_batch, mfu with available_flops too)
//   <stage>/batches_per_sec, ... (not mfu)      with several ranks: the device rates times the world size
// On a GPU the clock is read after the device finishes its queued work (a synchronize per batch: the price of
// true numbers). Training logs when the global step reaches a multiple of log_every_n_steps, at that step; a
// validation inside fit once, at its end, at the global step; the evaluation runs alone (validate, test,
// predict) every log_every_n_steps batches, at their batch count. Only rank 0 has loggers; every rank
// keeps its own numbers in last_metrics(). Counts start again at each fit, a resumed one included.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct ThroughputMonitorOptions {
  // Samples in a batch; by default Trainer::batch_size_of (dim 0 of its first field).
  std::function<int64_t(const data::Batch&)> batch_size_fn = {};
  // Items in a batch (a text batch's tokens): adds lengths and items_per_sec. Not given: none.
  std::function<int64_t(const data::Batch&)> length_fn = {};
  // Floating-point operations of one batch (a training batch's forward and backward): adds flops_per_sec. 0: none.
  double flops_per_batch = 0;
  // The device's peak FLOP/s for the dtype trained in: adds mfu, flops_per_sec over this. 0: none.
  double available_flops = 0;
  // Rates are over this many consecutive batches (>= 2), and appear once that many have run.
  int64_t window_size = 100;
};

class ThroughputMonitor : public Callback {
 public:
  explicit ThroughputMonitor(ThroughputMonitorOptions options = {});
  std::string state_key() const override { return "ThroughputMonitor"; }
  // Every metric as last computed, on every rank (logged or not).
  const std::map<std::string, double>& last_metrics() const { return last_metrics_; }

  void on_train_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const data::Batch& batch,
                          int64_t batch_idx) override;
  void on_validation_start(Trainer& trainer, TrainModule& module) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                               const data::Batch& batch, int64_t batch_idx) override;
  void on_test_start(Trainer& trainer, TrainModule& module) override;
  void on_test_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output, const data::Batch& batch,
                         int64_t batch_idx) override;
  void on_predict_start(Trainer& trainer, TrainModule& module) override;
  void on_predict_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output, const data::Batch& batch,
                            int64_t batch_idx) override;

 private:
  using Clock = std::chrono::steady_clock;
  // One stage's clock and counts, and the snapshots (at batch ends) its rates are taken over.
  struct Meter {
    struct Sample {
      double time;
      int64_t batches, samples, items;
    };
    Clock::time_point start;
    double paused = 0;  // seconds the clock stood still (fit's validations)
    int64_t batches = 0, samples = 0, items = 0;
    int64_t last_logged_step = 0;
    std::deque<Sample> window;
  };
  // Starts `meter` for a run of `stage`, forgetting that stage's last numbers.
  void start(Meter& meter, const std::string& stage);
  // Counts one batch on `meter`; computes the metrics of `stage`, logs them at `step` when `log` says so.
  void update(Trainer& trainer, Meter& meter, const std::string& stage, const data::Batch& batch, bool log,
              int64_t step);
  ThroughputMonitorOptions options_;
  Meter train_, eval_;
  bool validating_in_fit_ = false;  // a validation inside fit (not its sanity check) is running
  bool sanity_checking_ = false;
  std::map<std::string, double> last_metrics_;
};

}  // namespace kiln::trainer
