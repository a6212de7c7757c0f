// The Trainer's profiler option: the report's call counts against what the options say the loops must do
// (batches, accumulation windows, validation runs) and against the module's own step counters.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "trainer/profile_table.h"
#include "trainer/trainer_test_util.h"

namespace kiln {
namespace {

using test::Regressor;
using test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TrainerProfiler, SimpleCountsEveryActionTheLoopsTake) {
  TempDir dir;
  auto train = test::loader(test::regression_data(40), 4);  // 10 batches, 5 of them per epoch
  auto val = test::loader(test::regression_data(24, 9), 8);  // 3 batches
  Regressor module;
  trainer::TrainerOptions o = test::quiet(dir.str());
  o.max_epochs = 2;
  o.limit_train_batches = 5;
  o.accumulate_grad_batches = 2;
  o.profiler = "simple";
  trainer::Trainer t(o);
  t.fit(module, *train, val.get());
  ASSERT_FALSE(profiler::recording_ranges()) << "the profiler must stop with fit";

  const std::string table = slurp(dir / "fit-profile.txt");
  ASSERT_FALSE(table.empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "fit-trace.json")) << "'simple' writes no timeline";
  EXPECT_FALSE(test::profile_has_kind(table, "kernel")) << table;
  EXPECT_FALSE(test::profile_has_kind(table, "backward")) << table;

  // 2 epochs x 5 batches; windows of 2 batches, and an epoch's last batch steps: 3 steps an epoch.
  EXPECT_EQ(module.train_steps, 10);
  EXPECT_EQ(test::profile_calls(table, "range", "training_step"), module.train_steps) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "run_training_batch"), 10) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "backward"), 10) << table;
  EXPECT_EQ(t.global_step(), 6);
  EXPECT_EQ(test::profile_calls(table, "range", "optimizer_step"), t.global_step()) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "optimizer.step"), 6) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "zero_grad"), 6) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "clip_gradients"), -1) << "no clipping was asked for\n" << table;
  // One validation run per epoch of 3 batches.
  EXPECT_EQ(module.val_steps, 6);
  EXPECT_EQ(test::profile_calls(table, "range", "validation_step"), module.val_steps) << table;
  // Waiting for batches: the first of each run and one per batch after it (not after the last one taken).
  EXPECT_EQ(test::profile_calls(table, "range", "train_dataloader_next"), 2 * 5) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "val_dataloader_next"), 2 * 3) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "batch_to_device"), 10 + 6) << table;
  // Hooks, per class: the module's first.
  EXPECT_EQ(test::profile_calls(table, "range", "Regressor.on_train_batch_end"), 10) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "Regressor.on_train_epoch_start"), 2) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "Regressor.on_before_optimizer_step"), 6) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "Regressor.on_fit_start"), 1) << table;
}

TEST(TrainerProfiler, OpsAddsKernelsBackwardNodesAndATimeline) {
  TempDir dir;
  auto train = test::loader(test::regression_data(16), 4);  // 4 batches
  auto test_data = test::loader(test::regression_data(12, 3), 4);  // 3 batches
  Regressor module;
  trainer::TrainerOptions o = test::quiet(dir.str());
  o.max_epochs = 1;
  o.profiler = "ops";
  o.enable_checkpointing = true;  // a ModelCheckpoint: its hooks and save are in the profile too
  trainer::Trainer t(o);
  t.fit(module, *train);
  const std::string table = slurp(dir / "fit-profile.txt");
  EXPECT_TRUE(test::profile_has_kind(table, "kernel")) << table;
  // Each backward ends in one AccumulateGrad per parameter (weight and bias).
  EXPECT_EQ(test::profile_calls(table, "backward", "AccumulateGrad backward"), 4 * 2) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "ModelCheckpoint.on_train_epoch_end"), 1) << table;
  EXPECT_EQ(test::profile_calls(table, "range", "save_checkpoint"), 1) << table;
  const std::string trace = slurp(dir / "fit-trace.json");
  EXPECT_EQ(trace.rfind("{\"displayTimeUnit\"", 0), 0u) << trace.substr(0, 200);
  EXPECT_NE(trace.find("\"name\": \"training_step\""), std::string::npos);
  EXPECT_NE(trace.find("\"cat\": \"kernel\""), std::string::npos);

  // test() has its own report, with its own counts.
  t.test(module, *test_data);
  const std::string test_table = slurp(dir / "test-profile.txt");
  EXPECT_EQ(module.test_steps, 3);
  EXPECT_EQ(test::profile_calls(test_table, "range", "test_step"), 3) << test_table;
  EXPECT_EQ(test::profile_calls(test_table, "range", "test_dataloader_next"), 3) << test_table;
  EXPECT_EQ(test::profile_calls(test_table, "range", "training_step"), -1) << test_table;
}

TEST(TrainerProfiler, AFailedFitWritesNoReportAndStopsRecording) {
  struct Failing : Regressor {
    Tensor training_step(const data::Batch& b, int64_t idx) override {
      if (idx == 2) throw std::runtime_error("boom at batch 2");
      return Regressor::training_step(b, idx);
    }
  };
  TempDir dir;
  auto train = test::loader(test::regression_data(16), 4);
  Failing module;
  trainer::TrainerOptions o = test::quiet(dir.str());
  o.max_epochs = 1;
  o.profiler = "ops";
  trainer::Trainer t(o);
  EXPECT_THROW(t.fit(module, *train), std::runtime_error);
  EXPECT_FALSE(profiler::recording_ranges());
  EXPECT_FALSE(std::filesystem::exists(dir / "fit-profile.txt"));
  profiler::Profiler next;  // nothing was left recording
  EXPECT_TRUE(next.recording());
}

TEST(TrainerProfiler, AReportThatCannotBeWrittenDoesNotFailTheFit) {
  TempDir dir;
  const std::string not_a_folder = dir / "file";
  std::ofstream(not_a_folder) << "x";
  auto train = test::loader(test::regression_data(8), 4);
  Regressor module;
  trainer::TrainerOptions o = test::quiet(not_a_folder);  // the report would go into a regular file
  o.max_epochs = 1;
  o.profiler = "simple";
  trainer::Trainer t(o);
  testing::internal::CaptureStderr();
  t.fit(module, *train);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(module.train_steps, 2);
  EXPECT_NE(err.find("the profile of fit() was not written"), std::string::npos) << err;
  EXPECT_FALSE(profiler::recording_ranges());
  t.fit(module, *train);  // the Trainer is free for the next stage
  EXPECT_EQ(module.train_steps, 4);
}

TEST(TrainerProfiler, AnUnknownProfilerIsAnError) {
  trainer::TrainerOptions o;
  o.profiler = "advanced";
  try {
    trainer::Trainer t(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("profiler 'advanced': expected 'none', 'simple' or 'ops'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln
