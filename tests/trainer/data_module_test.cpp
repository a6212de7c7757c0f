// DataModule: each Trainer run over one against the same run given the DataModule's loaders directly (the
// weights and metrics must be identical), the order of its calls, teardown after a failure, its state in
// checkpoints and on resume, and the batch-size search over its batch_size.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/trainer/batch_size_finder.h"
#include "kiln/trainer/data_module.h"
#include "tensor/test_util.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

using trainer::Stage;

// Regression data split three ways; records every call made on it.
struct RegressionData : trainer::DataModule {
  std::vector<std::string> calls;
  std::shared_ptr<data::Dataset> train, val, test;
  int trains_built = 0;
  bool use_batch_size = true;
  int teardown_throws = 0;  // the next teardowns that throw
  trainer::CallbackState loaded;
  const Regressor* module = nullptr;  // to see when a resume hands the state back
  int loaded_at_step = -1;

  void prepare_data() override { calls.push_back("prepare_data"); }
  void setup(Stage stage) override {
    calls.push_back(std::string("setup ") + trainer::stage_name(stage));
    train = regression_data(48, 1), val = regression_data(16, 2), test = regression_data(24, 3);
  }
  void teardown(Stage stage) override {
    calls.push_back(std::string("teardown ") + trainer::stage_name(stage));
    if (teardown_throws > 0 && teardown_throws--) throw Error("teardown: broken");
  }
  std::unique_ptr<data::DataLoader> train_dataloader() override {
    calls.push_back("train_dataloader");
    ++trains_built;
    return loader(train, use_batch_size ? batch_size : 5, /*shuffle=*/true, 0, /*seed=*/11);
  }
  std::unique_ptr<data::DataLoader> val_dataloader() override {
    calls.push_back("val_dataloader");
    return loader(val, batch_size);
  }
  std::unique_ptr<data::DataLoader> test_dataloader() override {
    calls.push_back("test_dataloader");
    return loader(test, batch_size);
  }
  std::unique_ptr<data::DataLoader> predict_dataloader() override {
    calls.push_back("predict_dataloader");
    return loader(test, batch_size);
  }
  trainer::CallbackState state_dict() const override {
    return {{"trains_built", std::to_string(trains_built)}, {"batch_size", std::to_string(batch_size)}};
  }
  void load_state_dict(const trainer::CallbackState& state) override {
    calls.push_back("load_state_dict");
    loaded = state;
    batch_size = std::stoll(state.at("batch_size"));  // state that shapes the loaders
    if (module != nullptr) loaded_at_step = module->train_steps;
  }
};

using Calls = std::vector<std::string>;

// Sees the Trainer's datamodule() from inside the run.
struct SeesTheDataModule : trainer::Callback {
  std::vector<const trainer::DataModule*> seen;
  void on_train_start(trainer::Trainer& t, trainer::TrainModule&) override { seen.push_back(t.datamodule()); }
  void on_test_start(trainer::Trainer& t, trainer::TrainModule&) override { seen.push_back(t.datamodule()); }
};

TEST(DataModule, EachRunIsTheLoaderRunBetweenSetupAndTeardown) {
  TempDir dir;
  auto o = quiet(dir.str());
  o.max_epochs = 3;
  auto sees = std::make_shared<SeesTheDataModule>();
  o.callbacks = {sees};

  manual_seed(5);
  Regressor with_dm;
  RegressionData dm;
  dm.batch_size = 8;
  trainer::Trainer t(o);
  t.fit(with_dm, dm);
  EXPECT_EQ(dm.calls, (Calls{"prepare_data", "setup fit", "train_dataloader", "val_dataloader", "teardown fit"}));
  EXPECT_EQ(sees->seen, (std::vector<const trainer::DataModule*>{&dm}));
  EXPECT_EQ(t.datamodule(), nullptr);

  // The same fit given the same loaders.
  manual_seed(5);
  Regressor direct;
  RegressionData same;
  same.batch_size = 8;
  same.setup(Stage::Fit);
  auto o3 = quiet(dir.str());
  o3.max_epochs = 3;
  trainer::Trainer(o3).fit(direct, *same.train_dataloader(), same.val_dataloader().get());
  EXPECT_EQ(weights_of(with_dm), weights_of(direct));
  EXPECT_EQ(with_dm.val_steps, direct.val_steps);
  EXPECT_GT(direct.val_steps, 0);

  dm.calls.clear();
  const auto tested = t.test(with_dm, dm);
  EXPECT_EQ(dm.calls, (Calls{"prepare_data", "setup test", "test_dataloader", "teardown test"}));
  EXPECT_EQ(tested, trainer::Trainer(quiet(dir.str())).test(with_dm, *same.test_dataloader()));
  EXPECT_EQ(sees->seen.back(), &dm);

  dm.calls.clear();
  const auto validated = t.validate(with_dm, dm);
  EXPECT_EQ(dm.calls, (Calls{"prepare_data", "setup validate", "val_dataloader", "teardown validate"}));
  EXPECT_EQ(validated, trainer::Trainer(quiet(dir.str())).validate(with_dm, *same.val_dataloader()));

  dm.calls.clear();
  const std::vector<Tensor> predicted = t.predict(with_dm, dm);
  EXPECT_EQ(dm.calls, (Calls{"prepare_data", "setup predict", "predict_dataloader", "teardown predict"}));
  const std::vector<Tensor> want = trainer::Trainer(quiet(dir.str())).predict(with_dm, *same.test_dataloader());
  ASSERT_EQ(predicted.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(equal(predicted[i], want[i])) << i;
}

// A run that fails still tears down, and the Trainer is free for the next run.
TEST(DataModule, TeardownFollowsAFailure) {
  TempDir dir;
  Regressor m;
  m.on_validation = [](Regressor&, const data::Batch&) { throw Error("validation_step: broken"); };
  RegressionData dm;
  dm.batch_size = 8;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  trainer::Trainer t(o);
  expect_error([&] { t.fit(m, dm); }, {"validation_step: broken"});
  EXPECT_EQ(dm.calls.back(), "teardown fit");
  EXPECT_EQ(t.datamodule(), nullptr);
  m.on_validation = nullptr;
  dm.calls.clear();
  t.fit(m, dm);
  EXPECT_EQ(dm.calls.back(), "teardown fit");
  // A setup that throws: its error, and teardown still runs.
  struct BadSetup : RegressionData {
    void setup(Stage stage) override {
      RegressionData::setup(stage);
      throw Error("setup: broken");
    }
  };
  BadSetup bad;
  expect_error([&] { t.validate(m, bad); }, {"setup: broken"});
  EXPECT_EQ(bad.calls, (Calls{"prepare_data", "setup validate", "teardown validate"}));
  // A teardown that throws after a good run: its error, and it ran once.
  dm.calls.clear();
  dm.teardown_throws = 1;
  expect_error([&] { t.test(m, dm); }, {"teardown: broken"});
  EXPECT_EQ(dm.calls, (Calls{"prepare_data", "setup test", "test_dataloader", "teardown test"}));
  EXPECT_EQ(t.datamodule(), nullptr);
}

// The DataModule's state goes into the fit's checkpoints and comes back on resume after setup and before the
// loaders are built: here the batch size it saved (8) shapes the resumed epoch, not the one it was made with.
TEST(DataModule, StateIsCheckpointedAndRestoredOnResume) {
  TempDir dir;
  const std::string path = dir / "dm.ckpt";
  struct SaveAtEpochEnd : trainer::Callback {
    std::string path;
    void on_train_epoch_end(trainer::Trainer& t, trainer::TrainModule&) override { t.save_checkpoint(path); }
  };
  auto save = std::make_shared<SaveAtEpochEnd>();
  save->path = path;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.callbacks = {save};
  Regressor m;
  RegressionData dm;
  dm.batch_size = 8;
  trainer::Trainer(o).fit(m, dm);
  EXPECT_EQ(trainer::load_checkpoint(path).get("datamodule.trains_built"), "1");
  EXPECT_EQ(trainer::load_checkpoint(path).get("datamodule_at_build.trains_built"), "0");

  Regressor resumed;
  RegressionData again;
  again.batch_size = 4;
  again.module = &resumed;
  o.max_epochs = 2;
  trainer::Trainer(o).fit(resumed, again, path);
  EXPECT_EQ(again.loaded, (trainer::CallbackState{{"trains_built", "1"}, {"batch_size", "8"}}));
  // Its state before the loaders were built (trains_built 0), then the latest, which the build moved on.
  EXPECT_EQ(again.calls, (Calls{"prepare_data", "setup fit", "load_state_dict", "train_dataloader", "val_dataloader",
                                "load_state_dict", "teardown fit"}));
  EXPECT_EQ(again.loaded_at_step, 0);
  EXPECT_EQ(resumed.train_steps, 6);  // the second epoch only: 48 examples in batches of 8, not 4
  // A fit given loaders writes no datamodule entries, and a DataModule fit resuming from its checkpoint calls
  // no load_state_dict (this one's would throw: it reads batch_size).
  auto train = again.train_dataloader();
  Regressor plain;
  o.max_epochs = 1;
  trainer::Trainer(o).fit(plain, *train);
  EXPECT_TRUE(trainer::load_checkpoint(path).section("datamodule").empty());
  RegressionData fresh;
  fresh.batch_size = 8;
  o.max_epochs = 2;
  trainer::Trainer(o).fit(plain, fresh, path);
  EXPECT_EQ(std::count(fresh.calls.begin(), fresh.calls.end(), "load_state_dict"), 0);
  EXPECT_EQ(plain.train_steps, 6 + 6);  // its first epoch, then the resumed second
}

TEST(DataModule, MissingLoadersAreClearErrors) {
  TempDir dir;
  Regressor m;
  struct Empty : trainer::DataModule {};
  Empty none;
  trainer::Trainer t(quiet(dir.str()));
  expect_error([&] { t.fit(m, none); }, {"train_dataloader() is not implemented"});
  expect_error([&] { t.validate(m, none); }, {"no validation loader"});
  expect_error([&] { t.test(m, none); }, {"no test loader"});
  expect_error([&] { t.predict(m, none); }, {"no prediction loader"});
  struct WithANullOne : RegressionData {
    std::vector<std::unique_ptr<data::DataLoader>> val_dataloaders() override {
      std::vector<std::unique_ptr<data::DataLoader>> v;
      v.push_back(val_dataloader());
      v.push_back(nullptr);
      return v;
    }
  };
  WithANullOne holes;
  holes.batch_size = 8;
  expect_error([&] { t.fit(m, holes); }, {"val_dataloaders() returned a null loader at index 1"});
  EXPECT_EQ(holes.calls.back(), "teardown fit");
}

// A DataModule fit started from a hook of a running one is refused, and the running fit goes on with its own
// loaders (the refusal must not release them).
TEST(DataModule, AFitFromAHookOfAnotherIsRefusedAndTheFirstGoesOn) {
  TempDir dir;
  struct NestedFit : trainer::Callback {
    std::string refused;
    void on_train_epoch_end(trainer::Trainer& t, trainer::TrainModule&) override {
      if (t.current_epoch() != 0) return;
      Regressor other;
      RegressionData other_data;
      try {
        t.fit(other, other_data);
      } catch (const Error& e) {
        refused = e.what();
      }
    }
  };
  auto nested = std::make_shared<NestedFit>();
  auto o = quiet(dir.str());
  o.max_epochs = 3;
  o.reload_dataloaders_every_n_epochs = 2;
  o.callbacks = {nested};
  Regressor m;
  RegressionData dm;
  dm.batch_size = 8;
  trainer::Trainer(o).fit(m, dm);
  EXPECT_NE(nested->refused.find("while another run of this Trainer is using one"), std::string::npos)
      << nested->refused;
  EXPECT_EQ(m.train_steps, 3 * 6);
  EXPECT_EQ(dm.trains_built, 2);
}

// reload_dataloaders_every_n_epochs = 2 over 5 epochs: the loaders are built when the fit starts and again at
// epochs 2 and 4, each time with the batch size a callback set at the end of the epoch before (8, 12, 16, 20 after
// epochs 0 to 3): 48 examples make 12 batches of 4 in epochs 0 and 1, 4 of 12 in epochs 2 and 3, 3 of 20 in 4.
TEST(DataModule, ReloadDataloadersEveryNEpochsRebuildsTheLoaders) {
  TempDir dir;
  struct GrowTheBatch : trainer::Callback {
    RegressionData* dm = nullptr;
    std::vector<int64_t> batches, val_batches;
    void on_train_epoch_start(trainer::Trainer& t, trainer::TrainModule&) override {
      batches.push_back(t.num_training_batches());
    }
    void on_validation_epoch_start(trainer::Trainer& t, trainer::TrainModule&) override {
      if (!t.sanity_checking()) val_batches.push_back(t.num_val_batches());
    }
    void on_train_epoch_end(trainer::Trainer& t, trainer::TrainModule&) override {
      dm->batch_size = 4 + 4 * (t.current_epoch() + 1);
    }
  };
  RegressionData dm;
  dm.batch_size = 4;
  auto grow = std::make_shared<GrowTheBatch>();
  grow->dm = &dm;
  auto o = quiet(dir.str());
  o.max_epochs = 5;
  o.reload_dataloaders_every_n_epochs = 2;
  o.callbacks = {grow};
  Regressor m;
  trainer::Trainer(o).fit(m, dm);
  EXPECT_EQ(grow->batches, (std::vector<int64_t>{12, 12, 4, 4, 3}));
  EXPECT_EQ(grow->val_batches, (std::vector<int64_t>{4, 4, 2, 2, 1}));  // 16 examples in the same batches
  EXPECT_EQ(m.train_steps, 12 + 12 + 4 + 4 + 3);
  EXPECT_EQ(dm.trains_built, 3);
  EXPECT_EQ(std::count(dm.calls.begin(), dm.calls.end(), "val_dataloader"), 3);

  // Loaders given directly cannot be rebuilt; a negative count is refused.
  auto train = dm.train_dataloader();
  expect_error([&] { trainer::Trainer(o).fit(m, *train); },
               {"reload_dataloaders_every_n_epochs = 2", "this fit() was given loaders: pass a DataModule"});
  o.reload_dataloaders_every_n_epochs = -1;
  expect_error([&] { trainer::Trainer t(o); }, {"reload_dataloaders_every_n_epochs = -1", "expected >= 0"});
}

// Loaders rebuilt every epoch from the same batch size are the same loaders: the weights are those of a fit
// that never rebuilds them, bit for bit, and a fit resumed mid-epoch from a checkpoint of that run ends on
// them too (the first epoch a fit runs keeps the loaders it started with, at the position the checkpoint holds).
// Then with a batch size a callback grows at each epoch's end (12, 16, 20, 24) and rebuilds every 2 epochs: a
// checkpoint in epoch 3 holds batch size 20, but epoch 3's loaders were built with 16; the resumed fit builds
// them from that (the checkpoint's datamodule_at_build) and ends on the uninterrupted run's weights. A checkpoint
// at the end of epoch 1 resumes at epoch 2, where a rebuild is due: the resumed fit builds epoch 2's loaders
// from the batch size the callback left (16), as the uninterrupted run did, and only those. Last, a DataModule
// whose builder moves its own state (each build takes the next shard of data): resumed mid-epoch, and from
// epoch 2's start after its rebuild, it builds the loaders it built then and goes on from there.
TEST(DataModule, ReloadedLoadersTrainAndResumeAsTheSameLoaders) {
  TempDir dir;
  enum class When { SecondBatch, EpochStart, EpochEnd };
  struct Save : trainer::Callback {
    std::string path;
    int64_t epoch = 1;
    When when = When::SecondBatch;
    void save(trainer::Trainer& t, When now) {
      if (when == now && t.current_epoch() == epoch) t.save_checkpoint(path);
    }
    void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                            int64_t idx) override {
      if (idx == 1) save(t, When::SecondBatch);
    }
    void on_train_epoch_start(trainer::Trainer& t, trainer::TrainModule&) override { save(t, When::EpochStart); }
    void on_train_epoch_end(trainer::Trainer& t, trainer::TrainModule&) override { save(t, When::EpochEnd); }
  };
  struct GrowTheBatch : trainer::Callback {
    RegressionData* dm = nullptr;
    void on_train_epoch_end(trainer::Trainer& t, trainer::TrainModule&) override {
      dm->batch_size = 8 + 4 * (t.current_epoch() + 1);
    }
  };
  struct NextShardEachBuild : RegressionData {  // shard k: 48 examples drawn with seed 100 + k
    int64_t shard = 0;
    std::unique_ptr<data::DataLoader> train_dataloader() override {
      calls.push_back("train_dataloader");
      ++trains_built;
      return loader(regression_data(48, static_cast<uint64_t>(100 + shard++)), batch_size, /*shuffle=*/true, 0, 11);
    }
    trainer::CallbackState state_dict() const override {
      trainer::CallbackState state = RegressionData::state_dict();
      state["shard"] = std::to_string(shard);
      return state;
    }
    void load_state_dict(const trainer::CallbackState& state) override {
      RegressionData::load_state_dict(state);
      shard = std::stoll(state.at("shard"));
    }
  };
  struct Run {
    int64_t reload = 0, epochs = 3;
    bool grow = false, next_shard = false;
    std::string save_to, resume_from;
    int64_t save_epoch = 1;
    When save_when = When::SecondBatch;
  };
  auto run = [&](const Run& r) {
    auto o = quiet(dir.str());
    o.max_epochs = r.epochs;
    o.reload_dataloaders_every_n_epochs = r.reload;
    manual_seed(5);
    Regressor m;
    std::unique_ptr<RegressionData> dm =
        r.next_shard ? std::make_unique<NextShardEachBuild>() : std::make_unique<RegressionData>();
    dm->batch_size = 8;
    if (r.grow) {  // before the checkpoint at an epoch's end, which then keeps the batch size it set
      auto cb = std::make_shared<GrowTheBatch>();
      cb->dm = dm.get();
      o.callbacks.push_back(cb);
    }
    if (!r.save_to.empty()) {
      auto cb = std::make_shared<Save>();
      cb->path = r.save_to, cb->epoch = r.save_epoch, cb->when = r.save_when;
      o.callbacks.push_back(cb);
    }
    trainer::Trainer t(o);
    t.fit(m, *dm, r.resume_from);
    return std::make_pair(flat(weights_of(m)), dm->trains_built);
  };
  const std::string mid = dir / "mid.ckpt", grown = dir / "grown.ckpt", ended = dir / "ended.ckpt";
  const auto [plain, plain_built] = run({.reload = 0});
  const auto [reloaded, reloaded_built] = run({.reload = 1, .save_to = mid});
  EXPECT_EQ(plain_built, 1);
  EXPECT_EQ(reloaded_built, 3);
  EXPECT_EQ(reloaded, plain);
  const auto [resumed, resumed_built] = run({.reload = 1, .resume_from = mid});
  EXPECT_EQ(resumed_built, 2);  // when the resumed fit starts (epoch 1), and for epoch 2
  EXPECT_EQ(resumed, plain);

  const auto [growing, growing_built] =
      run({.reload = 2, .epochs = 5, .grow = true, .save_to = grown, .save_epoch = 3});
  EXPECT_EQ(growing_built, 3);
  const trainer::Checkpoint ckpt = trainer::load_checkpoint(grown);
  EXPECT_EQ(ckpt.get("datamodule.batch_size"), "20");
  EXPECT_EQ(ckpt.get("datamodule_at_build.batch_size"), "16");
  const auto [grown_resumed, grown_resumed_built] =
      run({.reload = 2, .epochs = 5, .grow = true, .resume_from = grown});
  EXPECT_EQ(grown_resumed, growing);
  EXPECT_EQ(grown_resumed_built, 2);  // epoch 3's loaders, then epoch 4's

  const auto [ending, ending_built] = run(
      {.reload = 2, .epochs = 5, .grow = true, .save_to = ended, .save_epoch = 1, .save_when = When::EpochEnd});
  EXPECT_EQ(ending, growing);  // the same run, checkpointed elsewhere
  const trainer::Checkpoint at_end = trainer::load_checkpoint(ended);
  EXPECT_EQ(at_end.get("datamodule.batch_size"), "16");
  EXPECT_EQ(at_end.get("datamodule_at_build.batch_size"), "8");
  const auto [end_resumed, end_resumed_built] = run({.reload = 2, .epochs = 5, .grow = true, .resume_from = ended});
  EXPECT_EQ(end_resumed, growing);
  EXPECT_EQ(end_resumed_built, 2);  // epoch 2's loaders when the fit starts, then epoch 4's

  const auto [sharded, sharded_built] = run({.reload = 1, .next_shard = true, .save_to = mid});
  EXPECT_EQ(sharded_built, 3);  // shards 0, 1 and 2
  EXPECT_EQ(trainer::load_checkpoint(mid).get("datamodule_at_build.shard"), "1");
  EXPECT_EQ(run({.reload = 1, .next_shard = true, .resume_from = mid}).first, sharded);
  const std::string started = dir / "started.ckpt";
  EXPECT_EQ(run({.reload = 1, .next_shard = true, .save_to = started, .save_epoch = 2, .save_when = When::EpochStart})
                .first,
            sharded);
  EXPECT_EQ(trainer::load_checkpoint(started).get("trainer.batch_in_epoch"), "0");
  EXPECT_EQ(run({.reload = 1, .next_shard = true, .resume_from = started}).first, sharded);
}

// scale_batch_size over a DataModule: its batch_size is what is scaled, and is left at the answer.
struct Capped : Regressor {
  int64_t capacity = 20;
  Tensor training_step(const data::Batch& b, int64_t i) override {
    if (b[0].size(0) > capacity) throw OutOfMemoryError("simulated: does not fit");
    return Regressor::training_step(b, i);
  }
};

TEST(DataModule, TheBatchSizeSearchScalesItsBatchSize) {
  TempDir dir;
  Capped m;
  RegressionData dm;
  dm.batch_size = 3;
  const auto r = trainer::scale_batch_size(m, dm, quiet(dir.str()), {.mode = "binsearch"});
  EXPECT_EQ(r.batch_size, 20);
  EXPECT_EQ(dm.batch_size, 20);
  EXPECT_EQ(dm.calls.front(), "prepare_data");
  EXPECT_EQ(dm.calls[1], "setup fit");
  EXPECT_EQ(dm.calls.back(), "teardown fit");
  // A DataModule whose loader ignores batch_size cannot be scaled: an error, and batch_size as it was.
  RegressionData fixed;
  fixed.batch_size = 3;
  fixed.use_batch_size = false;
  expect_error([&] { trainer::scale_batch_size(m, fixed, quiet(dir.str())); },
               {"built batches of 5 with its batch_size at 2", "must build its loaders with batch_size"});
  EXPECT_EQ(fixed.batch_size, 3);
  EXPECT_EQ(fixed.calls.back(), "teardown fit");
}

}  // namespace
}  // namespace kiln::test
