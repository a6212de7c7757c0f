// The built-in callbacks other than ModelCheckpoint (model_checkpoint_test.cpp), driven by the real Trainer on
// a tiny linear regression (callbacks_test_util.h). The module logs a scripted value per epoch ("val/score",
// from a vector indexed by the epoch), so that each test knows by hand at which epoch EarlyStopping must stop;
// expectations are written out from the script, never computed by the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/trainer/callbacks.h"
#include "kiln/trainer/trainer.h"
#include "tensor/test_util.h"
#include "trainer/callbacks_test_util.h"

namespace kiln::trainer {
namespace {

using namespace callbacks_testing;
using test::expect_error;

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

// ---- EarlyStopping ----

// Fits with an EarlyStopping over the scripted scores (20 epochs at most); returns the callback.
std::shared_ptr<EarlyStopping> fit_early_stopping(EarlyStoppingOptions es_options, std::vector<double> scores,
                                                  int64_t* epochs_run = nullptr) {
  TempDir dir;
  Data d;
  Regression m;
  m.val_scores = std::move(scores);
  auto es = std::make_shared<EarlyStopping>(es_options);
  Trainer t(quiet(dir, 20, {es}));
  t.fit(m, *d.train, d.val.get());
  EXPECT_EQ(m.fit_validations, t.current_epoch());  // one validation per epoch run
  if (epochs_run) *epochs_run = t.current_epoch();
  return es;
}

TEST(CallbacksEarlyStopping, StopsWhenPatienceRunsOut) {
  // best 1.0 (e0), 0.9 (e1); e2 and e3 do not improve: wait 1, 2 -> stop at epoch 3.
  int64_t epochs = 0;
  auto es = fit_early_stopping({.monitor = "val/score", .patience = 2}, {1.0, 0.9, 0.95, 0.91, 0.5, 0.4}, &epochs);
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_EQ(epochs, 4);
  EXPECT_EQ(es->best_score(), 0.9);
  EXPECT_EQ(es->wait_count(), 2);
  EXPECT_NE(es->stopping_reason().find("did not improve"), std::string::npos) << es->stopping_reason();
}

TEST(CallbacksEarlyStopping, MinDeltaInMaxMode) {
  // max, min_delta 0.02: e1 (0.55 > 0.5 + 0.02) improves; e2 (0.56) and e3 (0.565) are within 0.02 of 0.55.
  auto es = fit_early_stopping({.monitor = "val/score", .mode = "max", .patience = 2, .min_delta = 0.02},
                               {0.5, 0.55, 0.56, 0.565, 0.6, 0.7});
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_EQ(es->best_score(), 0.55);
  // Without min_delta every epoch improves: no stop in the 20 epochs.
  auto plain = fit_early_stopping({.monitor = "val/score", .mode = "max", .patience = 2},
                                  {0.5, 0.55, 0.56, 0.565, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
                                   1.7, 1.8, 1.9, 2.0, 2.1});
  EXPECT_EQ(plain->stopped_epoch(), -1);
}

TEST(CallbacksEarlyStopping, StoppingAndDivergenceThresholds) {
  // min mode: 0.05 < stopping_threshold 0.1 at epoch 2 stops at once, patience notwithstanding.
  auto good = fit_early_stopping({.monitor = "val/score", .patience = 10, .stopping_threshold = 0.1},
                                 {0.5, 0.3, 0.05, 0.01});
  EXPECT_EQ(good->stopped_epoch(), 2);
  EXPECT_NE(good->stopping_reason().find("stopping threshold"), std::string::npos) << good->stopping_reason();
  // 20 > divergence_threshold 10 at epoch 2.
  auto bad = fit_early_stopping({.monitor = "val/score", .patience = 10, .divergence_threshold = 10.0},
                                {1.0, 2.0, 20.0, 0.5});
  EXPECT_EQ(bad->stopped_epoch(), 2);
  EXPECT_NE(bad->stopping_reason().find("divergence"), std::string::npos) << bad->stopping_reason();
  // max mode: the thresholds flip (0.95 > 0.9 stops at epoch 1).
  auto max_mode = fit_early_stopping(
      {.monitor = "val/score", .mode = "max", .patience = 10, .stopping_threshold = 0.9}, {0.5, 0.95, 0.96});
  EXPECT_EQ(max_mode->stopped_epoch(), 1);
}

TEST(CallbacksEarlyStopping, NonFiniteStopsWithCheckFinite) {
  auto es = fit_early_stopping({.monitor = "val/score", .patience = 10}, {1.0, 0.9, kNaN, 0.5});
  EXPECT_EQ(es->stopped_epoch(), 2);
  EXPECT_NE(es->stopping_reason().find("not finite"), std::string::npos) << es->stopping_reason();
  // Without check_finite a NaN never improves: e1..e3 wait 1..3 -> stop at epoch 3 with patience 3.
  auto lax = fit_early_stopping({.monitor = "val/score", .patience = 3, .check_finite = false},
                                {1.0, kNaN, kNaN, kNaN, 0.1});
  EXPECT_EQ(lax->stopped_epoch(), 3);
  EXPECT_EQ(lax->best_score(), 1.0);
}

TEST(CallbacksEarlyStopping, ChecksAtTrainEpochEndWithoutValidation) {
  // No validation loader: the check runs at the training epoch's end, on a training metric. The loss of a
  // regression with lr 0 is constant: no improvement after epoch 0 -> stop at epoch 1 with patience 1.
  struct Frozen : Regression {
    OptimizerSetup configure_optimizers() override {
      return std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.0});
    }
  };
  TempDir dir;
  Data d;
  Frozen m;
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "train/loss", .patience = 1});
  Trainer t(quiet(dir, 10, {es}));
  t.fit(m, *d.train);
  EXPECT_EQ(es->stopped_epoch(), 1);
  EXPECT_EQ(t.current_epoch(), 2);
}

TEST(CallbacksEarlyStopping, IgnoresTheSanityCheck) {
  // The sanity check logs epoch 0's score (1.0) too; were it counted, epoch 0 would not improve on it and
  // patience 1 would stop there. Counted right: epoch 0 improves, epoch 1 (2.0) does not -> stop at 1.
  TempDir dir;
  Data d;
  Regression m;
  m.val_scores = {1.0, 2.0, 0.5};
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val/score", .patience = 1});
  TrainerOptions o = quiet(dir, 5, {es});
  o.num_sanity_val_steps = 2;
  Trainer t(o);
  t.fit(m, *d.train, d.val.get());
  EXPECT_EQ(es->stopped_epoch(), 1);
}

TEST(CallbacksEarlyStopping, MissingMonitorIsAnErrorNamingTheLoggedMetrics) {
  TempDir dir;
  Data d;
  Regression m;
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val/nope"});
  Trainer t(quiet(dir, 3, {es}));
  expect_error([&] { t.fit(m, *d.train, d.val.get()); }, {"EarlyStopping", "val/nope", "val/score"});
}

TEST(CallbacksEarlyStopping, StateRoundTrip) {
  auto es = fit_early_stopping({.monitor = "val/score", .patience = 3}, {1.0, 0.5, 0.6, 0.7, 0.8});
  EarlyStopping copy({.monitor = "val/score", .patience = 3});
  copy.load_checkpoint_state(es->checkpoint_state());
  EXPECT_EQ(copy.wait_count(), es->wait_count());
  EXPECT_EQ(copy.best_score(), 0.5);
  EXPECT_EQ(copy.stopped_epoch(), 4);
  EXPECT_NE(EarlyStopping({.monitor = "a"}).state_key(), EarlyStopping({.monitor = "b"}).state_key());
}

// ---- LearningRateMonitor ----

struct Scheduled : Regression {
  std::string interval = "epoch";
  OptimizerSetup configure_optimizers() override {
    auto opt = std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.1});
    SchedulerConfig s;
    s.scheduler = std::make_shared<optim::StepLR>(*opt, /*step_size=*/2, /*gamma=*/0.5);
    s.interval = interval;
    return OptimizerSetup({opt}, {s});
  }
};

TEST(CallbacksLearningRateMonitor, FollowsStepLRPerEpoch) {
  TempDir dir;
  Data d;
  Scheduled m;
  auto logger = std::make_shared<RecordingLogger>();
  logger->dir = dir.str();
  auto lrm = std::make_shared<LearningRateMonitor>(LearningRateMonitorOptions{.logging_interval = "epoch"});
  TrainerOptions o = quiet(dir, 5, {lrm});
  o.loggers = {logger};
  Trainer t(o);
  t.fit(m, *d.train);
  // StepLR(step_size 2, gamma 0.5) from 0.1: epochs 0..4 train at 0.1, 0.1, 0.05, 0.05, 0.025; each logged at
  // its epoch's first global step (2 steps per epoch).
  const std::vector<std::pair<int64_t, double>> expected = {{0, 0.1}, {2, 0.1}, {4, 0.05}, {6, 0.05}, {8, 0.025}};
  const auto got = logger->series("lr-SGD");
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, expected[i].first);
    EXPECT_DOUBLE_EQ(got[i].second, expected[i].second);
  }
  EXPECT_DOUBLE_EQ(lrm->last_values().at("lr-SGD"), 0.025);
  EXPECT_DOUBLE_EQ(t.optimizers()[0]->param_groups()[0].lr(), 0.025);  // 5 steps: 0.1 * 0.5^(5 / 2)
}

TEST(CallbacksLearningRateMonitor, FollowsStepLRPerStep) {
  TempDir dir;
  Data d;
  Scheduled m;
  m.interval = "step";
  auto lrm = std::make_shared<LearningRateMonitor>();  // "": per step, since the scheduler steps per step
  TrainerOptions o = quiet(dir, 3, {lrm});
  o.log_every_n_steps = 1;
  auto logger = std::make_shared<RecordingLogger>();
  logger->dir = dir.str();
  o.loggers = {logger};
  Trainer t(o);
  t.fit(m, *d.train);
  const auto got = logger->series("lr-SGD");
  ASSERT_EQ(got.size(), 6u);  // steps 0..5
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, static_cast<int64_t>(i));
    EXPECT_DOUBLE_EQ(got[i].second, 0.1 * std::pow(0.5, static_cast<double>(i / 2)));
  }
}

TEST(CallbacksLearningRateMonitor, NamesGroupsAndOptimizers) {
  struct TwoOptimizers : Regression {
    nn::Linear extra{2, 1};
    TwoOptimizers() { register_module("extra", extra); }
    OptimizerSetup configure_optimizers() override {
      auto a = std::make_shared<optim::SGD>(std::vector<Tensor>{fc->weight}, optim::SGDOptions{.lr = 0.1});
      a->add_param_group({fc->bias}, optim::SGDOptions{.lr = 0.2});
      auto b = std::make_shared<optim::SGD>(extra->parameters(), optim::SGDOptions{.lr = 0.3});
      return OptimizerSetup({a, b});
    }
  };
  TempDir dir;
  Data d;
  TwoOptimizers m;
  auto lrm = std::make_shared<LearningRateMonitor>();
  Trainer t(quiet(dir, 1, {lrm}));
  t.fit(m, *d.train);
  EXPECT_EQ(lrm->last_values(),
            (std::map<std::string, double>{{"lr-SGD/pg1", 0.1}, {"lr-SGD/pg2", 0.2}, {"lr-SGD-1", 0.3}}));
}

// ---- ProgressBar ----

TEST(CallbacksProgressBar, PlainOutputHasEpochSummariesWithMetrics) {
  TempDir dir;
  Data d;
  Regression m;
  m.val_scores = {0.125, 0.5, 0.75};
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  TrainerOptions o = quiet(dir, 3, {std::make_shared<ProgressBar>(ProgressBarOptions{.out = out})});
  o.enable_progress_bar = true;
  Trainer t(o);
  t.fit(m, *d.train, d.val.get());
  t.test(m, *d.val);
  const std::string text = read_all(out);
  std::fclose(out);
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  std::vector<std::string> lines;
  for (size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  std::vector<std::string> summaries;
  for (const auto& l : lines) {
    if (l.rfind("Epoch ", 0) == 0 && l.find(" batches in ") != std::string::npos) summaries.push_back(l);
  }
  ASSERT_EQ(summaries.size(), 3u) << text;
  const char* vals[] = {"val/score=0.125", "val/score=0.5", "val/score=0.75"};
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(summaries[e].rfind("Epoch " + std::to_string(e + 1) + "/3:", 0), 0u) << summaries[e];
    EXPECT_NE(summaries[e].find(vals[e]), std::string::npos) << summaries[e];
    EXPECT_NE(summaries[e].find("train/loss="), std::string::npos) << summaries[e];
  }
  // Two batches per epoch, about ten lines asked: one batch line per epoch before its summary.
  EXPECT_NE(text.find("Epoch 1/3 [1/2]"), std::string::npos) << text;
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("Test: test/score=0.25", 0), 0u) << text;
}

TEST(CallbacksProgressBar, ForcedTtyRedrawsInPlace) {
  TempDir dir;
  Data d;
  Regression m;
  m.val_scores = {0.5};
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  auto bar = std::make_shared<ProgressBar>(ProgressBarOptions{.out = out, .force_tty = true, .refresh_seconds = 0});
  TrainerOptions o = quiet(dir, 2, {bar});
  o.enable_progress_bar = true;
  Trainer t(o);
  t.fit(m, *d.train, d.val.get());
  const std::string text = read_all(out);
  std::fclose(out);
  EXPECT_TRUE(bar->is_tty());
  EXPECT_GE(std::count(text.begin(), text.end(), '\r'), 6) << text;  // epoch start, 2 batches, validation, end
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;  // one finished line per epoch
  const std::string first = text.substr(0, text.find('\n'));
  const std::string last_draw = first.substr(first.rfind('\r') + 1);
  EXPECT_EQ(last_draw.rfind("Epoch 1/2 ", 0), 0u) << last_draw;
  EXPECT_NE(last_draw.find(" 2/2 "), std::string::npos) << last_draw;
  EXPECT_NE(last_draw.find("val/score=0.5"), std::string::npos) << last_draw;
  EXPECT_NE(text.find("Validation "), std::string::npos) << text;
}

// ---- ModelSummary ----

struct Mlp : nn::Module {
  nn::Linear fc1{784, 512};
  nn::ReLU act;
  nn::Sequential head{nn::Linear(512, 10), nn::ReLU()};
  Mlp() : nn::Module("Mlp") {
    register_module("fc1", fc1);
    register_module("act", act);
    register_module("head", head);
  }
};

TEST(CallbacksModelSummary, CountsMatchHandComputedOnes) {
  Mlp net;
  const ModuleSummary s = summarize(net, 1);
  ASSERT_EQ(s.layers.size(), 3u);
  EXPECT_EQ(s.layers[0].name, "fc1");
  EXPECT_EQ(s.layers[0].type, "Linear");
  EXPECT_EQ(s.layers[0].params, 784 * 512 + 512);  // 401,920
  EXPECT_EQ(s.layers[1].params, 0);
  EXPECT_EQ(s.layers[2].params, 512 * 10 + 10);  // 5,130
  EXPECT_EQ(s.total_params, 407050);
  EXPECT_EQ(s.total_bytes, 407050 * 4);
  const std::string text = model_summary(net, 1);
  for (const char* part : {"fc1", "Linear", "401,920", "head", "Sequential", "5,130", "407,050", "Trainable params",
                           "Non-trainable params", "Total params", "1.628"}) {
    EXPECT_NE(text.find(part), std::string::npos) << "lacks " << part << ":\n" << text;
  }
  // Deeper: the Sequential's layers appear by dotted name.
  const ModuleSummary deep = summarize(net, -1);
  ASSERT_EQ(deep.layers.size(), 5u);
  EXPECT_EQ(deep.layers[3].name, "head.0");
  EXPECT_EQ(deep.layers[3].params, 5130);
  EXPECT_TRUE(summarize(net, 0).layers.empty());
  // Frozen parameters count as non-trainable.
  net.fc1->weight.requires_grad_(false);
  const ModuleSummary frozen = summarize(net, 1);
  EXPECT_EQ(frozen.non_trainable_params, 784 * 512);
  EXPECT_EQ(frozen.trainable_params, 512 + 5130);
}

TEST(CallbacksModelSummary, PrintsAtFitStart) {
  TempDir dir;
  Data d;
  Regression m;
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  TrainerOptions o = quiet(dir, 1, {std::make_shared<ModelSummary>(ModelSummaryOptions{.out = out})});
  o.enable_model_summary = true;
  Trainer t(o);
  t.fit(m, *d.train);
  const std::string text = read_all(out);
  std::fclose(out);
  EXPECT_NE(text.find("fc"), std::string::npos) << text;
  EXPECT_NE(text.find("3         Total params"), std::string::npos) << text;  // 2 weights + 1 bias
}

// ---- Timer ----

TEST(CallbacksTimer, StopsTheRunAndKeepsItsTime) {
  TempDir dir;
  Data d;
  Regression m;
  m.step_sleep_seconds = 0.005;
  auto timer = std::make_shared<Timer>(TimerOptions{.duration = 0.05, .verbose = false});
  Trainer t(quiet(dir, 1000, {timer}));
  const auto start = std::chrono::steady_clock::now();
  t.fit(m, *d.train);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(t.current_epoch(), 1000);
  EXPECT_GE(timer->time_elapsed(), 0.05);
  EXPECT_LT(wall, 2.0);

  Timer resumed({.duration = 10});
  resumed.load_checkpoint_state(timer->checkpoint_state());
  EXPECT_DOUBLE_EQ(resumed.time_elapsed(), timer->time_elapsed());
  expect_error([] { Timer({.duration = 0}); }, {"Timer", "duration"});
}

// ---- add_default_callbacks ----

TEST(CallbacksDefaults, AddedAndRefusedAsTheOptionsSay) {
  auto count = [](const std::vector<std::shared_ptr<Callback>>& cbs, auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return std::count_if(cbs.begin(), cbs.end(), [](const auto& c) { return dynamic_cast<T*>(c.get()) != nullptr; });
  };
  TrainerOptions o;
  std::vector<std::shared_ptr<Callback>> cbs;
  add_default_callbacks(o, cbs);
  EXPECT_EQ(cbs.size(), 3u);
  EXPECT_EQ(count(cbs, static_cast<ModelCheckpoint*>(nullptr)), 1);
  EXPECT_EQ(count(cbs, static_cast<ProgressBar*>(nullptr)), 1);
  EXPECT_EQ(count(cbs, static_cast<ModelSummary*>(nullptr)), 1);

  // One given: not added again.
  auto mine = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.monitor = "val/loss"});
  cbs = {mine};
  add_default_callbacks(o, cbs);
  EXPECT_EQ(count(cbs, static_cast<ModelCheckpoint*>(nullptr)), 1);
  EXPECT_EQ(cbs.back(), mine);  // checkpoints last

  // All off: nothing added.
  o.enable_checkpointing = o.enable_progress_bar = o.enable_model_summary = false;
  cbs.clear();
  add_default_callbacks(o, cbs);
  EXPECT_TRUE(cbs.empty());

  // A ModelCheckpoint with checkpointing off: refused, here and by the Trainer.
  cbs = {mine};
  expect_error([&] { add_default_callbacks(o, cbs); }, {"enable_checkpointing = false", "ModelCheckpoint"});
  o.callbacks = {mine};
  o.logger = false;
  expect_error([&] { Trainer t(o); }, {"enable_checkpointing = false"});
}

// ---- GradientAccumulationScheduler ----

// Records, at each epoch's end, the optimizer steps so far and the accumulation factor in force.
// And the Trainer's estimate of the fit's steps.
struct StepRecorder : Callback {
  std::vector<int64_t> steps, factors;
  int64_t estimated = -2;
  void on_train_epoch_end(Trainer& t, TrainModule&) override {
    steps.push_back(t.global_step());
    factors.push_back(t.accumulate_grad_batches());
    estimated = t.estimated_stepping_batches();
  }
};

TEST(CallbacksGradientAccumulationScheduler, SetsEachEpochsFactor) {
  GradientAccumulationScheduler schedule(std::map<int64_t, int64_t>{{2, 2}, {5, 4}});
  const int64_t want[] = {1, 1, 2, 2, 2, 4, 4};  // before the first key: 1
  for (int64_t e = 0; e < 7; ++e) EXPECT_EQ(schedule.factor(e), want[e]) << e;

  // 2 batches an epoch: epochs 0-1 step twice, epochs 2-3 once (both batches in one step).
  TempDir dir;
  Data d;
  Regression m;
  auto recorder = std::make_shared<StepRecorder>();
  Trainer t(quiet(dir, 4, {std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{2, 2}}),
                           recorder}));
  t.fit(m, *d.train, d.val.get());
  EXPECT_EQ(recorder->steps, (std::vector<int64_t>{2, 4, 5, 6}));
  EXPECT_EQ(recorder->factors, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(recorder->estimated, 6) << "the estimate counts each epoch's steps with its factor";
  // A schedule whose last change comes after the fit's end, and one whose factor exceeds the epoch's batches.
  for (auto [scheduling, want] : {std::pair{std::map<int64_t, int64_t>{{1, 2}, {9, 4}}, 5},
                                  std::pair{std::map<int64_t, int64_t>{{0, 3}}, 4}}) {
    auto rec = std::make_shared<StepRecorder>();
    Regression fresh;
    Trainer(quiet(dir, 4, {std::make_shared<GradientAccumulationScheduler>(scheduling), rec})).fit(fresh, *d.train);
    EXPECT_EQ(rec->steps.back(), want);
    EXPECT_EQ(rec->estimated, want);
  }

  expect_error([] { GradientAccumulationScheduler(std::map<int64_t, int64_t>{}); }, {"the scheduling is empty"});
  expect_error([] { GradientAccumulationScheduler(std::map<int64_t, int64_t>{{1, 0}}); }, {"factor 0 for epoch 1"});
  TrainerOptions both = quiet(dir, 1, {std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 2}})});
  both.accumulate_grad_batches = 2;
  Regression other;
  expect_error([&] { Trainer(both).fit(other, *d.train); }, {"accumulate_grad_batches is 2", "leave it at 1"});
}

}  // namespace
}  // namespace kiln::trainer
