// The WeightAveraging callback in real fits of the exact-resume run (resume_net.h): its EMA against the
// recurrence over the weights a second callback records after every step, validation seeing the averages, the
// checkpoint's model entries being the averages, and a run crashed anywhere and resumed ending bit for bit as
// one never stopped, for EMA and for SWA.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/trainer/callbacks.h"
#include "kiln/trainer/checkpoint.h"
#include "kiln/trainer/trainer.h"
#include "tensor/test_util.h"
#include "trainer/resume_net.h"

namespace kiln::test {
namespace {

using Weights = std::vector<std::vector<float>>;

// Records the weights after every step and, at each validation's start, the weights validation runs with.
struct WeightRecorder : trainer::Callback {
  std::vector<Weights> after_step, validated;
  std::string state_key() const override { return "WeightRecorder"; }
  void on_before_zero_grad(trainer::Trainer&, trainer::TrainModule& m, optim::Optimizer&) override {
    after_step.push_back(weights_of(m));
  }
  void on_validation_start(trainer::Trainer& t, trainer::TrainModule& m) override {
    if (!t.sanity_checking()) validated.push_back(weights_of(m));
  }
};

// The EMA of the first n recorded weight sets, in double: the first copied, then decay e + (1 - decay) w.
std::vector<std::vector<double>> ema_of(const std::vector<Weights>& seen, size_t n, double decay) {
  std::vector<std::vector<double>> e;
  for (const auto& p : seen[0]) e.emplace_back(p.begin(), p.end());
  for (size_t k = 1; k < n; ++k)
    for (size_t i = 0; i < e.size(); ++i)
      for (size_t j = 0; j < e[i].size(); ++j) e[i][j] = decay * e[i][j] + (1 - decay) * seen[k][i][j];
  return e;
}

void expect_near_weights(const Weights& got, const std::vector<std::vector<double>>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t j = 0; j < got[i].size(); ++j)
      ASSERT_NEAR(got[i][j], want[i][j], 2e-5 * (1 + std::abs(want[i][j]))) << what << ": " << i << "[" << j << "]";
}

// Fits the exact-resume run with these callbacks (from ckpt when given, the generator then set elsewhere, so
// that only the checkpoint can make the weights agree) and returns the weights it ends with. checkpointing:
// the Trainer's enable_checkpointing, which a ModelCheckpoint among the callbacks needs.
Weights fit_resume_net(const std::string& root, const ResumeRun& run,
                       std::vector<std::shared_ptr<trainer::Callback>> callbacks, const std::string& ckpt = "",
                       bool checkpointing = false) {
  manual_seed(ckpt.empty() ? 42 : 999);
  ResumeNet m;
  auto train = resume_train_loader(run);
  auto val = resume_val_loader();
  auto o = resume_options(root, run);
  o.callbacks = std::move(callbacks);
  o.enable_checkpointing = checkpointing;
  trainer::Trainer(o).fit(m, *train, val.get(), ckpt);
  return weights_of(m);
}

TEST(WeightAveraging, EmaFollowsTheStepsValidatesWithItAndEndsInTheModel) {
  const ResumeRun run;
  TempDir dir;
  auto recorder = std::make_shared<WeightRecorder>();
  const std::string ckpt = dir / "last.ckpt";
  const Weights fitted = fit_resume_net(
      dir.str(), run, {std::make_shared<trainer::WeightAveraging>(trainer::WeightAveragingOptions{.decay = 0.8}),
                       recorder, std::make_shared<SaveEveryStep>(ckpt)});
  const size_t steps = recorder->after_step.size();
  ASSERT_EQ(steps, 18u);  // 3 epochs of 6 optimizer steps
  expect_near_weights(fitted, ema_of(recorder->after_step, steps, 0.8), "after fit");
  // Validation every half epoch (3 steps): each ran with the EMA of the steps so far.
  ASSERT_EQ(recorder->validated.size(), 6u);
  for (size_t v = 0; v < recorder->validated.size(); ++v)
    expect_near_weights(recorder->validated[v], ema_of(recorder->after_step, 3 * (v + 1), 0.8), "validation");
  // The last checkpoint (the last epoch's end) holds the averages as the model and the trained weights apart.
  const trainer::Checkpoint c = trainer::load_checkpoint(ckpt);
  const Tensor model_weight = c.tensors.at("model.net.0.weight");
  EXPECT_EQ(std::vector<float>(model_weight.data_ptr<float>(), model_weight.data_ptr<float>() + model_weight.numel()),
            fitted[0]);
  const Tensor trained = c.tensors.at("callbacks.WeightAveraging.trained.net.0.weight");
  EXPECT_EQ(std::vector<float>(trained.data_ptr<float>(), trained.data_ptr<float>() + trained.numel()),
            recorder->after_step.back()[0]);
  EXPECT_EQ(c.get("callbacks.WeightAveraging.num_updates"), "18");
}

// Manual optimization takes its steps inside training_step; the EMA follows them all the same.
struct ManualRegressor : trainer::TrainModule {
  nn::Linear fc{4, 1};
  ManualRegressor() : TrainModule("ManualRegressor") {
    register_module("fc", fc);
    set_automatic_optimization(false);
  }
  Tensor forward(const Tensor& x) override { return fc(x); }
  Tensor training_step(const data::Batch& b, int64_t) override {
    auto opt = optimizers()[0];
    Tensor loss = nn::F::mse_loss(fc(b[0]), b[1]);
    opt.zero_grad();
    manual_backward(loss);
    opt.step();
    return loss;
  }
  trainer::OptimizerSetup configure_optimizers() override {
    return std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.05});
  }
};

struct BatchEndRecorder : trainer::Callback {
  std::vector<Weights> seen;
  std::string state_key() const override { return "BatchEndRecorder"; }
  void on_train_batch_end(trainer::Trainer&, trainer::TrainModule& m, const Tensor&, const data::Batch&,
                          int64_t) override {
    seen.push_back(weights_of(m));
  }
};

TEST(WeightAveraging, EmaFollowsManualOptimizationSteps) {
  TempDir dir;
  manual_seed(3);
  ManualRegressor m;
  auto data = loader(regression_data(48), 8);
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  auto recorder = std::make_shared<BatchEndRecorder>();
  o.callbacks = {std::make_shared<trainer::WeightAveraging>(trainer::WeightAveragingOptions{.decay = 0.5}), recorder};
  trainer::Trainer(o).fit(m, *data);
  ASSERT_EQ(recorder->seen.size(), 12u);
  expect_near_weights(weights_of(m), ema_of(recorder->seen, 12, 0.5), "after fit");
}

struct CrashAtBatch : trainer::Callback {
  int64_t at, seen = 0;
  explicit CrashAtBatch(int64_t a) : at(a) {}
  std::string state_key() const override { return "CrashAtBatch"; }
  void on_train_batch_end(trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&,
                          int64_t) override {
    if (++seen == at) throw std::runtime_error("crash");
  }
};

Weights averaged_run(const std::string& root, const ResumeRun& run, const trainer::WeightAveragingOptions& wa,
                     int64_t crash_at, const std::string& resume_from) {
  std::vector<std::shared_ptr<trainer::Callback>> callbacks = {std::make_shared<trainer::WeightAveraging>(wa),
                                                               std::make_shared<SaveEveryStep>(root + "/last.ckpt")};
  if (crash_at > 0) callbacks.push_back(std::make_shared<CrashAtBatch>(crash_at));
  return fit_resume_net(root, run, std::move(callbacks), resume_from);
}

TEST(WeightAveraging, AResumedRunEndsBitForBitAsOneNeverStopped) {
  const ResumeRun run;
  for (const trainer::WeightAveragingOptions& wa :
       {trainer::WeightAveragingOptions{.decay = 0.9}, trainer::WeightAveragingOptions{.start_epoch = 1}}) {
    SCOPED_TRACE(wa.decay ? "EMA" : "SWA");
    TempDir ref;
    const Weights want = averaged_run(ref.str(), run, wa, 0, "");
    // 12 ends epoch 0; 18 follows a validation mid-epoch 1; 26 is in the last epoch.
    for (int64_t crash_at : {12, 18, 26}) {
      TempDir dir;
      EXPECT_THROW(averaged_run(dir.str(), run, wa, crash_at, ""), std::runtime_error);
      const std::string ckpt = dir / "last.ckpt";
      ASSERT_TRUE(std::filesystem::exists(ckpt));
      EXPECT_EQ(averaged_run(dir.str(), run, wa, 0, ckpt), want) << "crashed at batch " << crash_at;
    }
  }
}

// Fits with a ModelCheckpoint (last.ckpt in <root>/ckpt) listed before an EMA WeightAveraging; returns the
// weights the module ends with and the last checkpoint.
std::pair<Weights, trainer::Checkpoint> fit_averaged_with_checkpoint(const TempDir& dir, bool weights_only) {
  trainer::ModelCheckpointOptions mc;
  mc.dirpath = dir / "ckpt";
  mc.save_last = true;
  mc.save_weights_only = weights_only;
  const Weights fitted = fit_resume_net(dir.str(), ResumeRun{},
                                        {std::make_shared<trainer::ModelCheckpoint>(mc),
                                         std::make_shared<trainer::WeightAveraging>(trainer::WeightAveragingOptions{})},
                                        "", /*checkpointing=*/true);
  return {fitted, trainer::load_checkpoint(dir / "ckpt/last.ckpt")};
}

// A ModelCheckpoint listed before WeightAveraging still runs after it (the Trainer puts checkpoints last), so
// the last epoch's checkpoint holds the average with that epoch's update: the weights the module ends with.
// In the listed order it would hold the average before the last epoch's update, and differ.
TEST(WeightAveraging, ACheckpointListedFirstHoldsItsEpochsUpdate) {
  TempDir dir;
  const auto [fitted, c] = fit_averaged_with_checkpoint(dir, false);
  manual_seed(42);
  ResumeNet saved;
  nn::StateDict sd;
  for (const auto& [key, t] : c.tensors)
    if (key.rfind("model.", 0) == 0) sd[key.substr(6)] = t;
  saved.load_state_dict(sd);
  EXPECT_EQ(weights_of(saved), fitted);
}

// With save_weights_only the file holds the averages as its weights and nothing else (no trained copy, no
// averages outside the state dict): the weights the module ends with, in a file of the state dict's size.
TEST(WeightAveraging, AWeightsOnlyCheckpointHoldsTheAveragesAlone) {
  TempDir dir;
  const auto [fitted, c] = fit_averaged_with_checkpoint(dir, true);
  for (const auto& [key, t] : c.tensors) EXPECT_EQ(key.rfind("model.", 0), 0u) << key;
  manual_seed(42);
  ResumeNet saved;
  saved.load_state_dict(c.tensor_section("model"));
  EXPECT_EQ(c.tensor_section("model").size(), saved.state_dict().size());
  EXPECT_EQ(weights_of(saved), fitted);
}

TEST(WeightAveraging, RefusesOtherSettingsOnResume) {
  const ResumeRun run;
  TempDir dir;
  const std::string ckpt = dir / "last.ckpt";
  averaged_run(dir.str(), run, {.decay = 0.9}, 0, "");
  ASSERT_TRUE(std::filesystem::exists(ckpt));
  test::expect_error([&] { averaged_run(dir.str(), run, {.decay = 0.99}, 0, ckpt); },
                     {"the checkpoint's average was made with decay=0.9 start_epoch=0 use_buffers=1",
                      "this run asks for decay=0.99"});
}

}  // namespace
}  // namespace kiln::test
