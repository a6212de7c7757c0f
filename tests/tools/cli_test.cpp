// The `kiln` command line driven as a user drives it: run_cli() with the arguments of a shell command, in a
// fresh folder per test, on small synthetic data (600 examples of 8 features in 10 Gaussian clusters: 400 to
// train, 100 to validate, 100 to test; 13 batches of 32 per epoch), so each command takes a fraction of a
// second. What the commands report is checked against something they did not compute: the accuracy of a
// checkpoint's weights computed here by a plain forward pass, the config file the test wrote, the schema's
// own key list, and an uninterrupted run for the resumed one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/tensor/allocator.h"
#include "kiln/tools/classifier.h"
#include "kiln/tools/datasets.h"
#include "kiln/tools/models.h"
#include "kiln/tools/run_config.h"
#include "kiln/trainer/checkpoint.h"
#include "kiln/trainer/lr_finder.h"
#include "kiln/trainer/yaml.h"
#include "tools/tools_test_util.h"
#include "trainer/profile_table.h"

#ifndef KILN_EXPECTED_VERSION
#define KILN_EXPECTED_VERSION ""
#endif

namespace kiln::tools {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::read_csv_table;
using testing::run_kiln;
using testing::TempDir;

constexpr int64_t kStepsPerEpoch = 13;  // ceil(400 / 32)
constexpr int64_t kTestSize = 100;

// The number after "<metric> " in a command's report ("test (...): test/acc 0.9700  test/loss 0.1640").
double reported(const std::string& out, const std::string& metric) {
  const size_t at = out.rfind(metric + " ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no '" << metric << "' in:\n" << out;
    return NAN;
  }
  return std::stod(out.substr(at + metric.size() + 1));
}

// What a checkpoint's weights give on one split of its run's data, computed here with one forward pass over
// the whole split (no Trainer, no loader, no metric averaging).
struct HandEval {
  double accuracy = 0;
  std::vector<int64_t> labels, predictions;
  std::vector<double> top_probability;
};

HandEval evaluate_by_hand(const std::string& ckpt_path, const std::string& split) {
  const testing::CheckpointRun run = testing::rebuild_from_checkpoint(ckpt_path);
  const DataSplits& d = run.data;
  Classifier& module = *run.module;
  auto ds = std::dynamic_pointer_cast<data::TensorDataset>(split == "val" ? d.val : d.test);
  EXPECT_TRUE(ds != nullptr);
  NoGradGuard no_grad;
  const Tensor probs = softmax(module.forward(d.inputs(ds->tensors()[0])), 1);  // (N, K)
  const Tensor labels = ds->tensors()[1];                               // (N)
  HandEval r;
  int64_t correct = 0;
  for (int64_t i = 0; i < labels.size(0); ++i) {
    int64_t best = 0;
    for (int64_t k = 1; k < probs.size(1); ++k) {
      if (probs[i][k].item<double>() > probs[i][best].item<double>()) best = k;
    }
    r.labels.push_back(labels[i].item<int64_t>());
    r.predictions.push_back(best);
    r.top_probability.push_back(probs[i][best].item<double>());
    correct += best == r.labels.back();
  }
  r.accuracy = static_cast<double>(correct) / static_cast<double>(labels.size(0));
  return r;
}

// a and b have one shape and the same elements (read as float64: exact for every float dtype kiln has).
bool same_elements(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const Tensor x = a.detach().contiguous().to(kFloat64), y = b.detach().contiguous().to(kFloat64);
  return std::equal(x.data_ptr<double>(), x.data_ptr<double>() + x.numel(), y.data_ptr<double>());
}

// The values of a YAML tree: its leaves, counting a list as one value, and an empty mapping too (an open
// mapping's default, model.args; a section is never empty).
size_t count_values(const trainer::yaml::Node& node) {
  if (!node.is_mapping() || node.size() == 0) return 1;
  size_t n = 0;
  for (const auto& e : node.entries()) n += count_values(e.value);
  return n;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_ / "run.yaml";
    std::ofstream(config_) << "trainer:\n"
                              "  max_epochs: 3\n"
                              "  seed: 0\n"
                              "  accelerator: cpu\n"
                              "  default_root_dir: \"" << root() << "\"\n"
                              "  enable_progress_bar: false\n"
                              "  enable_model_summary: false\n"
                              "model:\n"
                              "  name: mlp\n"
                              "data:\n"
                              "  name: synthetic\n"
                              "  num_samples: 600\n"
                              "  num_features: 8\n"
                              "  val_size: 100\n"
                              "  batch_size: 32\n"
                              "callbacks:\n"
                              "  checkpoint:\n"
                              "    monitor: val/acc\n"
                              "    mode: max\n";
  }

  std::string root() const { return dir_ / "runs"; }
  fs::path run_dir(int version = 0) const { return fs::path(root()) / "kiln" / ("version_" + std::to_string(version)); }
  fs::path last_ckpt() const { return run_dir() / "checkpoints" / "last.ckpt"; }
  // The run's one checkpoint besides last.ckpt: ModelCheckpoint's best (save_top_k 1).
  std::string best_ckpt() const {
    std::string best;
    for (const auto& e : fs::directory_iterator(run_dir() / "checkpoints")) {
      if (e.path().filename() != "last.ckpt") best = e.path().string();
    }
    return best;
  }

  // `kiln train --config run.yaml <extra...>`, which must succeed.
  CliResult train(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"train", "--config", config_};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_kiln(args);
    EXPECT_EQ(r.status, 0) << r.err;
    return r;
  }
  // A command expected to fail: its status, and stderr holding every one of `parts`.
  void expect_failure(const std::vector<std::string>& args, int status, const std::vector<std::string>& parts) {
    const CliResult r = run_kiln(args);
    EXPECT_EQ(r.status, status) << r.err;
    for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << "'" << p << "' not in:\n" << r.err;
  }

  TempDir dir_;
  std::string config_;
};

// ---- train ----

TEST_F(Cli, TrainWritesTheRunFolderAndLearns) {
  const CliResult r = train();
  EXPECT_NE(r.out.find("run folder: " + run_dir().string()), std::string::npos) << r.out;

  // The saved config is the one this test wrote, resolved.
  EXPECT_EQ(load_run_config((run_dir() / "config.yaml").string()), load_run_config(config_));

  // metrics.csv: one validation row and one train-epoch row per epoch, at the epoch's last step, then the test;
  // every row names its epoch (the train-epoch rows, those with train/acc, are counted here).
  const auto csv = read_csv_table(run_dir() / "metrics.csv");
  std::vector<int64_t> val_steps, epochs;
  std::vector<double> val_acc;
  double test_acc = NAN;
  for (const auto& row : csv.rows) {
    if (!row.at("val/acc").empty()) {
      val_steps.push_back(std::stoll(row.at("step")));
      val_acc.push_back(std::stod(row.at("val/acc")));
    }
    EXPECT_FALSE(row.at("epoch").empty()) << "a row without its epoch at step " << row.at("step");
    if (!row.at("train/acc").empty()) {
      epochs.push_back(std::stoll(row.at("epoch")));
      EXPECT_EQ(std::stoll(row.at("step")), (epochs.back() + 1) * kStepsPerEpoch);
    }
    if (!row.at("test/acc").empty()) test_acc = std::stod(row.at("test/acc"));
  }
  EXPECT_EQ(val_steps, (std::vector<int64_t>{13, 26, 39}));
  EXPECT_EQ(epochs, (std::vector<int64_t>{0, 1, 2}));
  for (double a : val_acc) EXPECT_TRUE(a >= 0 && a <= 1) << a;

  // A TensorBoard event file with something in it.
  bool events = false;
  for (const auto& e : fs::directory_iterator(run_dir())) {
    events = events || (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && fs::file_size(e) > 0);
  }
  EXPECT_TRUE(events);

  // last.ckpt after the last step, and the one best checkpoint: the epoch of the highest val/acc (the first
  // such epoch: a tie is no improvement).
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(run_dir() / "checkpoints")) files.insert(e.path().filename().string());
  const size_t best_epoch = static_cast<size_t>(std::max_element(val_acc.begin(), val_acc.end()) - val_acc.begin());
  const std::string best = "epoch=" + std::to_string(best_epoch) +
                           "-step=" + std::to_string((best_epoch + 1) * kStepsPerEpoch) + ".ckpt";
  EXPECT_EQ(files, (std::set<std::string>{"last.ckpt", best}));
  EXPECT_EQ(trainer::load_checkpoint(last_ckpt().string()).get_int("trainer.global_step"), 3 * kStepsPerEpoch);

  // The test ran on the best weights, and says so; the clusters are far apart, so it is well above chance
  // (0.1): 0.97 with this seed.
  const std::string best_path = (run_dir() / "checkpoints" / best).string();
  EXPECT_NE(r.out.find("test (" + best_path + ")"), std::string::npos) << r.out;
  EXPECT_GT(test_acc, 0.8);
  EXPECT_NEAR(test_acc, evaluate_by_hand(best_path, "test").accuracy, 1e-6);
  EXPECT_NEAR(reported(r.out, "test/acc"), test_acc, 5e-5);
}

TEST_F(Cli, FastDevRunTrainsOneBatchAndWritesNothing) {
  const CliResult r = train({"--set", "trainer.fast_dev_run=true", "--set", "trainer.enable_progress_bar=true"});
  // The progress bar's epoch summary counts the batches.
  EXPECT_NE(r.out.find("Epoch 1/1: 1 batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test (final weights)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("run folder"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(root()));
}

// `trainer.profiler=ops` from the command line: the run folder gets each stage's table and timeline, and
// the table counts the batches the run took.
TEST_F(Cli, ProfilerWritesEachStagesReportIntoTheRunFolder) {
  const CliResult r = train({"--set", "trainer.max_epochs=1", "--set", "trainer.profiler=ops"});
  EXPECT_NE(r.out.find("every row: " + (run_dir() / "fit").string() + "-profile.txt"), std::string::npos) << r.out;
  EXPECT_EQ(test::profile_calls(testing::read_file(run_dir() / "fit-profile.txt"), "range", "training_step"),
            kStepsPerEpoch);
  EXPECT_TRUE(fs::exists(run_dir() / "fit-trace.json"));
  EXPECT_TRUE(fs::exists(run_dir() / "test-profile.txt"));

  expect_failure({"train", "--config", config_, "--set", "trainer.profiler=fast"}, 1,
                 {"trainer.profiler", "fast", "simple", "ops"});
}

// kiln export: the network alone, under the names a bare network (and PyTorch's same architecture) has.
TEST_F(Cli, ExportWritesTheNetworksWeightsForABareNetwork) {
  train({"--set", "trainer.max_epochs=1"});
  const std::string ckpt = last_ckpt().string();
  const std::string out = dir_ / "model.safetensors";
  const CliResult r = run_kiln({"export", "--ckpt", ckpt, "--output", out});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("to " + out), std::string::npos) << r.out;

  // A network built from the run's config loads the file strictly and computes what the checkpoint's
  // classifier computes, bit for bit.
  const trainer::Checkpoint c = trainer::load_checkpoint(ckpt);
  const RunConfig cfg = load_run_config_text(c.get("hparams.config"), ckpt);
  const DataSplits d = make_data(cfg.data);
  std::shared_ptr<nn::Module> net = make_model(cfg.model, d.info);
  nn::load(*net, out);
  Classifier module(make_model(cfg.model, d.info), cfg);
  module.load_state_dict(c.tensor_section("model"));
  net->eval();
  module.eval();
  NoGradGuard no_grad;
  const Tensor x = d.inputs(std::dynamic_pointer_cast<data::TensorDataset>(d.test)->tensors()[0]);
  const Tensor want = module.forward(x), got = (*net)(x);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(same_elements(got, want));
  const serialize::Loaded file = serialize::load_safetensors(out);
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("kiln.config"), c.get("hparams.config"));

  // --dtype bfloat16: each tensor rounded once from the checkpoint's float32.
  const std::string half = dir_ / "model-bf16.safetensors";
  ASSERT_EQ(run_kiln({"export", "--ckpt", ckpt, "--output", half, "--dtype", "bfloat16"}).status, 0);
  const serialize::Loaded h = serialize::load_safetensors(half);
  const serialize::TensorMap section = c.tensor_section("model");
  ASSERT_EQ(h.tensors.size(), section.size());
  for (const auto& [key, t] : h.tensors) {
    EXPECT_EQ(t.dtype(), kBFloat16) << key;
    EXPECT_TRUE(same_elements(t, section.at("net." + key).to(kBFloat16))) << key;
  }

  expect_failure({"export"}, 2, {"--ckpt FILE is required"});
  expect_failure({"export", "--ckpt", ckpt, "--dtype", "int8"}, 2, {"--dtype 'int8'", "bfloat16"});
  const std::string unwritable = dir_ / "no/such/folder/m.safetensors";
  expect_failure({"export", "--ckpt", ckpt, "--output", unwritable}, 1, {"no/such/folder"});
  expect_failure({"export", "--ckpt", dir_ / "missing.ckpt"}, 1, {"missing.ckpt"});
}

// kiln bench times the asked-for batches, warm-up apart, through the Trainer, and writes nothing.
TEST_F(Cli, BenchTimesTheTrainingStepAndWritesNothing) {
  const CliResult r = run_kiln({"bench", "--config", config_, "--steps", "6", "--warmup", "2", "--profile"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("model mlp, batch 32, cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6 timed batches after 2 warm-up"), std::string::npos) << r.out;
  const size_t at = r.out.find("step:   median ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(at + 15)), 0.0);
  // The profile covers exactly the timed batches: one training_step, backward and Adam step each.
  EXPECT_EQ(test::profile_calls(r.out, "range", "training_step"), 6) << r.out;
  EXPECT_EQ(test::profile_calls(r.out, "range", "run_training_batch"), 6) << r.out;
  EXPECT_EQ(test::profile_calls(r.out, "kernel", "adam_step"), 6) << r.out;
  EXPECT_FALSE(fs::exists(root()));

  // More batches than an epoch has (13): the bench runs a second epoch.
  const CliResult two = run_kiln({"bench", "--config", config_, "--steps", "20", "--warmup", "0", "--profile"});
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_EQ(test::profile_calls(two.out, "range", "training_step"), 20) << two.out;

  expect_failure({"bench", "--config", config_, "--steps", "0"}, 2, {"--steps '0'", "1.."});
}

// kiln lr-find runs the range test on the configured run, writes its CSV and prints a suggestion from it.
TEST_F(Cli, LrFindWritesTheRangeAndSuggestsARate) {
  const std::string csv = dir_ / "range.csv";
  const CliResult r = run_kiln({"lr-find", "--config", config_, "--steps", "30", "--min-lr", "1e-5", "--max-lr",
                                "0.5", "--output", csv});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("lr-find: model mlp"), std::string::npos) << r.out;
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header, "step,lr,loss");
  std::vector<double> lrs, losses;
  while (std::getline(in, line)) {
    const size_t a = line.find(','), b = line.find(',', a + 1);
    lrs.push_back(std::stod(line.substr(a + 1, b - a - 1)));
    losses.push_back(std::stod(line.substr(b + 1)));
  }
  ASSERT_GE(lrs.size(), 12u);
  EXPECT_NEAR(lrs.front(), 1e-5, 1e-12);
  // The suggestion printed is the rule's on the rows written.
  trainer::LRFinderResult written{lrs, losses};
  const size_t at = r.out.find("suggested lr: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NEAR(std::stod(r.out.substr(at + 14)), *written.suggestion(), 5e-3 * *written.suggestion()) << r.out;  // 3 digits
  EXPECT_FALSE(fs::exists(root()));  // no run folder

  expect_failure({"lr-find", "--config", config_, "--min-lr", "0"}, 2, {"--min-lr '0'", "positive"});
  expect_failure({"lr-find", "--config", config_, "--steps", "5"}, 2, {"--steps '5'", "13.."});  // no suggestion
  expect_failure({"lr-find", "--config", config_, "--min-lr", "1", "--max-lr", "0.1"}, 2, {"larger than --min-lr"});
}

// kiln scale-batch-size: without a limit the doubling ends at the training set's size (600 samples less 100
// for validation and 100 for test); under --memory-limit, binsearch's answer fits and the size after it does
// not, as the table it prints shows. It writes nothing.
TEST_F(Cli, ScaleBatchSizeFindsTheLargestBatchThatFits) {
  const CliResult free = run_kiln({"scale-batch-size", "--config", config_});
  ASSERT_EQ(free.status, 0) << free.err;
  EXPECT_NE(free.out.find("model mlp, cpu, power mode, 3 steps a size (and as many validation batches)"),
            std::string::npos) << free.out;
  EXPECT_NE(free.out.find("largest batch size that fit: 400, bounded by the dataset's size "
                          "(--set data.batch_size=400)"), std::string::npos) << free.out;

  const CliResult capped =
      run_kiln({"scale-batch-size", "--config", config_, "--mode", "binsearch", "--init", "16", "--memory-limit", "3"});
  ASSERT_EQ(capped.status, 0) << capped.err;
  std::map<int64_t, bool> fits;  // the table: "  <size>  yes|no  <peak>"
  std::istringstream table(capped.out);
  for (std::string line; std::getline(table, line);) {
    std::istringstream row(line);
    int64_t size = 0;
    std::string yes;
    if (row >> size >> yes && (yes == "yes" || yes == "no")) fits[size] = yes == "yes";
  }
  const size_t at = capped.out.find("largest batch size that fit: ");
  ASSERT_NE(at, std::string::npos) << capped.out;
  const int64_t answer = std::stoll(capped.out.substr(at + 29));
  EXPECT_LT(answer, 400) << capped.out;
  EXPECT_TRUE(fits.at(answer)) << capped.out;
  EXPECT_FALSE(fits.at(answer + 1)) << capped.out;
  EXPECT_NE(capped.out.find("bounded by memory"), std::string::npos) << capped.out;
  EXPECT_FALSE(fs::exists(root()));

  expect_failure({"scale-batch-size", "--config", config_, "--mode", "linear"}, 2, {"--mode 'linear'", "binsearch"});
  expect_failure({"scale-batch-size", "--config", config_, "--memory-limit", "0"}, 2, {"--memory-limit '0'"});
  expect_failure({"scale-batch-size", "--config", config_, "--memory-limit", "1"}, 1,
                 {"even a batch of 1 does not fit", "over the limit of 1.00 MiB"});
  // The limit was the command's: lifted after it, also after a failure, for what runs next in this process.
  EXPECT_EQ(cpu_memory_stats().limit_bytes, 0u);
  EXPECT_EQ(train().status, 0);
}

// callbacks.accumulate_grad_schedule: Lightning's GradientAccumulationScheduler from the config. 13 batches an
// epoch: 13 steps in epoch 0, then 7 (six of two batches and one of the last alone) in epoch 1.
TEST_F(Cli, AnAccumulationScheduleFromTheConfig) {
  train({"--set", "trainer.max_epochs=2", "--set", "callbacks.accumulate_grad_schedule=[[0, 1], [1, 2]]"});
  EXPECT_EQ(trainer::load_checkpoint(last_ckpt().string()).get_int("trainer.global_step"), kStepsPerEpoch + 7);
  expect_failure({"train", "--config", config_, "--set", "callbacks.accumulate_grad_schedule=[[1, 2], [0, 4]]"}, 1,
                 {"callbacks.accumulate_grad_schedule[1]", "the epochs must increase"});
  expect_failure({"train", "--config", config_, "--set", "callbacks.accumulate_grad_schedule=[[0, 2]]", "--set",
                  "trainer.accumulate_grad_batches=2"},
                 1, {"needs trainer.accumulate_grad_batches 1"});
  expect_failure({"train", "--config", config_, "--set", "callbacks.accumulate_grad_schedule=[[0]]"}, 1,
                 {"expected [first epoch, factor]"});
}

// callbacks.throughput_monitor: a ThroughputMonitor from the config, its rows in metrics.csv at the logging
// steps (every 4th), with the counts the data gives (full batches of 32 before the epoch's last).
TEST_F(Cli, AThroughputMonitorFromTheConfig) {
  train({"--set", "trainer.max_epochs=1", "--set", "trainer.log_every_n_steps=4", "--set",
         "callbacks.throughput_monitor.enabled=true", "--set", "callbacks.throughput_monitor.window_size=3"});
  std::vector<int64_t> steps;
  for (const auto& row : read_csv_table(run_dir() / "metrics.csv").rows) {
    if (row.at("train/device/samples_per_sec").empty()) continue;
    steps.push_back(std::stoll(row.at("step")));
    EXPECT_EQ(std::stod(row.at("train/batches")), steps.back());
    EXPECT_EQ(std::stod(row.at("train/samples")), 32.0 * steps.back());
    EXPECT_GT(std::stod(row.at("train/device/samples_per_sec")), 0);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 8, 12}));
  expect_failure({"train", "--config", config_, "--set", "callbacks.throughput_monitor.enabled=true", "--set",
                  "logger.csv=false", "--set", "logger.tensorboard=false"},
                 1, {"callbacks.throughput_monitor.enabled needs a logger"});
  expect_failure({"train", "--config", config_, "--set", "callbacks.throughput_monitor.window_size=1"}, 1,
                 {"callbacks.throughput_monitor.window_size"});
}

TEST_F(Cli, ADeviceStatsMonitorFromTheConfig) {
  train({"--set", "trainer.max_epochs=1", "--set", "trainer.log_every_n_steps=4", "--set",
         "callbacks.device_stats_monitor.enabled=true"});
  std::vector<int64_t> steps;
  for (const auto& row : read_csv_table(run_dir() / "metrics.csv").rows) {
    if (row.at("DeviceStatsMonitor.on_train_batch_end/process_rss_mib").empty()) continue;
    steps.push_back(std::stoll(row.at("step")));
    EXPECT_GT(std::stod(row.at("DeviceStatsMonitor.on_train_batch_start/process_rss_mib")), 1.0);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 8, 12}));
  expect_failure({"train", "--config", config_, "--set", "callbacks.device_stats_monitor.enabled=true", "--set",
                  "logger.csv=false", "--set", "logger.tensorboard=false"},
                 1, {"callbacks.device_stats_monitor.enabled needs a logger"});
}

// A run stopped after one epoch and resumed to two continues in its own folder, and ends exactly where a run
// of two epochs straight through ends.
TEST_F(Cli, ResumeContinuesTheSameRunFolder) {
  train({"--set", "trainer.max_epochs=1"});
  EXPECT_EQ(trainer::load_checkpoint(last_ckpt().string()).get_int("trainer.global_step"), kStepsPerEpoch);
  const CliResult resumed = train({"--set", "trainer.max_epochs=2", "--ckpt", "last"});
  EXPECT_NE(resumed.out.find("run folder: " + run_dir().string()), std::string::npos) << resumed.out;
  EXPECT_FALSE(fs::exists(run_dir(1)));
  EXPECT_EQ(trainer::load_checkpoint(last_ckpt().string()).get_int("trainer.global_step"), 2 * kStepsPerEpoch);

  const auto csv = read_csv_table(run_dir() / "metrics.csv");
  std::vector<std::string> epochs, val_loss;
  for (const auto& row : csv.rows) {
    if (!row.at("train/acc").empty()) epochs.push_back(row.at("epoch"));
    if (!row.at("val/loss").empty()) val_loss.push_back(row.at("step") + ":" + row.at("val/loss"));
  }
  EXPECT_EQ(epochs, (std::vector<std::string>{"0", "1"}));

  // The same two epochs without a stop, in another root.
  const std::string straight_root = dir_ / "straight";
  const CliResult through =
      train({"--set", "trainer.max_epochs=2", "--set", "trainer.default_root_dir=" + straight_root});
  const auto straight = read_csv_table(fs::path(straight_root) / "kiln" / "version_0" / "metrics.csv");
  std::vector<std::string> straight_val_loss;
  for (const auto& row : straight.rows) {
    if (!row.at("val/loss").empty()) straight_val_loss.push_back(row.at("step") + ":" + row.at("val/loss"));
  }
  EXPECT_EQ(val_loss, straight_val_loss);
  EXPECT_EQ(val_loss.size(), 2u);
  EXPECT_EQ(reported(resumed.out, "test/acc"), reported(through.out, "test/acc"));
  EXPECT_EQ(reported(resumed.out, "test/loss"), reported(through.out, "test/loss"));
}

// The run folder is found by what it is, not by how default_root_dir is spelled: "runs/" and "<dir>/./runs"
// resume the run started under "runs" in its own folder, not in a new version_<N>.
TEST_F(Cli, ResumeFindsTheRunFolderHoweverTheRootIsSpelled) {
  train({"--set", "trainer.max_epochs=1"});
  train({"--set", "trainer.max_epochs=2", "--set", "trainer.default_root_dir=" + root() + "/", "--ckpt", "last"});
  const std::string dotted = (dir_.path() / "." / "runs").string();
  train({"--set", "trainer.max_epochs=3", "--set", "trainer.default_root_dir=" + dotted, "--ckpt", "last"});
  EXPECT_FALSE(fs::exists(run_dir(1)));
  EXPECT_EQ(trainer::load_checkpoint(last_ckpt().string()).get_int("trainer.global_step"), 3 * kStepsPerEpoch);
  std::vector<std::string> epochs;
  for (const auto& row : read_csv_table(run_dir() / "metrics.csv").rows) {
    if (!row.at("train/acc").empty()) epochs.push_back(row.at("epoch"));
  }
  EXPECT_EQ(epochs, (std::vector<std::string>{"0", "1", "2"}));
}

// ---- eval and predict ----

TEST_F(Cli, EvalReportsTheAccuracyOfTheCheckpointsWeights) {
  const CliResult trained = train();
  const CliResult last = run_kiln({"eval", "--ckpt", last_ckpt().string()});
  ASSERT_EQ(last.status, 0) << last.err;
  // kTestSize examples in one batch: the accuracy is a multiple of 0.01, printed with 4 decimals.
  EXPECT_NEAR(reported(last.out, "test/acc"), evaluate_by_hand(last_ckpt().string(), "test").accuracy, 5e-5);

  // In batches of 32 (32, 32, 32, 4) the per-batch accuracies are averaged by batch size: still the same.
  const CliResult batched = run_kiln({"eval", "--ckpt", last_ckpt().string(), "--set", "data.val_batch_size=32"});
  ASSERT_EQ(batched.status, 0) << batched.err;
  EXPECT_EQ(reported(batched.out, "test/acc"), reported(last.out, "test/acc"));

  // On the best checkpoint eval repeats what train reported.
  const std::string best = best_ckpt();
  const CliResult again = run_kiln({"eval", "--ckpt", best});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(reported(again.out, "test/acc"), reported(trained.out, "test/acc"));
  EXPECT_EQ(reported(again.out, "test/loss"), reported(trained.out, "test/loss"));

  const CliResult val = run_kiln({"eval", "--ckpt", last_ckpt().string(), "--split", "val"});
  ASSERT_EQ(val.status, 0) << val.err;
  EXPECT_NEAR(reported(val.out, "val/acc"), evaluate_by_hand(last_ckpt().string(), "val").accuracy, 5e-5);
}

// With weight averaging the checkpoints hold the averaged weights, which validation used: eval on the best
// checkpoint repeats what train reported, and eval on the last one matches a forward pass by hand.
TEST_F(Cli, WeightAveragingCheckpointsTheAveragedWeights) {
  const CliResult trained =
      train({"--set", "callbacks.weight_averaging.enabled=true", "--set", "callbacks.weight_averaging.decay=0.9"});
  const std::string best = best_ckpt();
  const CliResult again = run_kiln({"eval", "--ckpt", best});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(reported(again.out, "test/acc"), reported(trained.out, "test/acc"));
  // The last validation ran with the weights last.ckpt holds (no step after it): the same val/acc and loss.
  double last_val_acc = NAN, last_val_loss = NAN;
  for (const auto& row : read_csv_table(run_dir() / "metrics.csv").rows) {
    if (!row.at("val/acc").empty()) last_val_acc = std::stod(row.at("val/acc")), last_val_loss = std::stod(row.at("val/loss"));
  }
  const CliResult val = run_kiln({"eval", "--ckpt", last_ckpt().string(), "--split", "val"});
  ASSERT_EQ(val.status, 0) << val.err;
  EXPECT_NEAR(reported(val.out, "val/acc"), last_val_acc, 5e-5);
  EXPECT_NEAR(reported(val.out, "val/loss"), last_val_loss, 5e-5 * (1 + last_val_loss));
  // And the trained weights are not what it holds: the average lags them.
  const trainer::Checkpoint c = trainer::load_checkpoint(last_ckpt().string());
  const auto trained_weights = c.tensor_section("callbacks.WeightAveraging.trained");
  ASSERT_FALSE(trained_weights.empty());
  for (const auto& [name, t] : trained_weights) EXPECT_FALSE(t.equal(c.tensors.at("model." + name))) << name;
}

TEST_F(Cli, PredictWritesOneRowPerTestExample) {
  train();
  const std::string output = dir_ / "predictions.csv";
  const CliResult r = run_kiln({"predict", "--ckpt", last_ckpt().string(), "--output", output});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto csv = read_csv_table(output);
  EXPECT_EQ(csv.columns, (std::vector<std::string>{"index", "prediction", "label", "probability"}));
  ASSERT_EQ(static_cast<int64_t>(csv.rows.size()), kTestSize);

  const HandEval hand = evaluate_by_hand(last_ckpt().string(), "test");
  int64_t correct = 0;
  for (int64_t i = 0; i < kTestSize; ++i) {
    const auto& row = csv.rows[static_cast<size_t>(i)];
    const auto u = static_cast<size_t>(i);
    EXPECT_EQ(std::stoll(row.at("index")), i);
    EXPECT_EQ(std::stoll(row.at("label")), hand.labels[u]) << "row " << i;
    EXPECT_EQ(std::stoll(row.at("prediction")), hand.predictions[u]) << "row " << i;
    const double p = std::stod(row.at("probability"));
    EXPECT_TRUE(p > 0 && p <= 1) << "row " << i << ": " << p;
    EXPECT_NEAR(p, hand.top_probability[u], 1e-5) << "row " << i;
    correct += row.at("prediction") == row.at("label");
  }
  const double csv_accuracy = static_cast<double>(correct) / kTestSize;
  const CliResult eval = run_kiln({"eval", "--ckpt", last_ckpt().string()});
  ASSERT_EQ(eval.status, 0) << eval.err;
  EXPECT_NEAR(csv_accuracy, reported(eval.out, "test/acc"), 5e-5);
  char line[64];
  std::snprintf(line, sizeof line, "accuracy %.2f%%", 100 * csv_accuracy);
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
}

// ---- help and info ----

TEST_F(Cli, TrainHelpListsEveryKeyOfTheSchema) {
  const CliResult r = run_kiln({"train", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t at = r.out.find("config keys:\n");
  ASSERT_NE(at, std::string::npos) << r.out;
  // The key list is YAML holding every key at its default: walk it by each dotted key of the schema.
  const std::string keys = r.out.substr(at + 13);
  const trainer::yaml::Node doc = trainer::yaml::parse(keys, "kiln train --help");
  for (const auto& key : run_config_schema().keys()) {
    const trainer::yaml::Node* node = &doc;
    size_t begin = 0;
    while (node != nullptr && begin <= key->path.size()) {
      const size_t dot = std::min(key->path.find('.', begin), key->path.size());
      node = node->is_mapping() ? node->find(key->path.substr(begin, dot - begin)) : nullptr;
      begin = dot + 1;
    }
    EXPECT_TRUE(node != nullptr) << key->path << " is not in kiln train --help";
  }
  // ... and nothing else: as many values as the schema has keys.
  EXPECT_EQ(count_values(doc), run_config_schema().keys().size());
  EXPECT_EQ(load_run_config_text(keys, "kiln train --help"), RunConfig{});

  for (const char* command : {"eval", "predict"}) {
    const CliResult h = run_kiln({command, "--help"});
    EXPECT_EQ(h.status, 0) << h.err;
    EXPECT_NE(h.out.find(std::string("usage: kiln ") + command), std::string::npos) << h.out;
  }
}

TEST_F(Cli, InfoPrintsTheVersion) {
  const CliResult r = run_kiln({"info"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind(std::string("kiln ") + KILN_EXPECTED_VERSION + "\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("CUDA:"), std::string::npos) << r.out;
  const CliResult v = run_kiln({"--version"});
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out, std::string("kiln ") + KILN_EXPECTED_VERSION + "\n");
}

// ---- errors: a status of 1 (the run could not be done) or 2 (the command line is wrong), and a message
// on stderr that names the problem ----

TEST_F(Cli, UnknownKeySuggestsTheNearestOne) {
  expect_failure({"train", "--config", config_, "--set", "trainer.max_epoch=3"}, 1,
                 {"kiln train: error:", "unknown key 'trainer.max_epoch'", "did you mean 'trainer.max_epochs'"});
}

TEST_F(Cli, WrongTypeNamesKeyValueAndWhere) {
  expect_failure({"train", "--config", config_, "--set", "trainer.max_epochs=three"}, 1,
                 {"trainer.max_epochs", "expected an integer", "'three'", "--set trainer.max_epochs=three"});
}

TEST_F(Cli, BadEnumValueListsTheChoices) {
  expect_failure({"train", "--config", config_, "--set", "optimizer.name=adamm"}, 1,
                 {"optimizer.name", "sgd, adam, adamw, rmsprop, adagrad", "'adamm'"});
}

TEST_F(Cli, MissingConfigFileIsNamed) {
  const std::string missing = dir_ / "no_such_run.yaml";
  expect_failure({"train", "--config", missing}, 1, {"cannot open config file", missing});
}

TEST_F(Cli, UnknownCommandShowsTheUsage) {
  expect_failure({"trian"}, 2, {"unknown command 'trian'", "usage: kiln <command>"});
  EXPECT_EQ(run_kiln({}).status, 2);
}

TEST_F(Cli, UnknownOptionListsTheCommandsOptions) {
  expect_failure({"train", "--epochs", "3"}, 2, {"kiln train:", "unknown option '--epochs'", "--config", "--set"});
  expect_failure({"eval", "--output", "x.csv"}, 2, {"unknown option '--output'"});
  expect_failure({"train", "--set"}, 2, {"--set needs a value"});
}

TEST_F(Cli, EvalWithoutCheckpointIsAUsageError) {
  expect_failure({"eval"}, 2, {"kiln eval:", "--ckpt FILE is required"});
  expect_failure({"predict", "--output", dir_ / "p.csv"}, 2, {"kiln predict:", "--ckpt"});
}

TEST_F(Cli, CorruptedCheckpointIsRefused) {
  train({"--set", "trainer.max_epochs=1"});
  const std::string copy = dir_ / "copy.ckpt";
  fs::copy_file(last_ckpt(), copy);
  // One bit of the last tensor's bytes, well past the header.
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-100, std::ios::end);
    f.put(static_cast<char>(c ^ 0x01));
  }
  EXPECT_EQ(run_kiln({"eval", "--ckpt", last_ckpt().string()}).status, 0);  // the original still loads
  expect_failure({"eval", "--ckpt", copy}, 1, {"kiln eval: error:", copy, "corrupted"});
  expect_failure({"eval", "--ckpt", dir_ / "none.ckpt"}, 1, {"none.ckpt", "does not exist"});
}

TEST_F(Cli, MissingDataPathIsNamed) {
  const std::string missing = dir_ / "no_such_data.csv";
  expect_failure({"train", "--config", config_, "--set", "data.name=csv", "--set", "data.path=" + missing}, 1,
                 {"kiln train: error:", missing});
  EXPECT_FALSE(fs::exists(root()));  // nothing written for a run that could not start
}

}  // namespace
}  // namespace kiln::tools
