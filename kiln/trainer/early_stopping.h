// EarlyStopping: ends training when a monitored metric stops improving, as Lightning's EarlyStopping.
//
//   std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val/loss", .patience = 3})
//
// Each check compares the metric with the best seen so far: better by more than min_delta is an improvement
// (best := current, wait := 0); anything else adds one to wait, and wait >= patience stops the run. A value
// beyond stopping_threshold (good enough) or divergence_threshold (hopeless), or a NaN/inf with check_finite,
// stops at once. Stopping sets trainer.set_should_stop(true); the Trainer ends after the current epoch, once
// min_epochs have run. wait, best and stopped_epoch are kept in checkpoints, so patience carries over a resume.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct EarlyStoppingOptions {
  std::string monitor = "val/loss";
  std::string mode = "min";  // "min" or "max"
  // Checks without improvement before stopping.
  int64_t patience = 3;
  // An improvement must beat the best by more than this (>= 0; the sign follows the mode).
  double min_delta = 0.0;
  // Stop as soon as the metric is better than this.
  std::optional<double> stopping_threshold;
  // Stop as soon as the metric is worse than this.
  std::optional<double> divergence_threshold;
  // Stop when the metric is NaN or infinite.
  bool check_finite = true;
  // Check at the end of each training epoch (true) or after each validation (false). Unset: after validation
  // when the fit has validation, else at the training epoch's end.
  std::optional<bool> check_on_train_epoch_end;
  // A monitor that was never logged is an error (true) or skips the check (false).
  bool strict = true;
  bool verbose = false;  // print improvements and the reason for stopping to stderr
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});

  const EarlyStoppingOptions& options() const { return options_; }
  int64_t wait_count() const { return wait_count_; }
  double best_score() const { return best_score_; }
  // The epoch at which it asked the run to stop (-1: not stopped).
  int64_t stopped_epoch() const { return stopped_epoch_; }
  // Why it stopped (empty when it did not).
  const std::string& stopping_reason() const { return stopping_reason_; }

  std::string state_key() const override;
  CallbackState checkpoint_state() const override;
  void load_checkpoint_state(const CallbackState& state) override;

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;

 private:
  void run_check(Trainer& trainer);
  // Updates best and wait for `current`; returns whether to stop, with the reason in `reason`.
  bool evaluate(double current, std::string& reason);
  bool better(double a, double b) const { return options_.mode == "min" ? a < b : a > b; }

  EarlyStoppingOptions options_;
  bool check_on_train_epoch_end_ = false;
  int64_t wait_count_ = 0;
  double best_score_;
  int64_t stopped_epoch_ = -1;
  std::string stopping_reason_;
};

}  // namespace kiln::trainer
