// CSVLogger: metrics as a CSV table that pandas, a spreadsheet or `column -t` can read, in
// <save_dir>/<name>/version_<N>/metrics.csv, and hyperparameters in hparams.yaml beside it.
//
// The table is `step,<metric names, sorted>` with one row per log_metrics call; a metric not logged in a call
// leaves its cell empty. Numbers are printed in the shortest form that reads back to the same double (nan,
// inf and -inf as such), so the file loses nothing. When a call brings a metric the header lacks, the whole
// file is rewritten with the wider header: re-read from disk, written to a temporary file, renamed over the
// old one, so a crash leaves the old table or the new one, never a torn one.
//
// Each row is appended and handed to the OS (fflush) within its log_metrics call, so a crashed process loses
// nothing already logged and `tail -f` follows along; flush() and finalize() also fsync, for power loss.
// Rows are a few dozen bytes logged every few steps, so the syscall per row costs nothing that shows.
//
// The helpers below the class are shared with TensorBoardLogger, which writes the same hparams.yaml.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kiln/trainer/logger.h"

namespace kiln::trainer {

class CSVLogger : public Logger {
 public:
  // version -1 takes next_version(save_dir, name), fixed here, so that loggers made together share a folder.
  explicit CSVLogger(std::string save_dir, std::string name = "kiln", int64_t version = -1);
  ~CSVLogger() override;
  CSVLogger(const CSVLogger&) = delete;
  CSVLogger& operator=(const CSVLogger&) = delete;

  std::string name() const override { return "csv"; }
  std::string log_dir() const override { return log_dir_; }
  int64_t version() const { return version_; }
  std::string metrics_path() const { return log_dir_ + "/metrics.csv"; }

  // Merged with earlier calls; hparams.yaml is rewritten whole each time.
  void log_hyperparams(const std::map<std::string, std::string>& hparams) override;
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  // Drops the rows of metrics.csv with a step above `step` (rewriting the file atomically); later rows append.
  void on_resume(int64_t step) override;
  void flush() override;
  void finalize(const std::string& status) override;

 private:
  // First use: creates the folder and adopts the header of a metrics.csv already there (a resumed run).
  void open();
  // Replaces metrics.csv with `columns` (metric names, without "step") and `rows` (cells in header order).
  void rewrite(const std::vector<std::string>& columns, const std::vector<std::vector<std::string>>& rows);
  void close_file() noexcept;

  std::string log_dir_;
  int64_t version_ = 0;
  bool opened_ = false;
  std::vector<std::string> columns_;  // sorted metric names; the file's header is "step" then these
  std::FILE* file_ = nullptr;         // metrics.csv, opened for append once it has a header
  std::map<std::string, std::string> hparams_;
};

// <save_dir>/<name>/version_<N>, with N = version, or next_version(save_dir, name) when version is -1.
std::string resolve_log_dir(const std::string& save_dir, const std::string& name, int64_t version,
                            int64_t* resolved_version = nullptr);

// A metric value as CSV and hparams print it: shortest round-trip decimal, or nan / inf / -inf.
std::string format_metric(double value);

// A CSV cell: as is, or in double quotes (inner quotes doubled) when it holds a comma, quote, CR or LF.
std::string csv_quote(const std::string& cell);

// A YAML scalar that reads back as `text` means: plain for numbers, true/false and simple words, double-quoted
// (with escapes) for anything YAML would take for something else (yes, null, 1e-3, "a: b", "#x", "").
std::string yaml_scalar(const std::string& text);

// Writes <dir>/hparams.yaml (one `key: value` line per entry, sorted) through a temporary file and a rename.
void save_hparams_yaml(const std::string& dir, const std::map<std::string, std::string>& hparams);

// Replaces `path` with `content`: temporary file in the same folder, fsync, rename, fsync of the folder.
// `where` starts the error message ("CSVLogger: metrics.csv").
void write_file_atomically(const std::string& path, const std::string& content, const std::string& where);

}  // namespace kiln::trainer
