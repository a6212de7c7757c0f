// Helpers for the `kiln` command-line tests: a temporary folder per test, running run_cli() with its stdout
// and stderr captured (the commands print with printf, so the capture swaps file descriptors 1 and 2, not
// std::cout), and a reader for the CSV files the commands write (plain numbers, no quoting).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/tools/classifier.h"
#include "kiln/tools/cli.h"
#include "kiln/tools/datasets.h"
#include "kiln/tools/models.h"
#include "kiln/trainer/checkpoint.h"

namespace kiln::tools::testing {

// A folder under the system's temporary directory, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_tools_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What one command did.
struct CliResult {
  int status = -1;
  std::string out, err;
};

// Points file descriptor `fd` at a fresh temporary file until restore(); then returns what was written.
class FdCapture {
 public:
  explicit FdCapture(int fd) : fd_(fd), file_(std::tmpfile()) {
    if (file_ == nullptr) throw std::runtime_error("FdCapture: tmpfile() failed");
    saved_ = ::dup(fd_);
    ::dup2(::fileno(file_), fd_);
  }
  ~FdCapture() {
    restore();
    std::fclose(file_);
  }
  std::string restore() {
    if (saved_ < 0) return text_;
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
    std::rewind(file_);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) text_.append(buf, n);
    return text_;
  }

 private:
  int fd_, saved_ = -1;
  std::FILE* file_;
  std::string text_;
};

// Runs `kiln <args...>` in this process and captures what it prints.
inline CliResult run_kiln(const std::vector<std::string>& args) {
  std::fflush(stdout);
  std::fflush(stderr);
  CliResult r;
  {
    FdCapture out(STDOUT_FILENO), err(STDERR_FILENO);
    r.status = run_cli(args);
    std::fflush(stdout);
    std::fflush(stderr);
    r.out = out.restore();
    r.err = err.restore();
  }
  return r;
}

// The language models' end-to-end check: a text of a repeated 10-letter cycle (every next byte follows from the
// one before), trained on by kiln train with the model's settings plus data and trainer ones fit for it.
struct CycleRun {
  std::string cycle = "abcdefghij";
  std::string text;     // the cycle repeated to 4,000 bytes
  CliResult train;      // what kiln train printed
  std::string ckpt;     // the run's last.ckpt
  double test_accuracy = -1;  // from train's output; -1 when it printed none
};
inline CycleRun train_on_cycle(const TempDir& dir, const std::vector<std::string>& model_sets) {
  CycleRun run;
  while (run.text.size() < 4000) run.text += run.cycle;
  {
    std::ofstream out(dir / "cycle.txt", std::ios::binary);
    out << run.text;
  }
  const std::string root = dir / "runs";
  std::vector<std::string> sets = model_sets;
  sets.insert(sets.end(), {"data.name=text", "data.path=" + (dir / "cycle.txt"), "data.block_size=16",
                           "data.val_size=10", "data.batch_size=16", "trainer.max_epochs=3", "trainer.seed=0",
                           "trainer.default_root_dir=" + root, "trainer.enable_progress_bar=false",
                           "logger.tensorboard=false"});
  std::vector<std::string> args{"train"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  run.train = run_kiln(args);
  const size_t at = run.train.out.rfind("test/acc ");
  if (at != std::string::npos) run.test_accuracy = std::stod(run.train.out.substr(at + 9));
  run.ckpt = (std::filesystem::path(root) / "kiln" / "version_0" / "checkpoints" / "last.ckpt").string();
  return run;
}

// What continues `prompt` (a stretch of the cycle) for n more bytes.
inline std::string cycle_continued(const CycleRun& run, const std::string& prompt, size_t n) {
  std::string out = prompt;
  size_t next = run.cycle.find(prompt.back()) + 1;
  while (out.size() < prompt.size() + n) out += run.cycle[next++ % run.cycle.size()];
  return out;
}

// A CSV file with a header: its column names, and each row as a map from column to cell ("" when empty).
struct CsvTable {
  std::vector<std::string> columns;
  std::vector<std::map<std::string, std::string>> rows;
};

inline std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::stringstream in(line);
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

inline CsvTable read_csv_table(const std::filesystem::path& path) {
  CsvTable t;
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return t;
  t.columns = split_csv_line(line);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = split_csv_line(line);
    EXPECT_EQ(cells.size(), t.columns.size()) << path << ": row '" << line << "'";
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < t.columns.size() && i < cells.size(); ++i) row[t.columns[i]] = cells[i];
    t.rows.push_back(std::move(row));
  }
  return t;
}

// A checkpoint written by kiln train, rebuilt by hand: its config's data and model, the weights loaded, in eval
// mode. For checking what the commands report against a plain forward pass.
struct CheckpointRun {
  DataSplits data;
  std::shared_ptr<Classifier> module;
};

inline CheckpointRun rebuild_from_checkpoint(const std::string& ckpt_path) {
  const trainer::Checkpoint c = trainer::load_checkpoint(ckpt_path);
  const RunConfig cfg = load_run_config_text(c.get("hparams.config"), ckpt_path);
  CheckpointRun run{make_data(cfg.data), nullptr};
  run.module = std::make_shared<Classifier>(make_model(cfg.model, run.data.info), cfg);
  run.module->load_state_dict(c.tensor_section("model"));
  run.module->eval();
  return run;
}

}  // namespace kiln::tools::testing
