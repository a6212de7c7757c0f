// The Trainer's loops: the order of hooks, what each option changes (accumulation, clipping, limits,
// validation cadence, max_steps, schedulers), how logged values are reduced, and its errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/trainer/busy_cores.h"
#include "kiln/trainer/model_checkpoint.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

using trainer::busy_cores_warning;
using trainer::Callback;
using trainer::Trainer;
using trainer::TrainModule;


// A module that records its own hooks into a shared list, to check that it runs before the callbacks.
struct HookedRegressor : Regressor {
  std::vector<std::string>* out = nullptr;
  void on_train_epoch_start(Trainer&, TrainModule&) override { out->push_back("module:on_train_epoch_start"); }
};

std::vector<std::string> train_batch_hooks(bool steps) {
  std::vector<std::string> v{"on_train_batch_start", "on_before_backward", "on_after_backward"};
  if (steps) v.insert(v.end(), {"on_before_optimizer_step", "on_before_zero_grad"});
  v.push_back("on_train_batch_end");
  return v;
}

std::vector<std::string> validation_hooks(int batches) {
  std::vector<std::string> v{"on_validation_start", "on_validation_epoch_start"};
  for (int i = 0; i < batches; ++i) v.insert(v.end(), {"on_validation_batch_start", "on_validation_batch_end"});
  v.insert(v.end(), {"on_validation_epoch_end", "on_validation_end"});
  return v;
}

TEST(BusyCores, WarnsOnlyWhenOtherLoadFillsTheCoresKilnNeedsAndNothingWasChosen) {
  EXPECT_EQ(busy_cores_warning(0.3, 2, 2, false), "");  // a quiet machine
  const std::string w = busy_cores_warning(1.2, 2, 2, false);
  EXPECT_NE(w.find("load average is 1.2 on 2 CPUs"), std::string::npos) << w;
  EXPECT_NE(w.find("OMP_WAIT_POLICY=passive"), std::string::npos) << w;
  EXPECT_EQ(busy_cores_warning(1.2, 2, 2, true), "");   // OMP_* already set by the user
  EXPECT_EQ(busy_cores_warning(5.0, 2, 1, false), "");  // one thread: nothing spins
  EXPECT_EQ(busy_cores_warning(3.5, 8, 4, false), "");  // 4 spare CPUs take the load
  EXPECT_NE(busy_cores_warning(5.0, 8, 4, false), "");
}

TEST(TrainerHooks, FitCallsEveryHookInTheDocumentedOrder) {
  TempDir dir;
  auto rec = std::make_shared<HookRecorder>();
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.num_sanity_val_steps = 1;
  o.accumulate_grad_batches = 2;
  o.limit_val_batches = 2;
  o.callbacks = {rec};
  Regressor m;
  auto train = loader(regression_data(12), 4);  // 3 batches: steps after batches 2 and 3 (the epoch's last)
  auto val = loader(regression_data(12, 8), 4);
  Trainer(o).fit(m, *train, val.get());

  std::vector<std::string> want{"setup", "on_fit_start", "on_sanity_check_start"};
  for (auto& h : validation_hooks(1)) want.push_back(h);
  want.insert(want.end(), {"on_sanity_check_end", "on_train_start", "on_train_epoch_start"});
  for (bool steps : {false, true, true}) {
    for (auto& h : train_batch_hooks(steps)) want.push_back(h);
  }
  for (auto& h : validation_hooks(2)) want.push_back(h);
  want.insert(want.end(), {"on_train_epoch_end", "on_train_end", "on_fit_end", "teardown"});
  EXPECT_EQ(rec->calls, want);
}

TEST(TrainerHooks, TestRunsItsOwnHooksAndTheModuleHookRunsFirst) {
  TempDir dir;
  std::vector<std::string> order;
  struct Tagger : Callback {
    std::vector<std::string>* out;
    void on_train_epoch_start(Trainer&, TrainModule&) override { out->push_back("callback:on_train_epoch_start"); }
  };
  auto tag = std::make_shared<Tagger>();
  tag->out = &order;
  auto rec = std::make_shared<HookRecorder>();
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.callbacks = {tag, rec};
  HookedRegressor m;
  m.out = &order;
  auto train = loader(regression_data(8), 4);
  Trainer t(o);
  t.fit(m, *train);
  EXPECT_EQ(order, (std::vector<std::string>{"module:on_train_epoch_start", "callback:on_train_epoch_start"}));

  rec->calls.clear();
  t.test(m, *train);
  std::vector<std::string> want{"setup", "on_test_start", "on_test_epoch_start"};
  for (int i = 0; i < 2; ++i) want.insert(want.end(), {"on_test_batch_start", "on_test_batch_end"});
  want.insert(want.end(), {"on_test_epoch_end", "on_test_end", "teardown"});
  EXPECT_EQ(rec->calls, want);
}

// ---- options ----

TEST(TrainerOptions, AccumulatingGradientsEqualsOneBiggerBatch) {
  TempDir dir;
  Regressor a, b;
  b.load_state_dict(a.state_dict());
  const auto initial = weights_of(a);
  auto small = loader(regression_data(32), 4);
  auto big = loader(regression_data(32), 16);
  auto oa = quiet(dir.str());
  oa.max_epochs = 3;
  oa.accumulate_grad_batches = 4;
  auto ob = quiet(dir.str());
  ob.max_epochs = 3;
  Trainer ta(oa), tb(ob);
  ta.fit(a, *small);
  tb.fit(b, *big);
  EXPECT_EQ(ta.global_step(), 6);
  EXPECT_EQ(tb.global_step(), 6);
  auto wa = weights_of(a), wb = weights_of(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    for (size_t j = 0; j < wa[i].size(); ++j) EXPECT_NEAR(wa[i][j], wb[i][j], 1e-5) << "param " << i << "[" << j << "]";
  }
  EXPECT_NE(initial, wb);  // and the weights did move
}

// Measures the total grad norm (and largest |grad|) right before each optimizer step, after clipping.
struct GradProbe : Callback {
  std::vector<double> norms, max_abs;
  void on_before_zero_grad(Trainer&, TrainModule& m, optim::Optimizer&) override {
    double sq = 0, mx = 0;
    for (const Tensor& p : m.parameters()) {
      Tensor g = p.grad().to(kFloat64).contiguous();
      const double* d = g.data_ptr<double>();
      for (int64_t i = 0; i < g.numel(); ++i) sq += d[i] * d[i], mx = std::max(mx, std::abs(d[i]));
    }
    norms.push_back(std::sqrt(sq));
    max_abs.push_back(mx);
  }
};

TEST(TrainerOptions, GradientClippingBoundsTheNormOrTheValues) {
  for (const std::string algorithm : {"", "norm", "value"}) {
    TempDir dir;
    auto probe = std::make_shared<GradProbe>();
    auto o = quiet(dir.str());
    o.max_epochs = 1;
    o.callbacks = {probe};
    if (!algorithm.empty()) o.gradient_clip_val = 0.5, o.gradient_clip_algorithm = algorithm;
    Regressor m;
    auto train = loader(regression_data(16), 4);
    Trainer(o).fit(m, *train);
    ASSERT_EQ(probe->norms.size(), 4u);
    const double worst_norm = *std::max_element(probe->norms.begin(), probe->norms.end());
    const double worst_value = *std::max_element(probe->max_abs.begin(), probe->max_abs.end());
    if (algorithm.empty()) {
      EXPECT_GT(worst_norm, 1.0);  // unclipped grads of this problem are large, so the checks below can fail
      EXPECT_GT(worst_value, 0.5);
    } else if (algorithm == "norm") {
      EXPECT_LE(worst_norm, 0.5 * (1 + 1e-5));
    } else {
      EXPECT_LE(worst_value, 0.5);
      EXPECT_GT(worst_norm, 0.5);  // clipping values leaves the norm above the bound
    }
  }
}

TEST(TrainerOptions, LimitsRunTheRightNumberOfBatches) {
  TempDir dir;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.limit_train_batches = 3;
  o.limit_val_batches = 0.5;  // half of 4
  o.limit_test_batches = 1;
  Regressor m;
  auto train = loader(regression_data(40), 4);  // 10 batches
  auto val = loader(regression_data(16), 4);    // 4 batches
  Trainer t(o);
  t.fit(m, *train, val.get());
  EXPECT_EQ(m.train_steps, 6);
  EXPECT_EQ(m.val_steps, 4);
  EXPECT_EQ(t.global_step(), 6);
  t.test(m, *val);
  EXPECT_EQ(m.test_steps, 1);
}

TEST(TrainerOptions, FastDevRunRunsNBatchesOfEachAndWritesNothing) {
  TempDir dir;
  trainer::TrainerOptions o;
  o.default_root_dir = dir.str();
  o.fast_dev_run = 2;
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.max_epochs = 10;
  Regressor m;
  auto train = loader(regression_data(40), 4);
  auto val = loader(regression_data(16), 4);
  Trainer t(o);
  t.fit(m, *train, val.get());
  t.test(m, *val);
  EXPECT_EQ(m.train_steps, 2);
  EXPECT_EQ(m.val_steps, 2);  // no sanity check
  EXPECT_EQ(m.test_steps, 2);
  EXPECT_TRUE(std::filesystem::is_empty(dir.str()));  // no logs, no checkpoints
}

TEST(TrainerOptions, ValidationCadence) {
  struct Case {
    trainer::BatchLimit interval;
    int64_t every_n_epoch, epochs, batches;
    std::vector<std::pair<int64_t, int64_t>> want;  // (epoch, batches done) at each validation
  };
  const std::vector<Case> cases{
      {0.5, 1, 1, 4, {{0, 2}, {0, 4}}},
      {3, 1, 1, 7, {{0, 3}, {0, 6}, {0, 7}}},
      {1.0, 2, 4, 2, {{1, 2}, {3, 2}}},
  };
  for (const auto& c : cases) {
    TempDir dir;
    std::vector<std::pair<int64_t, int64_t>> seen;
    struct Probe : Callback {
      std::vector<std::pair<int64_t, int64_t>>* seen;
      void on_validation_start(Trainer& t, TrainModule&) override {
        seen->emplace_back(t.current_epoch(), t.batch_in_epoch());
      }
    };
    auto probe = std::make_shared<Probe>();
    probe->seen = &seen;
    auto o = quiet(dir.str());
    o.max_epochs = c.epochs;
    o.val_check_interval = c.interval;
    o.check_val_every_n_epoch = c.every_n_epoch;
    o.callbacks = {probe};
    Regressor m;
    auto train = loader(regression_data(4 * c.batches), 4);
    auto val = loader(regression_data(4), 4);
    Trainer(o).fit(m, *train, val.get());
    EXPECT_EQ(seen, c.want) << "val_check_interval " << c.interval.count << " / " << c.interval.fraction;
  }
}

TEST(TrainerOptions, MaxStepsStopsMidEpochAndMinEpochsHoldsOffStopping) {
  TempDir dir;
  auto o = quiet(dir.str());
  o.max_steps = 5;
  Regressor m;
  auto train = loader(regression_data(16), 4);
  Trainer t(o);
  t.fit(m, *train);
  EXPECT_EQ(t.global_step(), 5);
  EXPECT_EQ(m.train_steps, 5);

  struct StopNow : Callback {
    void on_train_batch_end(Trainer& t, TrainModule&, const Tensor&, const data::Batch&, int64_t) override {
      t.set_should_stop(true);
    }
  };
  auto o2 = quiet(dir.str());
  o2.max_epochs = 10;
  o2.min_epochs = 3;
  o2.callbacks = {std::make_shared<StopNow>()};
  Regressor m2;
  Trainer t2(o2);
  t2.fit(m2, *train);
  EXPECT_EQ(t2.current_epoch(), 3);  // epochs 0 and 1 run whole; in epoch 2 the stop takes effect at once
  EXPECT_EQ(m2.train_steps, 4 + 4 + 1);
}

TEST(TrainerOptions, SchedulersStepPerEpochOrPerStep) {
  TempDir dir;
  for (const std::string interval : {"epoch", "step"}) {
    auto o = quiet(dir.str());
    o.max_epochs = 3;
    Regressor m;
    m.make_optim = [&](Regressor& self) {
      auto opt = std::make_shared<optim::SGD>(self.parameters(), optim::SGDOptions{.lr = 1.0});
      trainer::SchedulerConfig s;
      s.scheduler = std::make_shared<optim::StepLR>(*opt, 1, 0.5);
      s.interval = interval;
      s.frequency = 2;
      return trainer::OptimizerSetup({opt}, {s});
    };
    auto train = loader(regression_data(16), 4);  // 4 steps per epoch
    Trainer t(o);
    t.fit(m, *train);
    // epoch: stepped after epochs 2 (frequency 2) -> one halving; step: after steps 2, 4, ..., 12 -> six.
    const double want = interval == "epoch" ? 0.5 : std::pow(0.5, 6);
    EXPECT_DOUBLE_EQ(t.optimizers()[0]->param_groups()[0].lr(), want) << interval;
  }
}

// ---- logging ----

TEST(TrainerLogging, EpochMeansAreWeightedByBatchSize) {
  TempDir dir;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Regressor m;
  // Log each example's index mean: over batches of 4, 4 and 2 the weighted mean is the mean of 0..9 = 4.5,
  // the unweighted mean of batch means would be (1.5 + 5.5 + 8.5) / 3 = 5.1667.
  m.on_validation = [](Regressor& self, const data::Batch& b) { self.log("val/index", b[1].mean()); };
  std::vector<double> idx(10);
  for (int i = 0; i < 10; ++i) idx[i] = i;
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{
      zeros({10, 4}), tensor(idx, {10, 1}).to(kFloat32)});
  auto val = loader(ds, 4);
  Trainer t(o);
  auto metrics = t.validate(m, *val);
  EXPECT_DOUBLE_EQ(metrics.at("val/index"), 4.5);
  EXPECT_DOUBLE_EQ(t.callback_metrics().at("val/index"), 4.5);
}

TEST(TrainerLogging, StepAndEpochValuesGetSuffixes) {
  TempDir dir;
  struct Both : Regressor {
    Tensor training_step(const data::Batch& b, int64_t i) override {
      Tensor loss = nn::F::mse_loss(fc(b[0]), b[1]);
      log("loss", static_cast<double>(i), {.on_step = true, .on_epoch = true, .prog_bar = true});
      return loss;
    }
  };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Both m;
  auto train = loader(regression_data(12), 4);
  Trainer t(o);
  t.fit(m, *train);
  EXPECT_DOUBLE_EQ(t.callback_metrics().at("loss_step"), 2.0);   // the last step's value
  EXPECT_DOUBLE_EQ(t.callback_metrics().at("loss_epoch"), 1.0);  // mean of 0, 1, 2
  EXPECT_EQ(t.progress_bar_metrics().count("loss_epoch"), 1u);
  EXPECT_EQ(t.callback_metrics().count("loss"), 0u);
}

TEST(TrainerLogging, LoggingOutsideATrainerIsAnError) {
  Regressor m;
  EXPECT_THROW(m.log("x", 1.0), Error);
}

// ---- errors ----

// ---- precision ----

// Records the autocast state its steps ran under.
struct AutocastProbe : Regressor {
  std::vector<AutocastState> train_states, val_states;
  std::vector<DType> output_dtypes;
  Tensor training_step(const data::Batch& b, int64_t i) override {
    train_states.push_back(autocast_state());
    output_dtypes.push_back(fc(b[0]).dtype());
    return Regressor::training_step(b, i);
  }
  Tensor validation_step(const data::Batch& b, int64_t i) override {
    val_states.push_back(autocast_state());
    return Regressor::validation_step(b, i);
  }
};

// Under 16-mixed, on_before_optimizer_step (and clipping after it) sees the true gradients, not the scaled ones.
struct UnscaledProbe : Callback {
  std::vector<double> max_grad, scale;
  void on_before_optimizer_step(Trainer& t, TrainModule& m, optim::Optimizer&) override {
    double mx = 0;
    for (const Tensor& p : m.parameters()) mx = std::max(mx, p.grad().abs().max().item<double>());
    max_grad.push_back(mx);
    scale.push_back(t.grad_scaler() ? t.grad_scaler()->get_scale() : 1.0);
  }
};

TEST(TrainerPrecision, HooksAndClippingSeeUnscaledGradients) {
  TempDir dir;
  Regressor m;
  auto probe = std::make_shared<UnscaledProbe>();
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.precision = "16-mixed";
  o.callbacks = {probe};
  auto train = loader(regression_data(64), 8);
  trainer::Trainer(o).fit(m, *train);
  ASSERT_EQ(probe->max_grad.size(), 16u);
  int finite = 0;
  for (size_t i = 0; i < probe->max_grad.size(); ++i) {
    if (!std::isfinite(probe->max_grad[i])) continue;  // an overflowed step: skipped
    ++finite;
    EXPECT_GE(probe->scale[i], 1024.0);
    EXPECT_LT(probe->max_grad[i], 500.0) << "step " << i << ": the gradients are still scaled";
  }
  EXPECT_GT(finite, 8);
}

TEST(TrainerPrecision, MixedPrecisionRunsTheStepsUnderAutocastAndLearns) {
  for (const auto& [precision, dtype] : {std::pair{"bf16-mixed", kBFloat16}, std::pair{"16-mixed", kFloat16}}) {
    SCOPED_TRACE(precision);
    TempDir dir;
    AutocastProbe m;
    auto o = quiet(dir.str());
    o.max_epochs = 4;
    o.precision = precision;
    auto train = loader(regression_data(64), 8), val = loader(regression_data(16, 9), 8);
    trainer::Trainer t(o);
    const double before = nn::F::mse_loss(m.fc(regression_data(64)->tensors()[0]),
                                          regression_data(64)->tensors()[1]).item<double>();
    t.fit(m, *train, val.get());
    ASSERT_FALSE(m.train_states.empty());
    for (const AutocastState& s : m.train_states) EXPECT_TRUE(s.enabled && s.dtype == dtype && s.device == DeviceType::CPU);
    for (const AutocastState& s : m.val_states) EXPECT_TRUE(s.enabled && s.dtype == dtype);
    for (DType d : m.output_dtypes) EXPECT_EQ(d, dtype);  // the linear layer ran in 16 bits
    EXPECT_FALSE(autocast_state().enabled);             // and nothing leaks out of the steps
    for (const Tensor& p : m.parameters()) EXPECT_EQ(p.dtype(), kFloat32);
    const double after = nn::F::mse_loss(m.fc(regression_data(64)->tensors()[0]),
                                         regression_data(64)->tensors()[1]).item<double>();
    EXPECT_LT(after, before / 4) << "from " << before << " to " << after;
    EXPECT_EQ(t.grad_scaler() != nullptr, std::string(precision) == "16-mixed");
  }
}

TEST(TrainerErrors, BadOptionsAreRejectedWithTheirName) {
  auto expect_error = [](trainer::TrainerOptions o, const std::string& needle) {
    try {
      Trainer t(o);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  trainer::TrainerOptions o;
  o.logger = false;
  auto with = [&](auto f) { auto c = o; f(c); return c; };
  expect_error(with([](auto& c) { c.accumulate_grad_batches = 0; }), "accumulate_grad_batches");
  expect_error(with([](auto& c) { c.precision = "16-mixed", c.strategy = "parameter_server"; }),
               "'16-mixed' with strategy 'parameter_server'");
  expect_error(with([](auto& c) { c.precision = "fp8"; }), "precision 'fp8'");
  expect_error(with([](auto& c) { c.strategy = "ddp"; }), "kiln launch");  // no rank in this process
  expect_error(with([](auto& c) { c.strategy = "parameter_server"; }), "parameter_server");
  expect_error(with([](auto& c) { c.accelerator = "tpu"; }), "accelerator 'tpu'");
  expect_error(with([](auto& c) { c.gradient_clip_algorithm = "l1"; }), "gradient_clip_algorithm");
  expect_error(with([](auto& c) { c.limit_train_batches = 1.5; }), "limit_train_batches");
  expect_error(with([](auto& c) { c.devices = 2; }), "devices");
}

TEST(TrainerErrors, AStepThatReturnsAVectorIsAnErrorAndHooksHearOfIt) {
  TempDir dir;
  struct Bad : Regressor {
    Tensor training_step(const data::Batch& b, int64_t) override { return fc(b[0]); }
  };
  struct Listener : Callback {
    std::string seen;
    void on_exception(Trainer&, TrainModule&, const std::exception& e) override { seen = e.what(); }
  };
  auto listener = std::make_shared<Listener>();
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.callbacks = {listener};
  Bad m;
  auto train = loader(regression_data(8), 4);
  Trainer t(o);
  EXPECT_THROW(t.fit(m, *train), Error);
  EXPECT_NE(listener->seen.find("must return the loss"), std::string::npos) << listener->seen;
  EXPECT_FALSE(m.has_trainer());  // detached: the module can be used again
}

// Something thrown that is not a std::exception (here a user's own type) fails fit, validate and predict as an
// Error does: the hooks hear of it, the original propagates, and the module is let go for another run.
TEST(TrainerErrors, AThrownNonStdExceptionStillReachesTheHooksAndFreesTheModule) {
  TempDir dir;
  struct Thrown {
    int code;
  };
  struct Thrower : Callback {
    std::string seen;
    void on_train_batch_end(Trainer&, TrainModule&, const Tensor&, const data::Batch&, int64_t) override {
      throw Thrown{1};
    }
    void on_validation_batch_end(Trainer&, TrainModule&, const Tensor&, const data::Batch&, int64_t) override {
      throw Thrown{2};
    }
    void on_predict_batch_end(Trainer&, TrainModule&, const Tensor&, const data::Batch&, int64_t) override {
      throw Thrown{3};
    }
    void on_exception(Trainer&, TrainModule&, const std::exception& e) override { seen = e.what(); }
  };
  auto thrower = std::make_shared<Thrower>();
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.num_sanity_val_steps = 0;
  o.callbacks = {thrower};
  Regressor m;
  auto data = loader(regression_data(8), 4);
  Trainer t(o);
  const auto expect_thrown = [&](int code, auto run) {
    thrower->seen.clear();
    try {
      run();
      ADD_FAILURE() << "stage " << code << ": no exception";
    } catch (const Thrown& e) {
      EXPECT_EQ(e.code, code);
    }
    EXPECT_NE(thrower->seen.find("not derived from std::exception"), std::string::npos)
        << "stage " << code << ": on_exception saw '" << thrower->seen << "'";
    EXPECT_FALSE(m.has_trainer()) << "stage " << code;
  };
  expect_thrown(1, [&] { t.fit(m, *data); });
  expect_thrown(2, [&] { t.validate(m, *data); });
  expect_thrown(3, [&] { t.predict(m, *data); });
}

TEST(TrainerErrors, CudaWithoutADeviceIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  TempDir dir;
  auto o = quiet(dir.str());
  o.accelerator = "cuda";
  Regressor m;
  auto train = loader(regression_data(8), 4);
  try {
    Trainer(o).fit(m, *train);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  // The failed start left the module free: another Trainer runs it.
  EXPECT_FALSE(m.has_trainer());
  Trainer(quiet(dir.str())).fit(m, *train);
}

// deterministic: each run (fit, validate, predict) runs with deterministic algorithms on, and the process's
// setting comes back when it ends, a failed run included; false leaves the setting as it is.
TEST(TrainerOptions, DeterministicHoldsForEachRunAndIsPutBack) {
  TempDir dir;
  struct Recorder : Callback {
    std::vector<bool> seen;
    bool fail = false;
    void on_train_start(Trainer&, TrainModule&) override { seen.push_back(are_deterministic_algorithms_enabled()); }
    void on_validation_start(Trainer&, TrainModule&) override {
      seen.push_back(are_deterministic_algorithms_enabled());
    }
    void on_predict_start(Trainer&, TrainModule&) override {
      seen.push_back(are_deterministic_algorithms_enabled());
      if (fail) throw Error("a failing predict");
    }
  };
  auto recorder = std::make_shared<Recorder>();
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.num_sanity_val_steps = 0;
  o.deterministic = true;
  o.callbacks = {recorder};
  Regressor m;
  auto data = loader(regression_data(8), 4);
  Trainer t(o);
  ASSERT_FALSE(are_deterministic_algorithms_enabled());
  t.fit(m, *data);
  EXPECT_FALSE(are_deterministic_algorithms_enabled()) << "after fit";
  t.validate(m, *data);
  recorder->fail = true;
  EXPECT_THROW(t.predict(m, *data), Error);
  EXPECT_FALSE(are_deterministic_algorithms_enabled()) << "after a failed predict";
  EXPECT_EQ(recorder->seen, (std::vector<bool>{true, true, true}));
  // Off: the process's own setting stands, during the run and after it.
  DeterministicAlgorithmsGuard process(true);
  recorder->seen.clear(), recorder->fail = false;
  o.deterministic = false;
  Trainer(o).fit(m, *data);
  EXPECT_EQ(recorder->seen, (std::vector<bool>{true}));
  EXPECT_TRUE(are_deterministic_algorithms_enabled());
}

// Checkpoint callbacks run after all the others, in their own order (Lightning's order); the rest keep theirs.
TEST(TrainerHooks, CheckpointCallbacksRunLast) {
  TempDir dir;
  auto first = std::make_shared<trainer::ModelCheckpoint>(), second = std::make_shared<trainer::ModelCheckpoint>();
  auto a = std::make_shared<Callback>(), b = std::make_shared<Callback>();
  trainer::TrainerOptions o = quiet(dir.str());
  o.enable_checkpointing = true;
  o.callbacks = {first, a, second, b};
  Trainer t(o);
  ASSERT_EQ(t.callbacks().size(), 4u);
  EXPECT_EQ(t.callbacks()[0], a);
  EXPECT_EQ(t.callbacks()[1], b);
  EXPECT_EQ(t.callbacks()[2], first);
  EXPECT_EQ(t.callbacks()[3], second);
}

// Records the first field of every training batch.
struct BatchRecorder : Callback {
  std::vector<Tensor> seen;
  void on_train_batch_start(Trainer&, TrainModule&, const data::Batch& b, int64_t) override {
    seen.push_back(b[0].clone());
  }
};

// overfit_batches trains on the loader's first batches in order every epoch, even from a shuffled loader, and
// validates on as many; as a count and as a fraction.
TEST(TrainerOptions, OverfitBatchesRepeatsTheFirstBatchesInOrder) {
  TempDir dir;
  auto data = regression_data(32);
  const Tensor x = data->tensors()[0];
  for (const trainer::BatchLimit& limit : {trainer::BatchLimit(2), trainer::BatchLimit(0.25)}) {
    Regressor m;
    auto train = loader(data, 4, /*shuffle=*/true);
    auto val = loader(regression_data(16, 9), 4);
    auto recorder = std::make_shared<BatchRecorder>();
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 3;
    o.overfit_batches = limit;
    o.callbacks = {recorder};
    Trainer t(o);
    t.fit(m, *train, val.get());
    ASSERT_EQ(recorder->seen.size(), 6u);
    for (size_t k = 0; k < 6; ++k)
      EXPECT_TRUE(recorder->seen[k].equal(x.narrow(0, static_cast<int64_t>(k % 2) * 4, 4))) << "batch " << k;
    EXPECT_EQ(m.val_steps, limit.is_count ? 6 : 3);  // a quarter of the 4 validation batches is 1
  }
}

TEST(TrainModule, FreezeAndUnfreeze) {
  Regressor m;
  m.freeze();
  EXPECT_FALSE(m.is_training());
  for (const Tensor& p : m.parameters()) EXPECT_FALSE(p.requires_grad());
  m.unfreeze();
  EXPECT_TRUE(m.is_training());
  for (const Tensor& p : m.parameters()) EXPECT_TRUE(p.requires_grad());
}

// A step whose loss is sqrt(0): sqrt's gradient there is Inf, and every weight's turns NaN.
struct InfGradientRegressor : Regressor {
  Tensor training_step(const data::Batch& b, int64_t) override { return (fc(b[0]) * 0.0).sqrt().sum(); }
};

// detect_anomaly stops the fit at the first bad gradient, naming the op; without it the fit runs on (and the
// weights turn NaN, which is what the flag is for finding).
TEST(Trainer, DetectAnomalyStopsAtTheFirstBadGradientNamingTheOp) {
  TempDir dir;
  for (bool detect : {false, true}) {
    InfGradientRegressor m;
    auto train = loader(regression_data(8), 4);
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 1;
    o.detect_anomaly = detect;
    Trainer t(o);
    if (!detect) {
      t.fit(m, *train);
      EXPECT_TRUE(std::isnan(weights_of(m)[0][0]));
      continue;
    }
    try {
      t.fit(m, *train);
      FAIL() << "expected the anomaly error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("anomaly: sqrt"), std::string::npos) << what;
    }
    EXPECT_FALSE(autograd::AnomalyMode::is_enabled());  // the fit's guard is gone with it
  }
}

}  // namespace
}  // namespace kiln::test
