// Helpers for the Trainer tests: a temporary folder per test, a small regression problem, a module that
// counts its steps and can be told what to log, a wide MLP, and a callback that records every hook called.
#pragma once

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "kiln/trainer/trainer.h"

namespace kiln::test {

// A folder under the system's temporary directory, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_trainer_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// n examples of y = x . w_true + 0.5 (x: (n, 4), y: (n, 1)), from a fixed seed.
inline std::shared_ptr<data::TensorDataset> regression_data(int64_t n, uint64_t seed = 7) {
  Generator gen(seed);
  Tensor x = randn({n, 4}, {}, &gen);
  Tensor w = tensor(std::vector<double>{1.0, -2.0, 0.5, 3.0}, {4, 1}).to(kFloat32);
  Tensor y = matmul(x, w) + 0.5;
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
}

inline std::unique_ptr<data::DataLoader> loader(std::shared_ptr<data::Dataset> ds, int64_t batch, bool shuffle = false,
                                                int workers = 0, uint64_t seed = 0) {
  return std::make_unique<data::DataLoader>(
      std::move(ds), data::DataLoaderOptions{.batch_size = batch, .shuffle = shuffle, .num_workers = workers,
                                              .seed = seed});
}

// Linear regression (4 -> 1), MSE, SGD; counts its steps; `make_optim` and `on_validation` can be replaced.
struct Regressor : trainer::TrainModule {
  nn::Linear fc{4, 1};
  int train_steps = 0, val_steps = 0, test_steps = 0;
  double lr = 0.05;
  std::function<trainer::OptimizerSetup(Regressor&)> make_optim;
  std::function<void(Regressor&, const data::Batch&)> on_validation;

  Regressor() : TrainModule("Regressor") { register_module("fc", fc); }
  Tensor forward(const Tensor& x) override { return fc(x); }
  Tensor training_step(const data::Batch& b, int64_t) override {
    ++train_steps;
    Tensor loss = nn::F::mse_loss(fc(b[0]), b[1]);
    log("train/loss", loss);
    return loss;
  }
  Tensor validation_step(const data::Batch& b, int64_t) override {
    ++val_steps;
    if (on_validation) on_validation(*this, b);
    log("val/loss", nn::F::mse_loss(fc(b[0]), b[1]));
    return {};
  }
  Tensor test_step(const data::Batch& b, int64_t) override {
    ++test_steps;
    log("test/loss", nn::F::mse_loss(fc(b[0]), b[1]));
    return {};
  }
  trainer::OptimizerSetup configure_optimizers() override {
    if (make_optim) return make_optim(*this);
    return std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = lr});
  }
};

// An MLP (in -> hidden -> 1, relu, MSE, Adam) whose step's memory grows with the batch: the batch-size
// search's subject, on the CPU and the GPU.
struct WideMlp : trainer::TrainModule {
  nn::Linear fc1, fc2;
  WideMlp(int64_t in, int64_t hidden) : TrainModule("WideMlp"), fc1(in, hidden), fc2(hidden, 1) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(fc1(x).relu()); }
  Tensor training_step(const data::Batch& b, int64_t) override { return nn::F::mse_loss(forward(b[0]), b[1]); }
  trainer::OptimizerSetup configure_optimizers() override {
    return std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 1e-3});
  }
};

// Options for a quiet run: no progress bar, no summary, no logger, no checkpoints, unless asked.
inline trainer::TrainerOptions quiet(const std::string& root) {
  trainer::TrainerOptions o;
  o.default_root_dir = root;
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.logger = false;
  o.num_sanity_val_steps = 0;
  return o;
}

// Every parameter's values, flattened, in double (for exact comparisons of float32 weights).
inline std::vector<std::vector<float>> weights_of(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, p] : m.named_parameters()) {
    Tensor c = p.detach().contiguous().cpu().to(kFloat32);
    const float* d = c.data_ptr<float>();
    out.emplace_back(d, d + c.numel());
  }
  return out;
}

// Numbers through a file, one per line, exactly (for results that forked ranks hand back).
inline void write_numbers(const std::string& path, const std::vector<double>& v) {
  std::ofstream out(path);
  out.precision(17);
  for (double x : v) out << x << "\n";
}
inline std::vector<double> read_numbers(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}
// weights_of's values in one list.
inline std::vector<double> flat(const std::vector<std::vector<float>>& w) {
  std::vector<double> out;
  for (const auto& p : w) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// "" when every weight of `got` is within 1e-5 (relative) of `want`, else which one differs and by how much
// (for checks in forked ranks, which report text).
inline std::string weights_mismatch(const std::vector<std::vector<float>>& got,
                                    const std::vector<std::vector<float>>& want) {
  if (got.size() != want.size()) return "different parameter counts";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].size() != want[i].size()) return "parameter " + std::to_string(i) + " has another size";
    for (size_t j = 0; j < got[i].size(); ++j) {
      if (std::abs(got[i][j] - want[i][j]) > 1e-5 * (1 + std::abs(want[i][j]))) {
        return "parameter " + std::to_string(i) + "[" + std::to_string(j) + "] = " + std::to_string(got[i][j]) +
               ", expected " + std::to_string(want[i][j]);
      }
    }
  }
  return "";
}

// Records the name of every hook called, in order, by overriding each one.
struct HookRecorder : trainer::Callback {
  std::vector<std::string> calls;
  std::string state_key() const override { return "HookRecorder"; }
#define KILN_RECORD(hook, ...) \
  void hook(__VA_ARGS__) override { calls.push_back(#hook); }
  KILN_RECORD(setup, trainer::Trainer&, trainer::TrainModule&, trainer::Stage)
  KILN_RECORD(teardown, trainer::Trainer&, trainer::TrainModule&, trainer::Stage)
  KILN_RECORD(on_fit_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_fit_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_sanity_check_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_sanity_check_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_train_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_train_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_train_epoch_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_train_epoch_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_train_batch_start, trainer::Trainer&, trainer::TrainModule&, const data::Batch&, int64_t)
  KILN_RECORD(on_train_batch_end, trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&, int64_t)
  KILN_RECORD(on_validation_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_validation_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_validation_epoch_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_validation_epoch_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_validation_batch_start, trainer::Trainer&, trainer::TrainModule&, const data::Batch&, int64_t)
  KILN_RECORD(on_validation_batch_end, trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&, int64_t)
  KILN_RECORD(on_test_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_test_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_test_epoch_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_test_epoch_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_test_batch_start, trainer::Trainer&, trainer::TrainModule&, const data::Batch&, int64_t)
  KILN_RECORD(on_test_batch_end, trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&, int64_t)
  KILN_RECORD(on_predict_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_predict_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_predict_epoch_start, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_predict_epoch_end, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_predict_batch_start, trainer::Trainer&, trainer::TrainModule&, const data::Batch&, int64_t)
  KILN_RECORD(on_predict_batch_end, trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&, int64_t)
  KILN_RECORD(on_before_backward, trainer::Trainer&, trainer::TrainModule&, const Tensor&)
  KILN_RECORD(on_after_backward, trainer::Trainer&, trainer::TrainModule&)
  KILN_RECORD(on_before_optimizer_step, trainer::Trainer&, trainer::TrainModule&, optim::Optimizer&)
  KILN_RECORD(on_before_zero_grad, trainer::Trainer&, trainer::TrainModule&, optim::Optimizer&)
  KILN_RECORD(on_save_checkpoint, trainer::Trainer&, trainer::TrainModule&, trainer::Checkpoint&)
  KILN_RECORD(on_load_checkpoint, trainer::Trainer&, trainer::TrainModule&, const trainer::Checkpoint&)
  KILN_RECORD(on_exception, trainer::Trainer&, trainer::TrainModule&, const std::exception&)
#undef KILN_RECORD
};

}  // namespace kiln::test
