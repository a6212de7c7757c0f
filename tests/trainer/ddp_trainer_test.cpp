// The Trainer under strategy "ddp": ranks as forked processes (tests/distributed/multiprocess.h) with the
// variables `kiln launch` sets. Two ranks with batches of 4 each must train exactly what one process trains
// with batches of 8 (the DistributedSampler deals examples 0, 2, 4, ... to rank 0 and 1, 3, 5, ... to rank 1,
// so each global batch holds the same 8 examples), report the same epoch metrics, and leave one set of logs
// and checkpoints, written by rank 0. Under strategy "parameter_server" (sync), servers are forked ranks too and
// the workers must train the same thing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "kiln/distributed/process_group.h"
#include "kiln/trainer/data_module.h"
#include "kiln/trainer/throughput_monitor.h"
#include "trainer/resume_net.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

trainer::TrainerOptions ddp_options(const std::string& root) {
  trainer::TrainerOptions o = quiet(root);
  o.max_epochs = 2;
  o.strategy = "ddp";
  o.process_group_timeout = 30;
  return o;
}

// The oracle of the data-parallel tests: one process, batches of 8, 2 epochs.
struct SingleRun {
  std::vector<double> weights;
  double val_loss = 0;
};
SingleRun train_single(const std::string& root) {
  manual_seed(3);
  Regressor single;
  auto train8 = loader(regression_data(32), 8);
  auto val8 = loader(regression_data(16, 9), 8);
  trainer::TrainerOptions o = quiet(root);
  o.max_epochs = 2;
  trainer::Trainer t(o);
  t.fit(single, *train8, val8.get());
  return {flat(weights_of(single)), t.callback_metrics().at("val/loss")};
}

// Ranks 0 and 1 (or workers 0 and 1) of a run under `out` wrote their weights and validation loss: both must be
// the single process's (the epoch metric is the mean over every rank's examples).
void expect_matches_single(const std::string& out, const SingleRun& want, const std::string& what) {
  for (int rank : {0, 1}) {
    const auto got = read_numbers(out + "/weights." + std::to_string(rank));
    ASSERT_EQ(got.size(), want.weights.size()) << what << ", rank " << rank;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want.weights[i], 1e-5 * (1 + std::abs(want.weights[i])))
          << what << ", rank " << rank << " weight " << i;
    }
    EXPECT_NEAR(read_numbers(out + "/val." + std::to_string(rank)).at(0), want.val_loss, 1e-5 * (1 + want.val_loss))
        << what << ", rank " << rank;
  }
}

TEST(TrainerDDP, TwoRanksTrainWhatOneProcessTrainsOnTheWholeBatch) {
  TempDir dir;
  const SingleRun want = train_single(dir / "single");

  // Two ranks, batches of 4 each; rank 1 starts from other weights (DDP copies rank 0's). Over the tcp process
  // group, and over gloo when this build has it (TrainerOptions::ddp_backend).
  std::vector<std::string> backends{"tcp"};
  for (const auto& name : distributed::backends())
    if (name == "gloo") backends.push_back(name);
  for (const std::string& backend : backends) {
    const uint16_t port = distributed::find_free_port();
    const std::string out = dir / ("ddp_" + backend);
    const auto results = run_ranks(2, [&](int rank) {
      set_rank_env(rank, 2, port);
      manual_seed(rank == 0 ? 3 : 99);
      Regressor m;
      auto train4 = loader(regression_data(32), 4);
      auto val4 = loader(regression_data(16, 9), 4);
      trainer::TrainerOptions d = ddp_options(out);
      d.logger = true;  // rank 0 only
      d.ddp_backend = backend;
      trainer::Trainer tr(d);
      tr.fit(m, *train4, val4.get());
      rank_check(tr.global_step() == 8, "rank " + std::to_string(rank) + ": " + std::to_string(tr.global_step()) +
                                            " steps, expected 8 (2 epochs of 4 global batches)");
      write_numbers(out + "/weights." + std::to_string(rank), flat(weights_of(m)));
      write_numbers(out + "/val." + std::to_string(rank), {tr.callback_metrics().at("val/loss")});
    }, std::chrono::seconds(60));
    expect_all_ok(results);
    expect_matches_single(out, want, backend);
    // Rank 0 wrote the logs and the checkpoints; no rank wrote a second set.
    EXPECT_TRUE(std::filesystem::exists(out + "/kiln/version_0/metrics.csv"));
    EXPECT_FALSE(std::filesystem::exists(out + "/kiln/version_1"));
    EXPECT_FALSE(std::filesystem::exists(out + "/checkpoints"));
  }
}

TEST(TrainerDDP, AStopOnOneRankStopsEveryRankAtTheSameBatch) {
  TempDir dir;
  const uint16_t port = distributed::find_free_port();
  struct StopOnRankOne : trainer::Callback {
    void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                            int64_t idx) override {
      if (t.global_rank() == 1 && t.current_epoch() == 1 && idx == 1) t.set_should_stop(true);
    }
  };
  const auto results = run_ranks(2, [&](int rank) {
    set_rank_env(rank, 2, port);
    Regressor m;
    auto train4 = loader(regression_data(32), 4);
    trainer::TrainerOptions d = ddp_options(dir.str());
    d.max_epochs = 5;
    d.accumulate_grad_batches = 3;  // the stop lands inside an accumulation window: it is stepped and synced
    d.callbacks = {std::make_shared<StopOnRankOne>()};
    trainer::Trainer tr(d);
    tr.fit(m, *train4);
    rank_check(tr.current_epoch() == 2 && tr.batch_in_epoch() == 0,
               "rank " + std::to_string(rank) + " stopped at epoch " + std::to_string(tr.current_epoch()));
    write_numbers(dir / ("weights." + std::to_string(rank)), flat(weights_of(m)));
  }, std::chrono::seconds(60));
  expect_all_ok(results);
  EXPECT_EQ(read_numbers(dir / "weights.0"), read_numbers(dir / "weights.1"));  // the ranks never diverged
}

// ModelCheckpoint's train_time_interval on two ranks whose clocks disagree: rank 1's passes the interval at step
// 3, rank 0's never does; both save there together (rank 0 writes the file), so no rank waits at a barrier the
// other never reaches.
TEST(TrainerDDP, TrainTimeIntervalSavesOnEveryRankWhenOneRanksClockSaysSo) {
  TempDir dir;
  const uint16_t port = distributed::find_free_port();
  const auto results = run_ranks(2, [&](int rank) {
    set_rank_env(rank, 2, port);
    Regressor m;
    auto train4 = loader(regression_data(32), 4);  // 4 steps an epoch on each rank
    trainer::TrainerOptions d = ddp_options(dir.str());
    d.enable_checkpointing = true;
    const trainer::Trainer* running = nullptr;
    d.callbacks = {std::make_shared<trainer::ModelCheckpoint>(trainer::ModelCheckpointOptions{
        .dirpath = dir.str() + "/ck", .save_top_k = -1, .train_time_interval = 100,
        .clock = [&] { return rank == 1 && running->global_step() == 3 ? 1000.0 : 0.0; }})};
    trainer::Trainer tr(d);
    running = &tr;
    tr.fit(m, *train4);
  }, std::chrono::seconds(60));
  expect_all_ok(results);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir.str() + "/ck")) files.push_back(e.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"epoch=0-step=3.ckpt"});
}

// ThroughputMonitor on two ranks: each counts its own half of the data, and the job-wide rates are its device
// rates times the world size.
TEST(TrainerDDP, ThroughputMonitorCountsEachRanksShareAndScalesTheJobsRates) {
  TempDir dir;
  const uint16_t port = distributed::find_free_port();
  const auto results = run_ranks(2, [&](int rank) {
    set_rank_env(rank, 2, port);
    Regressor m;
    auto train4 = loader(regression_data(32), 4);
    trainer::TrainerOptions d = ddp_options(dir.str());
    d.max_epochs = 2;
    auto monitor = std::make_shared<trainer::ThroughputMonitor>(trainer::ThroughputMonitorOptions{.window_size = 3});
    d.callbacks = {monitor};
    trainer::Trainer(d).fit(m, *train4);
    const auto& r = monitor->last_metrics();
    rank_check(r.at("train/batches") == 8 && r.at("train/samples") == 32,
               "rank " + std::to_string(rank) + " counted " + std::to_string(r.at("train/batches")) + " batches, " +
                   std::to_string(r.at("train/samples")) + " samples; expected 8 and 32 (its half of two epochs)");
    for (const char* rate : {"batches_per_sec", "samples_per_sec"}) {
      const double device = r.at(std::string("train/device/") + rate), job = r.at(std::string("train/") + rate);
      rank_check(device > 0 && job == 2 * device, std::string(rate) + ": job " + std::to_string(job) + ", device " +
                 std::to_string(device));
    }
  }, std::chrono::seconds(60));
  expect_all_ok(results);
}

// Throws "crash" after its at-th training batch (never when at < 0).
struct DdpCrashAt : trainer::Callback {
  int64_t at = -1, seen = 0;
  explicit DdpCrashAt(int64_t batch) : at(batch) {}
  std::string state_key() const override { return "CrashAt"; }
  void on_train_batch_end(trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&,
                          int64_t) override {
    if (++seen == at) throw std::runtime_error("crash");
  }
};

// One rank of a resumable run (ResumeNet, a checkpoint every step into <root>/last.ckpt) with the options
// `configure` sets, crashing after batch crash_at; a training rank that finishes writes its weights to
// "<out>.<rank>". A rank that crashed, or failed because another crashed, returns quietly.
void resumable_rank(const ResumeRun& run, const std::string& root, int64_t crash_at, bool resume,
                    const std::string& out, const std::function<void(trainer::TrainerOptions&)>& configure) {
  manual_seed(42);
  ResumeNet m;
  auto train = resume_train_loader(run);
  auto val = resume_val_loader();
  trainer::TrainerOptions o = resume_options(root, run);
  o.process_group_timeout = 30;
  configure(o);
  o.callbacks = {std::make_shared<SaveEveryStep>(root + "/last.ckpt"), std::make_shared<DdpCrashAt>(crash_at)};
  trainer::Trainer t(o);
  try {
    t.fit(m, *train, val.get(), resume ? root + "/last.ckpt" : "");
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("crash") == std::string::npos) throw;
    return;
  }
  if (!t.strategy().is_server()) write_numbers(out + "." + std::to_string(t.global_rank()), flat(weights_of(m)));
}

// A two-rank run that crashes (on both ranks, at the same batch) and resumes from rank 0's last checkpoint
// ends with the weights of a two-rank run never stopped, bit for bit.
TEST(TrainerDDP, ResumeAfterACrashGivesTheSameWeightsBitForBit) {
  TempDir dir;
  const ResumeRun run{.epochs = 2, .workers = 0};
  auto fit = [&](const std::string& root, int64_t crash_at, bool resume, const std::string& out) {
    const uint16_t port = distributed::find_free_port();
    return run_ranks(2, [&](int rank) {
      set_rank_env(rank, 2, port);
      resumable_rank(run, root, crash_at, resume, out, [](trainer::TrainerOptions& o) { o.strategy = "ddp"; });
    }, std::chrono::seconds(60));
  };
  expect_all_ok(fit(dir / "straight", -1, false, dir / "want"));
  expect_all_ok(fit(dir / "stopped", 9, false, dir / "never"));  // 2 ranks x 6 batches an epoch: mid-epoch 1
  ASSERT_TRUE(std::filesystem::exists(dir / "stopped/last.ckpt"));
  expect_all_ok(fit(dir / "stopped", -1, true, dir / "got"));
  for (int rank : {0, 1}) {
    const auto want = read_numbers(dir / ("want." + std::to_string(rank)));
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(read_numbers(dir / ("got." + std::to_string(rank))), want) << "rank " << rank;
  }
}

// A regressor with a batch norm between its layers: what sync_batchnorm changes.
struct BnRegressor : trainer::TrainModule {
  nn::Linear fc1{4, 6};
  nn::BatchNorm1d bn{6};
  nn::Linear fc2{6, 1};
  BnRegressor() : TrainModule("BnRegressor") {
    register_module("fc1", fc1);
    register_module("bn", bn);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(bn(fc1(x)))); }
  Tensor training_step(const data::Batch& b, int64_t) override {
    Tensor loss = nn::F::mse_loss(forward(b[0]), b[1]);
    log("train/loss", loss);
    return loss;
  }
  Tensor validation_step(const data::Batch& b, int64_t) override {
    log("val/loss", nn::F::mse_loss(forward(b[0]), b[1]));
    return {};
  }
  trainer::OptimizerSetup configure_optimizers() override {
    return std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.05});
  }
};

// Every float32 parameter and buffer (the running statistics), flattened in state_dict order.
std::vector<double> state_numbers(const nn::Module& m) {
  std::vector<double> out;
  for (const auto& [name, t] : m.state_dict())
    if (t.dtype() == kFloat32)
      for (double v : t.to_vector<double>()) out.push_back(v);
  return out;
}

// With sync_batchnorm, two ranks with batches of 4 train (weights and running statistics) and validate what
// one process does with batches of 8; without it each rank's batch norm sees only its 4 examples, and the
// running statistics come out different (so the comparison can fail).
TEST(TrainerDDP, SyncBatchnormTrainsWhatOneProcessTrainsOnTheWholeBatch) {
  TempDir dir;
  manual_seed(3);
  BnRegressor single;
  auto train8 = loader(regression_data(32), 8);
  auto val8 = loader(regression_data(16, 9), 8);
  trainer::TrainerOptions o = quiet(dir / "single");
  o.max_epochs = 2;
  trainer::Trainer t(o);
  t.fit(single, *train8, val8.get());
  const std::vector<double> want = state_numbers(single);
  const double want_val = t.callback_metrics().at("val/loss");

  for (bool sync : {true, false}) {
    const std::string out = dir / (sync ? "sync" : "local");
    const uint16_t port = distributed::find_free_port();
    const auto results = run_ranks(2, [&](int rank) {
      set_rank_env(rank, 2, port);
      manual_seed(3);
      BnRegressor m;
      auto train4 = loader(regression_data(32), 4);
      auto val4 = loader(regression_data(16, 9), 4);
      trainer::TrainerOptions d = ddp_options(out);
      d.sync_batchnorm = sync;
      trainer::Trainer tr(d);
      tr.fit(m, *train4, val4.get());
      rank_check(!m.bn->is_synchronized(), "the batch norm is still synchronized after fit");
      std::filesystem::create_directories(out);
      write_numbers(out + "/state." + std::to_string(rank), state_numbers(m));
      write_numbers(out + "/val." + std::to_string(rank), {tr.callback_metrics().at("val/loss")});
    }, std::chrono::seconds(60));
    expect_all_ok(results);
    for (int rank : {0, 1}) {
      const auto got = read_numbers(out + "/state." + std::to_string(rank));
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
      const double val = read_numbers(out + "/val." + std::to_string(rank)).at(0);
      if (sync) {
        EXPECT_LT(worst, 1e-5) << "rank " << rank;
        EXPECT_NEAR(val, want_val, 1e-5 * (1 + want_val)) << "rank " << rank;
      } else {
        EXPECT_GT(worst, 1e-3) << "rank " << rank << ": local batch norms matched the whole batch's";
      }
    }
  }
}

TEST(TrainerDDP, SyncBatchnormNeedsStrategyDdp) {
  TempDir dir;
  trainer::TrainerOptions o = quiet(dir.str());
  o.strategy = "parameter_server";
  o.sync_batchnorm = true;
  try {
    trainer::Trainer t(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sync_batchnorm needs strategy 'ddp'"), std::string::npos) << e.what();
  }
}

// ---- parameter_server ----

trainer::TrainerOptions ps_options(const std::string& root, int servers, const std::string& placement) {
  trainer::TrainerOptions o = ddp_options(root);
  o.strategy = "parameter_server";
  o.ps.servers = servers;
  o.ps.optimizer = placement;
  return o;
}

// S servers and 2 workers with batches of 4 train what one process trains with batches of 8, as DDP does.
TEST(TrainerPS, SyncWorkersTrainWhatOneProcessTrainsOnTheWholeBatch) {
  TempDir dir;
  const SingleRun want = train_single(dir / "single");

  for (const auto& [servers, placement] : std::vector<std::pair<int, std::string>>{{1, "server"}, {2, "server"},
                                                                                   {2, "worker"}}) {
    const std::string out = dir / ("ps_" + std::to_string(servers) + placement);
    const uint16_t port = distributed::find_free_port();
    const auto results = run_ranks(servers + 2, [&](int rank) {
      set_rank_env(rank, servers + 2, port);
      manual_seed(rank == servers ? 3 : 99);  // worker 0 has the single process's weights; the servers take them
      Regressor m;
      auto train4 = loader(regression_data(32), 4);
      auto val4 = loader(regression_data(16, 9), 4);
      trainer::TrainerOptions d = ps_options(out, servers, placement);
      d.logger = true;  // worker 0 only
      trainer::Trainer tr(d);
      tr.fit(m, *train4, val4.get());
      if (tr.strategy().is_server()) return;
      rank_check(tr.global_step() == 8, "worker " + std::to_string(tr.global_rank()) + ": " +
                                            std::to_string(tr.global_step()) + " steps, expected 8");
      write_numbers(out + "/weights." + std::to_string(tr.global_rank()), flat(weights_of(m)));
      write_numbers(out + "/val." + std::to_string(tr.global_rank()), {tr.callback_metrics().at("val/loss")});
    }, std::chrono::seconds(60));
    expect_all_ok(results);
    expect_matches_single(out, want, out);
    EXPECT_TRUE(std::filesystem::exists(out + "/kiln/version_0/metrics.csv"));
    EXPECT_FALSE(std::filesystem::exists(out + "/kiln/version_1"));
  }
}

// Async workers do not meet every batch, but they do meet at a mid-epoch validation: a stop on one worker
// ends every worker's epoch right after the next one. Worker 1 asks to stop after batch 3 of epoch 1; worker 0,
// slowed down there, never asks; both validate after batch 4 and leave the epoch there (of 8 batches), and no
// worker starts another epoch.
TEST(TrainerPS, AStopOnOneAsyncWorkerEndsEveryWorkersEpochAtTheNextValidation) {
  TempDir dir;
  const uint16_t port = distributed::find_free_port();
  struct StopOrSlow : trainer::Callback {
    void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                            int64_t idx) override {
      if (t.current_epoch() != 1) return;
      if (t.global_rank() == 1 && idx == 2) t.set_should_stop(true);
      if (t.global_rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  const auto results = run_ranks(3, [&](int rank) {
    set_rank_env(rank, 3, port);
    Regressor m;
    auto train4 = loader(regression_data(64), 4);  // 8 batches an epoch per worker
    auto val4 = loader(regression_data(16, 9), 4);
    trainer::TrainerOptions d = ps_options(dir.str(), 1, "server");
    d.ps.mode = "async";
    d.max_epochs = 5;
    d.val_check_interval = 4;  // batches
    d.callbacks = {std::make_shared<StopOrSlow>()};
    trainer::Trainer tr(d);
    tr.fit(m, *train4, val4.get());
    if (tr.strategy().is_server()) return;
    const std::string who = "worker " + std::to_string(tr.global_rank());
    rank_check(tr.current_epoch() == 2 && tr.global_step() == 8 + 4,
               who + " ended at epoch " + std::to_string(tr.current_epoch()) + " after " +
                   std::to_string(tr.global_step()) + " steps (expected epoch 2 after 12)");
  }, std::chrono::seconds(60));
  expect_all_ok(results);
}

// Workers that crash mid-epoch (the servers fail too, naming the crash) and a new job resumed from worker 0's
// last checkpoint, which carries both servers' shards and Adam's state on them (or, with the optimizer on the
// workers, the workers' own): the weights of a job never stopped, bit for bit.
void resume_after_crash_on_a_parameter_server(const std::string& placement) {
  TempDir dir;
  const ResumeRun run{.epochs = 2, .workers = 0};
  constexpr int kServers = 2, kWorld = 4;
  auto fit = [&](const std::string& root, int64_t crash_at, bool resume, const std::string& out) {
    const uint16_t port = distributed::find_free_port();
    return run_ranks(kWorld, [&](int rank) {
      set_rank_env(rank, kWorld, port);
      resumable_rank(run, root, crash_at, resume, out, [&](trainer::TrainerOptions& o) {
        o.strategy = "parameter_server";
        o.ps.servers = kServers;
        o.ps.optimizer = placement;
      });
    }, std::chrono::seconds(90));
  };
  expect_all_ok(fit(dir / "straight", -1, false, dir / "want"));
  expect_all_ok(fit(dir / "stopped", 9, false, dir / "never"));
  ASSERT_TRUE(std::filesystem::exists(dir / "stopped/last.ckpt"));
  const trainer::Checkpoint ckpt = trainer::load_checkpoint(dir / "stopped/last.ckpt");
  if (placement == "server") {
    EXPECT_EQ(ckpt.get_int("ps.num_servers"), kServers);
    EXPECT_TRUE(ckpt.tensors.count("ps.shard.1.values"));
  } else {
    EXPECT_FALSE(ckpt.has("ps.num_servers"));
  }
  expect_all_ok(fit(dir / "stopped", -1, true, dir / "got"));
  for (int worker : {0, 1}) {
    const auto want = read_numbers(dir / ("want." + std::to_string(worker)));
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(read_numbers(dir / ("got." + std::to_string(worker))), want) << placement << ", worker " << worker;
  }
}

TEST(TrainerPS, ResumeAfterACrashGivesTheSameWeightsBitForBit) {
  for (const std::string placement : {"server", "worker"}) {
    SCOPED_TRACE("optimizer on the " + placement + "s");
    resume_after_crash_on_a_parameter_server(placement);
  }
}

// ---- a DataModule's prepare_data under ddp and parameter_server ----

// prepare_data notes which rank ran it, takes a while, then writes the file setup reads, under the directory of
// the rank's "node" (KILN_TEST_NODE, set by the tests to stand for separate machines); with `per_node` false
// the file is the job's. A setup that ran before its preparer was done, or a second preparer, shows.
struct SlowPreparedData : trainer::DataModule {
  std::string root;
  std::string fail;  // prepare_data throws this, when set
  int fail_setup_on = -1;  // the rank whose setup throws
  int fail_rebuild_on = -1;  // the rank whose second train_dataloader() throws
  int built = 0;
  explicit SlowPreparedData(std::string r, bool per_node = true) : root(std::move(r)) {
    batch_size = 4;
    prepare_data_per_node = per_node;
  }
  std::string place() const {
    const char* node = std::getenv("KILN_TEST_NODE");
    return root + "/" + (prepare_data_per_node ? std::string("node") + (node != nullptr ? node : "0") : "job");
  }
  void prepare_data() override {
    std::filesystem::create_directories(place());
    std::ofstream(root + "/preparers", std::ios::app) << std::getenv("RANK") << "\n" << std::flush;
    if (!fail.empty()) throw std::runtime_error(fail);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    std::ofstream(place() + "/prepared") << "ok\n";
  }
  void setup(trainer::Stage) override {
    rank_check(std::filesystem::exists(place() + "/prepared"),
               std::string("rank ") + std::getenv("RANK") + "'s setup ran before " + place() + " was prepared");
    if (std::atoi(std::getenv("RANK")) == fail_setup_on) throw std::runtime_error("setup: no such split");
  }
  std::unique_ptr<data::DataLoader> train_dataloader() override {
    if (++built == 2 && std::atoi(std::getenv("RANK")) == fail_rebuild_on) throw std::runtime_error("the shard moved");
    return loader(keep(regression_data(32)), batch_size);
  }
  std::unique_ptr<data::DataLoader> test_dataloader() override {
    return loader(keep(regression_data(16, 9)), batch_size);
  }
  // By teardown the Trainer holds none of the datasets: neither the loaders it was given nor its rank's shards
  // of them (which would keep a dataset a teardown means to free).
  std::vector<std::weak_ptr<data::Dataset>> datasets;
  std::shared_ptr<data::Dataset> keep(std::shared_ptr<data::Dataset> d) {
    datasets.push_back(d);
    return d;
  }
  void teardown(trainer::Stage stage) override {
    for (const auto& d : datasets)
      rank_check(d.expired(), std::string("rank ") + std::getenv("RANK") + ": a dataset outlived its loaders at " +
                                  "teardown(" + trainer::stage_name(stage) + ")");
  }
};

// Rank `rank` of 4 on two "nodes" of two: local ranks 0, 1, 0, 1, and KILN_TEST_NODE for SlowPreparedData.
void set_two_node_env(int rank, uint16_t port) {
  set_rank_env(rank, 4, port);
  ::setenv("LOCAL_RANK", std::to_string(rank % 2).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("KILN_TEST_NODE", std::to_string(rank / 2).c_str(), 1);
}

std::vector<int> preparers(const std::string& root) {
  std::vector<int> ranks;
  for (double r : read_numbers(root + "/preparers")) ranks.push_back(static_cast<int>(r));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// Four ranks on two "nodes" of two (local ranks 0, 1, 0, 1): the first local rank of each prepares, once per
// run (fit, then test), and every rank sets up after its node's data is there; with prepare_data_per_node
// false, rank 0 alone prepares the job's, once per run.
TEST(TrainerDDP, PrepareDataRunsOncePerNodeWhileTheOtherRanksWait) {
  for (bool per_node : {true, false}) {
    TempDir dir;
    const uint16_t port = distributed::find_free_port();
    const auto results = run_ranks(4, [&](int rank) {
      set_two_node_env(rank, port);
      Regressor m;
      SlowPreparedData data(dir.str(), per_node);
      trainer::TrainerOptions o = ddp_options(dir.str());
      o.max_epochs = 1;
      trainer::Trainer tr(o);
      tr.fit(m, data);
      rank_check(tr.global_step() == 2, "rank " + std::to_string(rank) + ": " + std::to_string(tr.global_step()) +
                                            " steps, expected 2 (a shard of 8 examples in batches of 4)");
      tr.test(m, data);
    }, std::chrono::seconds(60));
    expect_all_ok(results);
    EXPECT_EQ(preparers(dir.str()), per_node ? (std::vector<int>{0, 0, 2, 2}) : (std::vector<int>{0, 0}))
        << (per_node ? "per node" : "once for the job");
  }
}

// Two ranks fit a DataModule that `spoil` breaks: each rank's fit must throw an error containing want(rank)
// in under 10 s (the timeout is 30), after `steps` steps.
void expect_both_ranks_fail_promptly(const std::function<void(SlowPreparedData&)>& spoil,
                                     const std::function<std::string(int)>& want, const std::string& root,
                                     int64_t reload_every = 0, int64_t steps = 0) {
  const uint16_t port = distributed::find_free_port();
  const auto results = run_ranks(2, [&](int rank) {
    set_rank_env(rank, 2, port);
    Regressor m;
    SlowPreparedData data(root);
    spoil(data);
    trainer::TrainerOptions o = ddp_options(root);
    o.reload_dataloaders_every_n_epochs = reload_every;
    trainer::Trainer tr(o);
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      tr.fit(m, data);
    } catch (const std::exception& e) {
      message = e.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string me = "rank " + std::to_string(rank);
    rank_check(message.find(want(rank)) != std::string::npos,
               me + ": expected an error with '" + want(rank) + "', got '" + message + "'");
    rank_check(seconds < 10, me + " failed after " + std::to_string(seconds) + " s");
    rank_check(tr.global_step() == steps, me + " made " + std::to_string(tr.global_step()) + " steps, expected " +
                                              std::to_string(steps));
  }, std::chrono::seconds(60));
  expect_all_ok(results);
}

// prepare_data fails on rank 0: rank 0's fit throws its own error, rank 1's an error naming rank 0.
TEST(TrainerDDP, APrepareDataThatFailsFailsEveryRankPromptly) {
  TempDir dir;
  expect_both_ranks_fail_promptly([](SlowPreparedData& d) { d.fail = "the mirror is down"; },
                                  [](int rank) -> std::string {
                                    return rank == 0 ? "the mirror is down" : "prepare_data() failed on rank 0";
                                  },
                                  dir.str());
  EXPECT_EQ(preparers(dir.str()), std::vector<int>{0});
}

// setup fails on rank 1 alone: rank 1's fit throws its own error, rank 0's one naming rank 1 (rank 0 would
// otherwise go on to DDP's first broadcast while rank 1 leaves for its final barrier).
TEST(TrainerDDP, ASetupThatFailsOnOneRankFailsEveryRankPromptly) {
  TempDir dir;
  expect_both_ranks_fail_promptly([](SlowPreparedData& d) { d.fail_setup_on = 1; },
                                  [](int rank) -> std::string {
                                    return rank == 1 ? "setup: no such split"
                                                     : "the DataModule's setup(fit) or its loaders failed on rank 1";
                                  },
                                  dir.str());
}

// The loaders are rebuilt every epoch (reload_dataloaders_every_n_epochs), and rank 1's rebuild for epoch 1
// fails: both ranks fail there, rank 0 naming rank 1, after epoch 0's 4 steps (rank 0 would otherwise go on
// to epoch 1's all-reduces while rank 1 leaves for its final barrier).
TEST(TrainerDDP, ARebuildThatFailsOnOneRankFailsEveryRankPromptly) {
  TempDir dir;
  expect_both_ranks_fail_promptly([](SlowPreparedData& d) { d.fail_rebuild_on = 1; },
                                  [](int rank) -> std::string {
                                    return rank == 1 ? "the shard moved"
                                                     : "rebuilding the DataModule's loaders "
                                                       "(reload_dataloaders_every_n_epochs) failed on rank 1";
                                  },
                                  dir.str(), /*reload_every=*/1, /*steps=*/4);
}

// Under parameter_server, one server and three workers on two "nodes" (ranks 0, 1 | 2, 3): each node's first
// worker (ranks 1 and 2) prepares, for fit and then, for the workers alone, for test (servers serve fit only).
// Then rank 2's prepare_data fails: the workers of its node fail naming it, and so do the processes of the
// other node, which did not wait for it, through the job's failure in the store, well before the 30 s timeout.
TEST(TrainerPS, PrepareDataRunsOnEachNodesFirstWorker) {
  for (bool fail : {false, true}) {
    TempDir dir;
    const uint16_t port = distributed::find_free_port();
    const auto results = run_ranks(4, [&](int rank) {
      set_two_node_env(rank, port);
      Regressor m;
      SlowPreparedData data(dir.str());
      if (fail && rank == 2) data.fail = "the mirror is down";
      trainer::TrainerOptions o = ps_options(dir.str(), 1, "server");
      o.max_epochs = 1;
      trainer::Trainer tr(o);
      const auto start = std::chrono::steady_clock::now();
      std::string message;
      try {
        tr.fit(m, data);
        if (!tr.strategy().is_server()) tr.test(m, data);
      } catch (const std::exception& e) {
        message = e.what();
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string me = "rank " + std::to_string(rank);
      if (!fail) {
        rank_check(message.empty(), me + ": " + message);
        rank_check(tr.strategy().is_server() || tr.global_step() == 3,
                   me + ": " + std::to_string(tr.global_step()) + " steps, expected 3 (32 examples over 3 workers)");
        return;
      }
      // Rank 3 waited for rank 2; ranks 0 and 1 fail in fit, on the job's failure.
      for (const std::string want : rank == 2 ? std::vector<std::string>{"the mirror is down"}
                                              : std::vector<std::string>{"prepare_data() failed", "worker 1 of 3 (rank 2)",
                                                                         "the mirror is down"}) {
        rank_check(message.find(want) != std::string::npos,
                   me + ": expected an error with '" + want + "', got '" + message + "'");
      }
      rank_check(seconds < 10, me + " failed after " + std::to_string(seconds) + " s");
    }, std::chrono::seconds(60));
    expect_all_ok(results);
    EXPECT_EQ(preparers(dir.str()), fail ? (std::vector<int>{1, 2}) : (std::vector<int>{1, 1, 2, 2}))
        << (fail ? "failing" : "");
  }
}

}  // namespace
}  // namespace kiln::test
