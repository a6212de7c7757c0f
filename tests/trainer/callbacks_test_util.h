// Shared by the callback tests (callbacks_test.cpp, model_checkpoint_test.cpp, ...): a fresh folder per test, a
// tiny linear regression whose validation logs a scripted "val/score" per epoch, its data, quiet Trainer
// options, and a logger that keeps what it is sent. The scripted score is what lets each test write its
// expectations out by hand.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/trainer/callbacks.h"
#include "kiln/trainer/trainer.h"

// Not kiln::trainer::test: that name would hide kiln::test (tensor/test_util.h) inside kiln::trainer.
namespace kiln::trainer::callbacks_testing {

namespace fs = std::filesystem;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();


// A fresh, empty folder per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("kiln_callbacks_" + std::string(info->test_suite_name()) + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

// y = x w + b on 8 examples; 2 batches of 4 per epoch.
struct Regression : TrainModule {
  nn::Linear fc{2, 1};
  std::vector<double> val_scores;  // "val/score" logged in epoch e's validation: val_scores[e] (last repeats)
  int64_t fit_validations = 0;     // validations run inside fit, sanity checks excluded
  double step_sleep_seconds = 0;

  Regression() : TrainModule("Regression") { register_module("fc", fc); }
  Tensor forward(const Tensor& x) override { return fc(x); }
  Tensor training_step(const data::Batch& b, int64_t) override {
    if (step_sleep_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(step_sleep_seconds));
    Tensor loss = nn::F::mse_loss(fc(b[0]), b[1]);
    log("train/loss", loss, {.prog_bar = true});
    return loss;
  }
  Tensor validation_step(const data::Batch&, int64_t) override {
    const auto e = static_cast<size_t>(trainer().current_epoch());
    log("val/score", val_scores.empty() ? 0.0 : val_scores[std::min(e, val_scores.size() - 1)]);
    return {};
  }
  Tensor test_step(const data::Batch&, int64_t) override {
    log("test/score", 0.25);
    return {};
  }
  void on_validation_end(Trainer& t, TrainModule&) override {
    if (t.stage() == Stage::Fit && !t.sanity_checking()) ++fit_validations;
  }
  OptimizerSetup configure_optimizers() override {
    return std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.01});
  }
};

struct Data {
  std::shared_ptr<data::TensorDataset> dataset;
  std::unique_ptr<data::DataLoader> train, val;
  Data() {
    Generator gen(7);
    dataset = std::make_shared<data::TensorDataset>(
        std::vector<Tensor>{randn({8, 2}, {}, &gen), randn({8, 1}, {}, &gen)});
    train = std::make_unique<data::DataLoader>(dataset, data::DataLoaderOptions{.batch_size = 4});
    val = std::make_unique<data::DataLoader>(dataset, data::DataLoaderOptions{.batch_size = 4});
  }
};

// Quiet options: no bar, no summary, no logger, no sanity check, a fresh folder.
inline TrainerOptions quiet(const TempDir& dir, int64_t max_epochs, std::vector<std::shared_ptr<Callback>> callbacks) {
  TrainerOptions o;
  o.max_epochs = max_epochs;
  o.accelerator = "cpu";
  o.default_root_dir = dir.str();
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.logger = false;
  o.num_sanity_val_steps = 0;
  o.callbacks = std::move(callbacks);
  return o;
}

// Keeps every log_metrics call.
struct RecordingLogger : Logger {
  std::vector<std::pair<int64_t, std::map<std::string, double>>> calls;
  std::string name() const override { return "recording"; }
  std::string log_dir() const override { return dir; }
  void log_hyperparams(const std::map<std::string, std::string>&) override {}
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    calls.emplace_back(step, metrics);
  }
  // (step, value) of every call that has `key`.
  std::vector<std::pair<int64_t, double>> series(const std::string& key) const {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& [step, m] : calls) {
      if (auto it = m.find(key); it != m.end()) out.emplace_back(step, it->second);
    }
    return out;
  }
  // The steps of every call that has `key`.
  std::vector<int64_t> steps_with(const std::string& key) const {
    std::vector<int64_t> out;
    for (const auto& [step, value] : series(key)) out.push_back(step);
    return out;
  }
  std::string dir;
};

}  // namespace kiln::trainer::callbacks_testing
