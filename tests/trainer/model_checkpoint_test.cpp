// ModelCheckpoint driven by the real Trainer on the tiny regression of callbacks_test_util.h: which files each
// top-k, cadence and filename setting keeps, the bookkeeping that travels in every checkpoint, and a ranking
// carried across a resume. Expected file sets are written out from the scripted "val/score" values, never
// computed by the code under test.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/trainer/callbacks.h"
#include "kiln/trainer/trainer.h"
#include "tensor/test_util.h"
#include "trainer/callbacks_test_util.h"

namespace kiln::trainer {
namespace {

using namespace callbacks_testing;
using test::expect_error;


std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Fits `epochs` epochs with `options` over the scripted scores; returns the callback.
std::shared_ptr<ModelCheckpoint> fit_checkpoint(const TempDir& dir, ModelCheckpointOptions options,
                                                std::vector<double> scores, int64_t epochs) {
  Data d;
  Regression m;
  m.val_scores = std::move(scores);
  auto ckpt = std::make_shared<ModelCheckpoint>(std::move(options));
  Trainer t(quiet(dir, epochs, {ckpt}));
  t.fit(m, *d.train, d.val.get());
  return ckpt;
}

TEST(CallbacksModelCheckpoint, TopKMinKeepsExactlyTheBestFiles) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  // min, k = 2 over 0.5, 0.3, 0.4, 0.2, 0.6: the best two are epoch 3 (0.2) and epoch 1 (0.3).
  auto ckpt = fit_checkpoint(dir,
                             {.dirpath = ckdir.string(), .filename = "{epoch}-{val/score:.2f}",
                              .monitor = "val/score", .save_top_k = 2},
                             {0.5, 0.3, 0.4, 0.2, 0.6}, 5);
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=1-val_score=0.30.ckpt", "epoch=3-val_score=0.20.ckpt"}));
  EXPECT_EQ(ckpt->best_model_path(), (ckdir / "epoch=3-val_score=0.20.ckpt").string());
  EXPECT_EQ(ckpt->best_model_score(), 0.2);
  EXPECT_EQ(ckpt->best_k_models().size(), 2u);
  EXPECT_EQ(ckpt->best_k_models().at((ckdir / "epoch=1-val_score=0.30.ckpt").string()), 0.3);
}

// validate / test with ckpt_path "best" load the weights of the monitored best checkpoint (epoch 3 here), not
// the final ones; without a monitor, a ModelCheckpoint or a saved file it is an error that says so.
TEST(CallbacksModelCheckpoint, CkptPathBestLoadsTheBestCheckpointsWeights) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  Data d;
  Regression m;
  m.val_scores = {0.5, 0.3, 0.4, 0.2, 0.6};
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ckdir.string(), .monitor = "val/score"});
  Trainer t(quiet(dir, 5, {ckpt}));
  expect_error([&] { t.validate(m, *d.val, "best"); }, {"has saved no checkpoint yet"});
  t.fit(m, *d.train, d.val.get());
  const Tensor final_weight = m.fc->weight.detach().clone();
  const Tensor best_weight = load_checkpoint((ckdir / "epoch=3-step=8.ckpt").string()).tensor_section("model").at("fc.weight");
  ASSERT_FALSE(best_weight.equal(final_weight));
  t.test(m, *d.val, "best");
  EXPECT_TRUE(m.fc->weight.equal(best_weight));

  TempDir other;
  Trainer no_monitor(quiet(other, 1, {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = (other.path / "ck").string()})}));
  expect_error([&] { no_monitor.test(m, *d.val, "best"); }, {"has saved no checkpoint yet"});
  TrainerOptions none = quiet(other, 1, {});
  none.enable_checkpointing = false;
  Trainer without(none);
  expect_error([&] { without.test(m, *d.val, "best"); }, {"needs a ModelCheckpoint"});
}

// save_weights_only: the files hold the module's weights, the progress and nothing to resume from; "best"
// loads them, and a fit asked to resume from one says why it cannot.
TEST(CallbacksModelCheckpoint, SaveWeightsOnlyWritesTheWeightsAndRefusesAResume) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  Data d;
  Regression m;
  m.val_scores = {0.5, 0.3, 0.4};
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .dirpath = ckdir.string(), .monitor = "val/score", .save_last = true, .save_weights_only = true});
  Trainer t(quiet(dir, 3, {ckpt}));
  t.fit(m, *d.train, d.val.get());
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=1-step=4.ckpt", "last.ckpt"}));
  const Checkpoint last = load_checkpoint((ckdir / "last.ckpt").string());
  EXPECT_EQ(last.get("trainer.weights_only"), "1");
  EXPECT_EQ(last.get_int("trainer.epoch"), 3);
  EXPECT_EQ(last.get_int("trainer.global_step"), t.global_step());
  EXPECT_FALSE(last.has("trainer.num_optimizers"));
  for (const auto& [name, tensor] : last.tensors) EXPECT_EQ(name.rfind("model.", 0), 0u) << name;
  const nn::StateDict weights = m.state_dict();
  ASSERT_EQ(last.tensor_section("model").size(), weights.size());
  for (const auto& [name, w] : weights) EXPECT_TRUE(last.tensor_section("model").at(name).equal(w)) << name;
  // "best" (epoch 1) loads into the module.
  const Tensor best = load_checkpoint((ckdir / "epoch=1-step=4.ckpt").string()).tensor_section("model").at("fc.weight");
  ASSERT_FALSE(best.equal(m.fc->weight.detach()));
  t.validate(m, *d.val, "best");
  EXPECT_TRUE(m.fc->weight.equal(best));
  Trainer resumed(quiet(dir, 4, {}));
  expect_error([&] { resumed.fit(m, *d.train, d.val.get(), (ckdir / "last.ckpt").string()); },
               {"holds the weights only", "last.ckpt"});
  // "last" passes weights-only files over; when they are all there is, it says so rather than start afresh.
  expect_error([&] { resumed.fit(m, *d.train, d.val.get(), "last"); },
               {"ckpt_path \"last\"", "holds the weights only", "start afresh"});
  Regression full_run;
  full_run.val_scores = {0.5};
  const fs::path full = dir.path / "full";
  Trainer(quiet(dir, 1, {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
                            .dirpath = full.string(), .save_top_k = 0, .save_last = true})}))
      .fit(full_run, *d.train, d.val.get());
  std::filesystem::last_write_time(ckdir / "last.ckpt", std::filesystem::file_time_type::clock::now() +
                                                            std::chrono::hours(1));  // the weights-only one newest
  std::string weights_only;
  EXPECT_EQ(find_last_checkpoint(dir.str(), &weights_only), (full / "last.ckpt").string());
  EXPECT_EQ(weights_only, (ckdir / "last.ckpt").string());
}

TEST(CallbacksModelCheckpoint, TopKMaxRanksNaNWorst) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  // max, k = 2 over 0.5, nan, 0.4, 0.3, 0.6: the NaN (kept while there is room) is pushed out by 0.4, which
  // 0.6 pushes out in turn; 0.3 never gets in.
  auto ckpt = fit_checkpoint(dir,
                             {.dirpath = ckdir.string(), .filename = "{epoch}-{val/score:.1f}",
                              .monitor = "val/score", .mode = "max", .save_top_k = 2},
                             {0.5, kNaN, 0.4, 0.3, 0.6}, 5);
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=0-val_score=0.5.ckpt", "epoch=4-val_score=0.6.ckpt"}));
  EXPECT_EQ(ckpt->best_model_score(), 0.6);
}

TEST(CallbacksModelCheckpoint, SaveTopKAllNoneAndSaveLast) {
  TempDir dir;
  const fs::path all = dir.path / "all", none = dir.path / "none";
  fit_checkpoint(dir, {.dirpath = all.string(), .monitor = "val/score", .save_top_k = -1}, {0.3, 0.2, 0.1}, 3);
  EXPECT_EQ(files_in(all), (std::set<std::string>{"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt"}));
  auto ckpt = fit_checkpoint(dir, {.dirpath = none.string(), .monitor = "val/score", .save_top_k = 0, .save_last = true},
                             {0.3}, 2);
  EXPECT_EQ(files_in(none), (std::set<std::string>{"last.ckpt"}));
  EXPECT_EQ(ckpt->last_model_path(), (none / "last.ckpt").string());
}

TEST(CallbacksModelCheckpoint, NoMonitorKeepsTheLatestAndLast) {
  TempDir dir;
  Data d;
  Regression m;
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.save_last = true});
  TrainerOptions o = quiet(dir, 3, {ckpt});
  Trainer t(o);
  t.fit(m, *d.train, d.val.get());
  // No logger: the default folder is <default_root_dir>/checkpoints.
  const fs::path ckdir = dir.path / "checkpoints";
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=2-step=6.ckpt", "last.ckpt"}));
  EXPECT_EQ(ckpt->best_model_path(), (ckdir / "epoch=2-step=6.ckpt").string());
  EXPECT_EQ(load_checkpoint((ckdir / "last.ckpt").string()).get_int("trainer.global_step"), 6);
}

TEST(CallbacksModelCheckpoint, EveryNTrainSteps) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  // Two steps per epoch, 4 epochs: steps 1..8; every 3 steps -> steps 3 (epoch 1) and 6 (epoch 2). The epoch
  // cadence is off by default once a step cadence is given.
  fit_checkpoint(dir, {.dirpath = ckdir.string(), .save_top_k = -1, .every_n_train_steps = 3}, {}, 4);
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=1-step=3.ckpt", "epoch=2-step=6.ckpt"}));
}

TEST(CallbacksModelCheckpoint, EveryNEpochs) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  fit_checkpoint(dir, {.dirpath = ckdir.string(), .save_top_k = -1, .every_n_epochs = 2}, {}, 5);
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=1-step=4.ckpt", "epoch=3-step=8.ckpt"}));
}

TEST(CallbacksModelCheckpoint, TrainTimeInterval) {
  // A clock of 3 s per optimizer step; 2 steps an epoch, 4 epochs. Interval 7 s: the first step 7 s after the
  // start (t = 0) is step 3 (t = 9), the next 7 s after that step 6 (t = 18); step 8 is only 6 s past it.
  for (std::optional<int64_t> every_n_epochs : {std::optional<int64_t>(), std::optional<int64_t>(4)}) {
    TempDir dir;
    const fs::path ckdir = dir.path / "ck";
    const Trainer* running = nullptr;
    Data d;
    Regression m;
    auto ckpt = std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.dirpath = ckdir.string(), .save_top_k = -1, .every_n_epochs = every_n_epochs,
                               .train_time_interval = 7, .clock = [&] { return 3.0 * running->global_step(); }});
    Trainer t(quiet(dir, 4, {ckpt}));
    running = &t;
    t.fit(m, *d.train, d.val.get());
    // Time alone saves by time alone (the epoch cadence is off by default, as with a step cadence); with an
    // epoch cadence too, both save.
    std::set<std::string> want{"epoch=1-step=3.ckpt", "epoch=2-step=6.ckpt"};
    if (every_n_epochs) want.insert("epoch=3-step=8.ckpt");
    EXPECT_EQ(files_in(ckdir), want);
  }
  EXPECT_EQ(ModelCheckpoint({.train_time_interval = 1800}).state_key(),
            "ModelCheckpoint{monitor=,mode=min,every_n_epochs=0,every_n_train_steps=0,train_time_interval=1800}");
  expect_error([] { ModelCheckpoint({.train_time_interval = -1}); }, {"train_time_interval = -1", ">= 0"});
}

TEST(CallbacksModelCheckpoint, FilenameTemplate) {
  ModelCheckpoint a({.filename = "{epoch}-{step}-{val/acc}"});
  EXPECT_EQ(a.format_checkpoint_name(3, 120, {{"val/acc", 0.91234}}), "epoch=3-step=120-val_acc=0.9123");
  ModelCheckpoint b({.filename = "best-val_acc={val/acc:.2f}-{train/loss:.1e}"});
  EXPECT_EQ(b.format_checkpoint_name(0, 0, {{"val/acc", 0.91634}, {"train/loss", 0.00123}}),
            "best-val_acc=0.92-train_loss=1.2e-03");
  ModelCheckpoint c({.filename = "{epoch}-{val/missing}"});
  EXPECT_EQ(c.format_checkpoint_name(1, 2, {}), "epoch=1-val_missing=nan");
  expect_error([] { ModelCheckpoint({.filename = "{val/acc:%x}"}).format_checkpoint_name(0, 0, {}); },
               {"ModelCheckpoint", "{val/acc:%x}"});
  expect_error([] { ModelCheckpoint({.save_top_k = 3}); }, {"save_top_k = 3", "monitor"});
}

TEST(CallbacksModelCheckpoint, BookkeepingSurvivesStateRoundTripAndIsInEachFile) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  ModelCheckpointOptions options{.dirpath = ckdir.string(), .monitor = "val/score", .save_top_k = 2, .save_last = true};
  auto ckpt = fit_checkpoint(dir, options, {0.5, 0.3, 0.4, 0.2}, 4);

  ModelCheckpoint copy(options);
  copy.load_checkpoint_state(ckpt->checkpoint_state());
  EXPECT_EQ(copy.best_k_models(), ckpt->best_k_models());
  EXPECT_EQ(copy.best_model_path(), ckpt->best_model_path());
  EXPECT_EQ(copy.best_model_score(), 0.2);
  EXPECT_EQ(copy.last_model_path(), (ckdir / "last.ckpt").string());

  // The best file was written after its own bookkeeping: its state lists itself among the kept files.
  const Checkpoint best = load_checkpoint(ckpt->best_model_path());
  const auto state = best.section("callbacks." + ckpt->state_key());
  EXPECT_EQ(state.at("best_model_path"), ckpt->best_model_path());
  bool lists_itself = false;
  for (const auto& [k, v] : state) lists_itself = lists_itself || v == ckpt->best_model_path();
  EXPECT_TRUE(lists_itself);
}

TEST(CallbacksModelCheckpoint, ResumeCarriesTheTopKOn) {
  TempDir dir;
  const fs::path ckdir = dir.path / "ck";
  ModelCheckpointOptions options{.dirpath = ckdir.string(), .filename = "{epoch}", .monitor = "val/score",
                                 .save_top_k = 2, .save_last = true};
  const std::vector<double> scores = {0.5, 0.3, 0.4, 0.2, 0.1, 0.6};
  Data d;
  {
    Regression m;
    m.val_scores = scores;
    Trainer t(quiet(dir, 3, {std::make_shared<ModelCheckpoint>(options)}));
    t.fit(m, *d.train, d.val.get());
  }
  // 0.5, 0.3, 0.4: the best two are epochs 1 and 2.
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"}));
  Regression m;
  m.val_scores = scores;
  auto ckpt = std::make_shared<ModelCheckpoint>(options);
  Trainer t(quiet(dir, 6, {ckpt}));
  t.fit(m, *d.train, d.val.get(), (ckdir / "last.ckpt").string());
  // Over all six epochs the best two are epoch 4 (0.1) and epoch 3 (0.2): the first run's files are ranked
  // and deleted by the resumed one.
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=3.ckpt", "epoch=4.ckpt", "last.ckpt"}));
  EXPECT_EQ(ckpt->best_model_score(), 0.1);
}

TEST(CallbacksModelCheckpoint, AnEpochStoppedMidAccumulationStepsAndIsSaved) {
  // accumulate_grad_batches 2 over 4 batches of 2: steps after batches 1 and 3. A stop asked for after batch 2
  // of epoch 1 ends that epoch between the backward passes of one step: the Trainer steps the partial window
  // (an epoch's last batch always steps), so the epoch-end checkpoint loses nothing and is written.
  struct StopMidWindow : Callback {
    void on_train_batch_end(Trainer& t, TrainModule&, const Tensor&, const data::Batch&, int64_t idx) override {
      if (t.current_epoch() == 1 && idx == 2) t.set_should_stop(true);
    }
  };
  TempDir dir;
  Data d;
  data::DataLoader train(d.dataset, {.batch_size = 2});
  Regression m;
  const fs::path ckdir = dir.path / "ck";
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ckdir.string(), .save_top_k = -1});
  TrainerOptions o = quiet(dir, 3, {std::make_shared<StopMidWindow>(), ckpt});
  o.accumulate_grad_batches = 2;
  Trainer t(o);
  t.fit(m, train, d.val.get());
  EXPECT_EQ(t.current_epoch(), 2);
  EXPECT_EQ(t.global_step(), 4);
  EXPECT_EQ(files_in(ckdir), (std::set<std::string>{"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"}));
}

TEST(CallbacksModelCheckpoint, MissingMonitorIsAnErrorAndKeysDiffer) {
  TempDir dir;
  expect_error([&] { fit_checkpoint(dir, {.dirpath = (dir.path / "ck").string(), .monitor = "val/nope"}, {0.1}, 2); },
               {"ModelCheckpoint", "val/nope", "val/score"});
  EXPECT_NE(ModelCheckpoint({.monitor = "val/loss"}).state_key(), ModelCheckpoint({.monitor = "val/acc"}).state_key());
  EXPECT_NE(ModelCheckpoint({.monitor = "val/loss"}).state_key(),
            ModelCheckpoint({.monitor = "val/loss", .every_n_train_steps = 10}).state_key());
}

}  // namespace
}  // namespace kiln::trainer
