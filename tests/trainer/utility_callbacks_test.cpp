// LambdaCallback, ThroughputMonitor and the prediction writers. LambdaCallback is checked against a Callback
// subclass that overrides every hook: the two must see the same calls in the same order. ThroughputMonitor's
// counts are checked against the data, its rates against each other (samples per batch, items per sample,
// FLOPs per batch: exact ratios) and against the time a step sleeps (an upper bound that no clock noise can
// break), and training's clock against the time validation sleeps. The writers' files are checked against the
// module's forward on the same inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kiln/trainer/lambda_callback.h"
#include "kiln/trainer/prediction_writer.h"
#include "kiln/trainer/throughput_monitor.h"
#include "tensor/test_util.h"
#include "trainer/callbacks_test_util.h"
#include "trainer/trainer_test_util.h"

namespace kiln::trainer::callbacks_testing {
namespace utility_callbacks_tests {  // named: this target is built as one unit

using kiln::test::expect_error;
using kiln::test::expect_tensor_near;
using kiln::test::values;

// `actual` equals `expected` in shape and, within tol, in every value.
void expect_same(const Tensor& actual, const Tensor& expected, double tol, const std::string& what = "") {
  expect_tensor_near(actual, values(expected), expected.sizes(), tol, tol, what);
}

// The same, as a LambdaCallback: one function per hook.
std::shared_ptr<LambdaCallback> lambda_recorder(std::vector<std::string>* calls) {
  LambdaHooks h;
#define KILN_LAMBDA(hook) h.hook = [calls](auto&&...) { calls->push_back(#hook); };
  KILN_LAMBDA(setup) KILN_LAMBDA(teardown) KILN_LAMBDA(on_fit_start) KILN_LAMBDA(on_fit_end)
  KILN_LAMBDA(on_sanity_check_start) KILN_LAMBDA(on_sanity_check_end) KILN_LAMBDA(on_train_start)
  KILN_LAMBDA(on_train_end) KILN_LAMBDA(on_train_epoch_start) KILN_LAMBDA(on_train_epoch_end)
  KILN_LAMBDA(on_train_batch_start) KILN_LAMBDA(on_train_batch_end) KILN_LAMBDA(on_validation_start)
  KILN_LAMBDA(on_validation_end) KILN_LAMBDA(on_validation_epoch_start) KILN_LAMBDA(on_validation_epoch_end)
  KILN_LAMBDA(on_validation_batch_start) KILN_LAMBDA(on_validation_batch_end) KILN_LAMBDA(on_test_start)
  KILN_LAMBDA(on_test_end) KILN_LAMBDA(on_test_epoch_start) KILN_LAMBDA(on_test_epoch_end)
  KILN_LAMBDA(on_test_batch_start) KILN_LAMBDA(on_test_batch_end) KILN_LAMBDA(on_predict_start)
  KILN_LAMBDA(on_predict_end) KILN_LAMBDA(on_predict_epoch_start) KILN_LAMBDA(on_predict_epoch_end)
  KILN_LAMBDA(on_predict_batch_start) KILN_LAMBDA(on_predict_batch_end) KILN_LAMBDA(on_before_backward)
  KILN_LAMBDA(on_after_backward) KILN_LAMBDA(on_before_optimizer_step) KILN_LAMBDA(on_before_zero_grad)
  KILN_LAMBDA(on_save_checkpoint) KILN_LAMBDA(on_load_checkpoint) KILN_LAMBDA(on_exception)
#undef KILN_LAMBDA
  return std::make_shared<LambdaCallback>(h);
}

// Fails in training_step at global step `fail_at_step` (-1: never).
struct Failing : Regression {
  int64_t fail_at_step = -1;
  Tensor training_step(const data::Batch& b, int64_t i) override {
    KILN_CHECK(trainer().global_step() != fail_at_step, "scripted failure");
    return Regression::training_step(b, i);
  }
};

// fit with validation, a sanity check and checkpoints; a resume; validate, test and predict; a failing fit.
void every_hook_of_a_session(const std::shared_ptr<Callback>& callback, const TempDir& dir) {
  Data d;
  auto run = [&](int64_t max_epochs) {
    TrainerOptions o = quiet(dir, max_epochs, {callback, std::make_shared<ModelCheckpoint>(
                                                             ModelCheckpointOptions{.save_last = true})});
    o.num_sanity_val_steps = 1;
    return o;
  };
  Failing m;
  Trainer(run(2)).fit(m, *d.train, d.val.get());
  Trainer(run(3)).fit(m, *d.train, d.val.get(), "last");
  Trainer t(run(1));
  t.validate(m, *d.val);
  t.test(m, *d.val);
  t.predict(m, *d.val);
  m.fail_at_step = 1;
  EXPECT_THROW(Trainer(run(5)).fit(m, *d.train), Error);
}

TEST(LambdaCallback, SeesEveryHookInTheOrderAnOverridingCallbackDoes) {
  std::vector<std::string> lambda_calls;
  auto rec = std::make_shared<kiln::test::HookRecorder>();
  {
    TempDir dir;
    every_hook_of_a_session(rec, dir);
  }
  {
    TempDir dir;
    every_hook_of_a_session(lambda_recorder(&lambda_calls), dir);
  }
  EXPECT_EQ(lambda_calls, rec->calls);
  // The session reaches every hook, so the comparison covers each function of LambdaHooks.
  for (const char* hook : {"on_sanity_check_start", "on_save_checkpoint", "on_load_checkpoint", "on_predict_batch_end",
                           "on_test_batch_end", "on_before_zero_grad", "on_exception", "teardown"}) {
    EXPECT_NE(std::find(rec->calls.begin(), rec->calls.end(), hook), rec->calls.end()) << hook;
  }
}

TEST(LambdaCallback, HooksNotGivenDoNothingAndTheNameIsItsKey) {
  TempDir dir;
  Data d;
  int64_t epochs_seen = -1;
  LambdaHooks h;
  h.on_train_epoch_end = [&](Trainer& t, TrainModule&) { epochs_seen = t.current_epoch(); };
  auto cb = std::make_shared<LambdaCallback>(h, "epochs");
  EXPECT_EQ(cb->state_key(), "epochs");
  Regression m;
  Trainer(quiet(dir, 3, {cb})).fit(m, *d.train);
  EXPECT_EQ(epochs_seen, 2);
}

// Callbacks that keep no state may share a checkpoint key (two LambdaCallbacks, two ThroughputMonitors), through
// a save and a resume; two that keep state still may not.
TEST(LambdaCallback, SeveralWithoutStateShareTheirKeyInCheckpoints) {
  TempDir dir;
  Data d;
  Regression m;
  auto callbacks = [] {
    return std::vector<std::shared_ptr<Callback>>{
        std::make_shared<LambdaCallback>(LambdaHooks{}), std::make_shared<LambdaCallback>(LambdaHooks{}),
        std::make_shared<ThroughputMonitor>(), std::make_shared<ThroughputMonitor>(),
        std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.save_last = true})};
  };
  Trainer(quiet(dir, 2, callbacks())).fit(m, *d.train);
  Trainer resumed(quiet(dir, 3, callbacks()));
  resumed.fit(m, *d.train, nullptr, "last");
  EXPECT_EQ(resumed.current_epoch(), 3);
  std::vector<std::shared_ptr<Callback>> two_stateful{std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{}),
                                                      std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{})};
  expect_error([&] { Trainer(quiet(dir, 1, two_stateful)).fit(m, *d.train); },
               {"two callbacks with state to checkpoint have the key", "ModelCheckpoint"});
}

// ---- ThroughputMonitor ----

TEST(ThroughputMonitor, CountsAndRatesOfTraining) {
  TempDir dir;
  Data d;  // 8 examples, 2 batches of 4 an epoch
  auto monitor = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{
      .length_fn = [](const data::Batch& b) { return b[0].numel(); },  // 2 items a sample
      .flops_per_batch = 1000,
      .available_flops = 1e6,
      .window_size = 3});
  auto logger = std::make_shared<RecordingLogger>();
  logger->dir = dir.str();
  TrainerOptions o = quiet(dir, 5, {monitor});
  o.loggers = {logger};
  o.log_every_n_steps = 4;
  Regression m;
  m.step_sleep_seconds = 0.02;
  Trainer(o).fit(m, *d.train);

  const auto& r = monitor->last_metrics();
  EXPECT_EQ(r.at("train/batches"), 10);
  EXPECT_EQ(r.at("train/samples"), 40);
  EXPECT_EQ(r.at("train/lengths"), 80);
  EXPECT_GE(r.at("train/time"), 10 * 0.02);
  const double bps = r.at("train/device/batches_per_sec");
  EXPECT_GT(bps, 0);
  EXPECT_LE(bps, 1 / 0.02);  // every batch sleeps 0.02 s
  EXPECT_DOUBLE_EQ(r.at("train/device/samples_per_sec"), 4 * bps);
  EXPECT_DOUBLE_EQ(r.at("train/device/items_per_sec"), 8 * bps);
  EXPECT_DOUBLE_EQ(r.at("train/device/flops_per_sec"), 1000 * bps);
  EXPECT_DOUBLE_EQ(r.at("train/device/mfu"), 1000 * bps / 1e6);
  EXPECT_EQ(r.count("train/batches_per_sec"), 0u);  // one process: no job-wide rates
  // Logged at the steps that reach a multiple of 4; the rates from the third batch on.
  EXPECT_EQ(logger->steps_with("train/batches"), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(logger->steps_with("train/device/batches_per_sec"), (std::vector<int64_t>{4, 8}));
}

TEST(ThroughputMonitor, RatesWaitForAFullWindow) {
  TempDir dir;
  Data d;
  auto monitor = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.window_size = 5});
  Regression m;
  Trainer(quiet(dir, 2, {monitor})).fit(m, *d.train);  // 4 batches
  EXPECT_EQ(monitor->last_metrics().at("train/batches"), 4);
  EXPECT_EQ(monitor->last_metrics().count("train/device/batches_per_sec"), 0u);
  // A second fit on the same monitor, too short to fill its window, reports no rates of the first.
  auto reused = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.window_size = 3});
  Trainer(quiet(dir, 2, {reused})).fit(m, *d.train);
  ASSERT_EQ(reused->last_metrics().count("train/device/batches_per_sec"), 1u);
  Regression fresh;
  Trainer(quiet(dir, 1, {reused})).fit(fresh, *d.train);
  EXPECT_EQ(reused->last_metrics().at("train/batches"), 2);
  EXPECT_EQ(reused->last_metrics().count("train/device/batches_per_sec"), 0u);
  expect_error([] { ThroughputMonitor({.window_size = 1}); }, {"window_size = 1", ">= 2"});
  expect_error([] { ThroughputMonitor({.flops_per_batch = -1}); }, {"flops_per_batch"});
}

TEST(ThroughputMonitor, TrainingClockStopsWhileFitValidates) {
  struct SlowValidation : Regression {
    Tensor validation_step(const data::Batch& b, int64_t i) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      return Regression::validation_step(b, i);
    }
  };
  TempDir dir;
  Data d;
  auto monitor = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.window_size = 2});
  auto logger = std::make_shared<RecordingLogger>();
  logger->dir = dir.str();
  TrainerOptions o = quiet(dir, 2, {monitor});
  o.loggers = {logger};
  o.num_sanity_val_steps = 1;  // not measured: neither its batch nor its time counts
  SlowValidation m;
  const auto start = std::chrono::steady_clock::now();
  Trainer(o).fit(m, *d.train, d.val.get());  // a sanity batch, then 2 validations of 2 batches: >= 1.25 s
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_GE(wall, 1.25);
  const auto& r = monitor->last_metrics();
  EXPECT_LT(r.at("train/time"), wall - 1.15);
  // Each validation on its own clock: the last one's two batches, each sleeping 0.25 s.
  EXPECT_EQ(r.at("validate/batches"), 2);
  EXPECT_EQ(r.at("validate/samples"), 8);
  EXPECT_GE(r.at("validate/time"), 0.5);
  EXPECT_LT(r.at("validate/time"), wall - 0.75);
  EXPECT_GT(r.at("validate/device/batches_per_sec"), 0);
  EXPECT_LE(r.at("validate/device/batches_per_sec"), 1 / 0.25);
  // Logged once per validation, at the global step it ran after (2 training batches an epoch).
  using Point = std::pair<int64_t, double>;
  EXPECT_EQ(logger->series("validate/batches"), (std::vector<Point>{{2, 2}, {4, 2}}));
}

TEST(ThroughputMonitor, EvaluationRunsAlone) {
  TempDir dir;
  Data d;
  auto monitor = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.window_size = 2});
  auto logger = std::make_shared<RecordingLogger>();
  logger->dir = dir.str();
  TrainerOptions o = quiet(dir, 1, {monitor});
  o.loggers = {logger};
  o.log_every_n_steps = 1;
  Regression m;
  Trainer t(o);
  t.validate(m, *d.val);
  t.test(m, *d.val);
  t.predict(m, *d.val);
  for (const char* stage : {"validate", "test", "predict"}) {
    const std::string p = stage;
    EXPECT_EQ(monitor->last_metrics().at(p + "/batches"), 2) << stage;
    EXPECT_EQ(monitor->last_metrics().at(p + "/samples"), 8) << stage;
    EXPECT_GT(monitor->last_metrics().at(p + "/device/samples_per_sec"), 0) << stage;
    EXPECT_EQ(logger->steps_with(p + "/batches"), (std::vector<int64_t>{1, 2})) << stage;
  }
}

// ---- prediction writers ----

// Keeps what each write function was given.
struct KeepingWriter : BasePredictionWriter {
  using BasePredictionWriter::BasePredictionWriter;
  std::vector<int64_t> batch_indices;
  std::vector<Tensor> batch_predictions;
  std::vector<std::vector<Tensor>> epochs;
  void write_on_batch_end(Trainer&, TrainModule&, const Tensor& prediction, const data::Batch&,
                          int64_t batch_idx) override {
    batch_indices.push_back(batch_idx);
    batch_predictions.push_back(prediction);
  }
  void write_on_epoch_end(Trainer&, TrainModule&, const std::vector<Tensor>& predictions) override {
    epochs.push_back(predictions);
  }
};

TEST(PredictionWriter, EachIntervalCallsItsWrites) {
  TempDir dir;
  Data d;
  Regression m;
  for (const std::string interval : {"batch", "epoch", "batch_and_epoch"}) {
    auto writer = std::make_shared<KeepingWriter>(interval);
    Trainer t(quiet(dir, 1, {writer}));
    const std::vector<Tensor> out = t.predict(m, *d.val);
    const bool per_batch = interval != "epoch", per_epoch = interval != "batch";
    EXPECT_EQ(writer->batch_indices, (per_batch ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{})) << interval;
    ASSERT_EQ(writer->epochs.size(), per_epoch ? 1u : 0u) << interval;
    if (per_epoch) {
      ASSERT_EQ(writer->epochs[0].size(), out.size());
      for (size_t i = 0; i < out.size(); ++i) expect_same(writer->epochs[0][i], out[i], 0, interval);
    }
    if (per_batch) {
      for (size_t i = 0; i < out.size(); ++i) expect_same(writer->batch_predictions[i], out[i], 0, interval);
    }
  }
  expect_error([] { KeepingWriter("sometimes"); }, {"write_interval 'sometimes'", "batch_and_epoch"});
}

TEST(PredictionWriter, SafetensorsFilesHoldTheModelsOutputs) {
  TempDir dir;
  Data d;
  Regression m;
  const Tensor x = d.dataset->tensors()[0];
  Tensor want;
  {
    NoGradGuard no_grad;
    want = m.fc(x);
  }
  const std::string folder = (dir.path / "predictions").string();
  auto per_epoch = std::make_shared<SafetensorsPredictionWriter>(folder);
  Trainer(quiet(dir, 1, {per_epoch})).predict(m, *d.val);
  ASSERT_EQ(per_epoch->written(), (std::vector<std::string>{folder + "/predictions_0.safetensors"}));
  expect_same(serialize::load_safetensors(folder + "/predictions_0.safetensors").tensors.at("predictions"), want, 1e-6);

  auto per_batch = std::make_shared<SafetensorsPredictionWriter>(folder, "batch");
  EXPECT_TRUE(Trainer(quiet(dir, 1, {per_batch})).predict(m, *d.val, "", /*return_predictions=*/false).empty());
  ASSERT_EQ(per_batch->written().size(), 2u);
  for (int64_t b = 0; b < 2; ++b) {
    const std::string path = folder + "/predictions_0_" + std::to_string(b) + ".safetensors";
    EXPECT_EQ(per_batch->written()[b], path);
    expect_same(serialize::load_safetensors(path).tensors.at("predictions"), want.narrow(0, 4 * b, 4), 1e-6);
  }
}

TEST(PredictionWriter, SafetensorsRefusesPredictionsThatDoNotJoin) {
  struct Ragged : Regression {
    Tensor predict_step(const data::Batch& b, int64_t i) override { return zeros({4, i + 1}); }
  };
  TempDir dir;
  Data d;
  Ragged m;
  auto writer = std::make_shared<SafetensorsPredictionWriter>(dir.str());
  expect_error([&] { Trainer(quiet(dir, 1, {writer})).predict(m, *d.val); },
               {"batch 1", "shape (4, 2)", "(4, 1)", "write_interval 'batch'"});
  EXPECT_TRUE(writer->written().empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path / "predictions_0.safetensors"));
}

}  // namespace utility_callbacks_tests
}  // namespace kiln::trainer::callbacks_testing
