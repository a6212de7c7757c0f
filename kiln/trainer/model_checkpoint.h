// ModelCheckpoint: saves the run (Trainer::save_checkpoint) at a cadence, keeping the k best files by a
// monitored metric, or the latest when nothing is monitored, as Lightning's ModelCheckpoint does.
//
//   auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
//       .filename = "{epoch}-{val/acc:.3f}", .monitor = "val/acc", .mode = "max", .save_top_k = 3,
//       .save_last = true});
//   -> <log_dir>/checkpoints/epoch=4-val_acc=0.912.ckpt, ... and last.ckpt
//
// The top-k bookkeeping (file -> score, best, last) is part of checkpoint_state(), so a resumed run goes on
// ranking the files of the run it resumes. It is updated before a file is written, so each file holds the
// bookkeeping that includes itself; files that fell out of the top k are deleted only after the new one is
// safely on disk, so a crash never leaves fewer than k.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct ModelCheckpointOptions {
  // Folder of the files; empty: <trainer.log_dir()>/checkpoints, resolved when fit() starts.
  std::string dirpath;
  // File name without ".ckpt". {epoch}, {step} and {<metric>} (optionally {<metric>:.4f}, :.3e, :.5g, :d) are
  // replaced by "name=value" (Lightning's auto_insert_metric_name), or by the value alone when the template
  // already has "name=" before the brace. A '/' in a metric name becomes '_' ({val/acc} -> val_acc=0.9123)
  // so that no subfolder appears. A metric not logged yet prints as nan.
  std::string filename = "epoch={epoch}-step={step}";
  // The metric that ranks the files; empty: none (keep the latest).
  std::string monitor;
  std::string mode = "min";  // "min" or "max": which scores are better
  // -1: keep every file; 0: none (save_last still writes last.ckpt); k: the k best. Without a monitor only -1
  // and 1 (the latest) make sense.
  int64_t save_top_k = 1;
  bool save_last = false;  // also write last.ckpt at every save
  // Save at the end of every n-th training epoch (0: never). Unset: 1, unless every_n_train_steps or
  // train_time_interval is on.
  std::optional<int64_t> every_n_epochs;
  // Save after every n-th optimizer step (0: never).
  int64_t every_n_train_steps = 0;
  // Save after the first optimizer step that ends at least this many seconds after the fit's start or the
  // previous time-triggered save (Lightning's train_time_interval; 0: never). Under ddp a rank whose clock
  // passed the interval makes every rank save at that step. Combines with the cadences above.
  double train_time_interval = 0;
  // Seconds from any fixed origin, for train_time_interval; steady_clock when null (tests give a fake one).
  std::function<double()> clock;
  bool verbose = false;  // print each save to stderr
  // Write only the module's weights (Trainer::save_checkpoint's weights_only): smaller files that validate,
  // test and predict load, but a fit cannot resume from (last.ckpt too).
  bool save_weights_only = false;
};

class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});

  const ModelCheckpointOptions& options() const { return options_; }
  // The folder in use (empty before the first fit when none was given).
  const std::string& dirpath() const { return dirpath_; }
  const std::string& best_model_path() const { return best_model_path_; }
  // The best file's score (NaN when nothing is monitored or nothing was saved yet).
  double best_model_score() const { return best_model_score_; }
  const std::string& last_model_path() const { return last_model_path_; }
  // The files kept, with their scores (only with a monitor).
  const std::map<std::string, double>& best_k_models() const { return best_k_models_; }

  // The file name (no folder) that the template gives for these values.
  std::string format_checkpoint_name(int64_t epoch, int64_t step, const std::map<std::string, double>& metrics) const;

  std::string state_key() const override;
  CallbackState checkpoint_state() const override;
  void load_checkpoint_state(const CallbackState& state) override;

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_start(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                            int64_t batch_idx) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const data::Batch& batch,
                          int64_t batch_idx) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;

 private:
  enum class Trigger { Step, Epoch };
  bool should_skip(const Trainer& trainer) const;
  double now() const;
  void save_at_epoch_end(Trainer& trainer);
  void save(Trainer& trainer, Trigger trigger);
  void save_top_k(Trainer& trainer, const std::map<std::string, double>& metrics, Trigger trigger);
  void save_latest(Trainer& trainer, const std::map<std::string, double>& metrics);
  // `a` ranks before `b` (NaN ranks after everything).
  bool better(double a, double b) const;
  // The path for these values; "-v1", "-v2", ... appended while another file of that name exists (one from an
  // earlier run), unless it is `replacing`, the file this save is about to supersede.
  std::string unique_path(const Trainer& trainer, const std::map<std::string, double>& metrics,
                          const std::string& replacing) const;
  void write(Trainer& trainer, const std::string& path);
  void remove_file(const std::string& path) const;
  std::string worst_path() const;

  ModelCheckpointOptions options_;
  int64_t every_n_epochs_ = 1;
  std::string dirpath_;
  std::map<std::string, double> best_k_models_;
  std::string best_model_path_, last_model_path_;
  double best_model_score_;
  int64_t last_global_step_saved_ = -1;
  double last_time_checked_ = 0;  // train_time_interval's origin: the fit's start or the last save it made
  // Per fit: the step at the batch's start (a batch that ran no optimizer step is no place to save), whether
  // validation ran this epoch, whether any validation or epoch has ended yet.
  int64_t step_at_batch_start_ = -1;
  bool validated_this_epoch_ = false, validated_ever_ = false, epoch_ended_ = false;
  bool warned_missing_ = false;
};

}  // namespace kiln::trainer
