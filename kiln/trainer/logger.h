// Logger: where the Trainer's metrics and hyperparameters go. CSVLogger and TensorBoardLogger are the two
// built in; a run may use both at once (they then share one run folder).
//
// A run folder is <save_dir>/<name>/version_<N>: N is one more than the highest version already there, unless
// a version is given (a resumed run passes the one it was started with, so its metrics continue in the same
// folder). The Trainer calls log_metrics with the global step (the number of optimizer steps so far) and
// log_hyperparams once before training.
#pragma once

#include <cstdint>
#include <map>
#include <string>

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
