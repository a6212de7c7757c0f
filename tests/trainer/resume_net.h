// The run the exact-resume tests interrupt and resume: everything that carries state across steps is in it
// (dropout drawing from the default generator, a shuffling loader with worker threads, Adam's moments, a
// scheduler, gradient accumulation, epoch-mean metrics, validation), so a resume that forgets any of them
// ends with different weights.
#pragma once

#include <memory>
#include <string>

#include "trainer/trainer_test_util.h"

namespace kiln::test {

struct ResumeNet : trainer::TrainModule {
  nn::Sequential net{nn::Linear(4, 16), nn::ReLU(), nn::Dropout(0.2), nn::Linear(16, 1)};
  ResumeNet() : TrainModule("ResumeNet") { register_module("net", net); }
  Tensor forward(const Tensor& x) override { return net(x); }
  Tensor training_step(const data::Batch& b, int64_t) override {
    Tensor loss = nn::F::mse_loss(net(b[0]), b[1]);
    log("train/loss", loss, {.on_step = true, .on_epoch = true});
    return loss;
  }
  Tensor validation_step(const data::Batch& b, int64_t) override {
    log("val/loss", nn::F::mse_loss(net(b[0]), b[1]));
    return {};
  }
  trainer::OptimizerSetup configure_optimizers() override {
    auto opt = std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 1e-2});
    trainer::SchedulerConfig s;
    s.scheduler = std::make_shared<optim::StepLR>(*opt, 1, 0.9);
    return trainer::OptimizerSetup({opt}, {s});
  }
};

// Writes a checkpoint to `path` after every optimizer step and at every epoch's end (a stand-in for
// ModelCheckpoint(every_n_train_steps = 1, save_last = true), kept independent of it).
struct SaveEveryStep : trainer::Callback {
  std::string path;
  int64_t step_at_batch_start = 0;
  explicit SaveEveryStep(std::string p) : path(std::move(p)) {}
  std::string state_key() const override { return "SaveEveryStep"; }
  void on_train_batch_start(trainer::Trainer& t, trainer::TrainModule&, const data::Batch&, int64_t) override {
    step_at_batch_start = t.global_step();
  }
  void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                          int64_t) override {
    // No step this batch: gradients are still accumulating, and a checkpoint now would lose them.
    if (t.global_step() != step_at_batch_start) t.save_checkpoint(path);
  }
  void on_train_epoch_end(trainer::Trainer& t, trainer::TrainModule&) override { t.save_checkpoint(path); }
};

struct ResumeRun {
  int epochs = 3;
  int workers = 2;
  int64_t train_size = 96, batch = 8;  // 12 batches, 6 optimizer steps per epoch
  std::string precision = "32";
};

inline trainer::TrainerOptions resume_options(const std::string& root, const ResumeRun& run) {
  trainer::TrainerOptions o = quiet(root);
  o.max_epochs = run.epochs;
  o.accumulate_grad_batches = 2;
  o.val_check_interval = 0.5;
  o.seed = 1234;
  o.deterministic = true;
  o.precision = run.precision;
  return o;
}

inline std::unique_ptr<data::DataLoader> resume_train_loader(const ResumeRun& run) {
  return loader(regression_data(run.train_size, 11), run.batch, /*shuffle=*/true, run.workers, /*seed=*/5);
}
inline std::unique_ptr<data::DataLoader> resume_val_loader() { return loader(regression_data(24, 12), 8); }

}  // namespace kiln::test
