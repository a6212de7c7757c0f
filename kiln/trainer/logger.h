// Logger: where the Trainer's metrics and hyperparameters go. CSVLogger and TensorBoardLogger are the two
// built in; a run may use both at once (they then share one run folder).
//
// A run folder is <save_dir>/<name>/version_<N>: N is one more than the highest version already there, unless
// a version is given (a resumed run passes the one it was started with, so its metrics continue in the same
// folder). The Trainer calls log_metrics with the global step (the number of optimizer steps so far) and
// log_hyperparams once before training. Histograms and images (TrainModule::log_histogram / log_image) go to
// the loggers that can show them (TensorBoard); the others ignore them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/tensor/tensor.h"

namespace kiln::trainer {

class Logger {
 public:
  virtual ~Logger() = default;
  // The logger's kind, as errors and the CLI print it ("csv", "tensorboard").
  virtual std::string name() const = 0;
  // The run folder this logger writes into (created on first use).
  virtual std::string log_dir() const = 0;
  // Hyperparameters of the run (every value already printed as text).
  virtual void log_hyperparams(const std::map<std::string, std::string>& hparams) = 0;
  // One set of scalars at `step`. Names may contain '/' ("train/loss").
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  // The distribution of `values` (any shape, device and float or integer dtype; finite) at `step`, in `bins`
  // equal-width bins between its minimum and maximum. Ignored by loggers without histograms (CSV).
  virtual void log_histogram(const std::string& tag, const Tensor& values, int64_t step, int64_t bins = 64) {}
  // An image at `step`, as data::encode_png takes it: (H, W) or (C, H, W), C 1, 3 or 4, float in [0, 1] or
  // uint8 (data::make_grid lays out a batch). Ignored by loggers without images (CSV).
  virtual void log_image(const std::string& tag, const Tensor& image, int64_t step) {}
  // The run goes on from a checkpoint taken at global step `step`, in this logger's existing folder: what the
  // interrupted run logged after that step is discarded (the CSV logger drops those rows; the TensorBoard
  // logger writes a session-start event at step + 1, which tells TensorBoard to purge later events).
  virtual void on_resume(int64_t step) {}
  // Makes everything logged so far durable on disk.
  virtual void flush() {}
  // The run has ended: "success", "failed" or "interrupted". Flushes and closes files.
  virtual void finalize(const std::string& status) { flush(); }
};

// The next free version number under <save_dir>/<name> (0 when there is none yet).
int64_t next_version(const std::string& save_dir, const std::string& name);

}  // namespace kiln::trainer
