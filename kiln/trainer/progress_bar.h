// ProgressBar: what a run shows while it runs. Two forms, chosen by where the output goes:
//
// - a terminal (isatty, or force_tty): one live line per epoch, redrawn in place with '\r' at most every
//   refresh_seconds, finished with a newline at the epoch's end:
//     Epoch 1/3 ━━━━━━━━━━━╸──────── 512/938 0:00:12<0:00:08 43.1 it/s loss=0.312 val/acc=0.902
//   validation draws its own bar in the same place while it runs;
// - anything else (a pipe, a CI log, a file): plain lines that read well top to bottom, with no '\r': one
//   every print_every_n_batches, and one summary per epoch with every progress-bar metric, the epoch's time
//   and, when validation ran, the validation metrics:
//     Epoch 1/3: 938 batches in 21.7s (43.2 it/s) loss=0.312 val/acc=0.902 val/loss=0.291
//
// validate() and test() end with one line of their metrics. Which metrics came from validation is learned by
// watching callback_metrics change across each validation (a name seen once stays known, so a value that
// happens to repeat is still shown).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct ProgressBarOptions {
  std::FILE* out = stdout;
  // Draw the live bar even when `out` is not a terminal (tests; terminals that isatty does not recognize).
  bool force_tty = false;
  // The live bar is redrawn at most this often.
  double refresh_seconds = 0.1;
  // Plain output: a line every this many training batches (0: about ten per epoch).
  int64_t print_every_n_batches = 0;
  // Draw the bar with '=', '>' and '.' instead of box-drawing characters.
  bool ascii = false;
  int bar_width = 20;
};

class ProgressBar : public Callback {
 public:
  explicit ProgressBar(ProgressBarOptions options = {});

  const ProgressBarOptions& options() const { return options_; }
  // Whether the live (in-place) form is in use.
  bool is_tty() const { return tty_; }

  std::string state_key() const override { return "ProgressBar"; }

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const data::Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_start(Trainer& trainer, TrainModule& module) override;
  void on_validation_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                               const data::Batch& batch, int64_t batch_idx) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_test_start(Trainer& trainer, TrainModule& module) override;
  void on_test_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output, const data::Batch& batch,
                         int64_t batch_idx) override;
  void on_test_end(Trainer& trainer, TrainModule& module) override;
  void on_exception(Trainer& trainer, TrainModule& module, const std::exception& error) override;

 private:
  using Clock = std::chrono::steady_clock;
  double seconds_since(Clock::time_point t) const;
  // "Epoch 2/10" (no total when the run is bounded by steps only).
  std::string epoch_label(const Trainer& trainer) const;
  // "━━━━╸──── 512/938 0:00:12<0:00:08 43.1 it/s"
  std::string progress(int64_t done, int64_t total, double elapsed) const;
  // "loss=0.312 val/acc=0.902": the progress-bar metrics and (with_val) the validation metrics known so far.
  std::string metrics_text(const Trainer& trainer, bool with_val) const;
  // Live form: replaces the line being drawn.
  void draw(const std::string& line);
  // Live form: ends the line being drawn (if any) with a newline.
  void end_line();
  void print_line(const std::string& line);
  // The eval run's metrics: names whose values changed since eval_start_metrics_, and names known before.
  void learn_eval_names(const Trainer& trainer, std::set<std::string>& names) const;
  std::string eval_summary(const Trainer& trainer, const char* label, const std::set<std::string>& names) const;
  void eval_batch(const Trainer& trainer, const char* label, int64_t batch_idx);

  ProgressBarOptions options_;
  bool tty_ = false;
  bool silent_ = false;  // on ranks other than 0 under ddp: only rank 0 prints
  int terminal_columns_ = 0;  // 0: unknown (no truncation)
  size_t line_columns_ = 0;   // columns of the line now drawn in place (0: none)
  Clock::time_point epoch_start_, eval_start_, last_draw_;
  bool validated_this_epoch_ = false;
  std::map<std::string, double> eval_start_metrics_;
  std::set<std::string> val_names_, test_names_;
};

}  // namespace kiln::trainer
