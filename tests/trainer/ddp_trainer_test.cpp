// The Trainer under strategy "ddp": ranks as forked processes (tests/distributed/multiprocess.h) with the
// variables `kiln launch` sets. Two ranks with batches of 4 each must train exactly what one process trains
// with batches of 8 (the DistributedSampler deals examples 0, 2, 4, ... to rank 0 and 1, 3, 5, ... to rank 1,
// so each global batch holds the same 8 examples), report the same epoch metrics, and leave one set of logs
// and checkpoints, written by rank 0.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "trainer/resume_net.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {


void set_rank_env(int rank, int world, uint16_t port) {
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
}

trainer::TrainerOptions ddp_options(const std::string& root) {
  trainer::TrainerOptions o = quiet(root);
  o.max_epochs = 2;
  o.strategy = "ddp";
  o.process_group_timeout = 30;
  return o;
}

// Writes one number per line.
void write_numbers(const std::string& path, const std::vector<double>& v) {
  std::ofstream out(path);
  out.precision(17);
  for (double x : v) out << x << "\n";
}
std::vector<double> read_numbers(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

std::vector<double> flat(const std::vector<std::vector<float>>& w) {
  std::vector<double> out;
  for (const auto& p : w) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TrainerDDP, TwoRanksTrainWhatOneProcessTrainsOnTheWholeBatch) {
  TempDir dir;
  // One process, batches of 8.
  manual_seed(3);
  Regressor single;
  auto train8 = loader(regression_data(32), 8);
  auto val8 = loader(regression_data(16, 9), 8);
  trainer::TrainerOptions o = quiet(dir / "single");
  o.max_epochs = 2;
  trainer::Trainer t(o);
  t.fit(single, *train8, val8.get());
  const std::vector<double> want = flat(weights_of(single));
  const double want_val = t.callback_metrics().at("val/loss");

  // Two ranks, batches of 4 each; rank 1 starts from other weights (DDP copies rank 0's).
  const uint16_t port = distributed::find_free_port();
  const std::string out = dir / "ddp";
  const auto results = run_ranks(2, [&](int rank) {
    set_rank_env(rank, 2, port);
    manual_seed(rank == 0 ? 3 : 99);
    Regressor m;
    auto train4 = loader(regression_data(32), 4);
    auto val4 = loader(regression_data(16, 9), 4);
    trainer::TrainerOptions d = ddp_options(out);
    d.logger = true;  // rank 0 only
    trainer::Trainer tr(d);
    tr.fit(m, *train4, val4.get());
    rank_check(tr.global_step() == 8, "rank " + std::to_string(rank) + ": " + std::to_string(tr.global_step()) +
                                          " steps, expected 8 (2 epochs of 4 global batches)");
    write_numbers(out + "/weights." + std::to_string(rank), flat(weights_of(m)));
    write_numbers(out + "/val." + std::to_string(rank), {tr.callback_metrics().at("val/loss")});
  }, std::chrono::seconds(60));
  expect_all_ok(results);

  for (int rank : {0, 1}) {
    const auto got = read_numbers(out + "/weights." + std::to_string(rank));
    ASSERT_EQ(got.size(), want.size()) << "rank " << rank;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "rank " << rank << " weight " << i;
    }
    // The epoch metric is the mean over every rank's examples: the single process's value.
    EXPECT_NEAR(read_numbers(out + "/val." + std::to_string(rank)).at(0), want_val, 1e-5 * (1 + want_val));
  }
  // Rank 0 wrote the logs and the checkpoints; no rank wrote a second set.
  EXPECT_TRUE(std::filesystem::exists(out + "/kiln/version_0/metrics.csv"));
  EXPECT_FALSE(std::filesystem::exists(out + "/kiln/version_1"));
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoints"));
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


// A two-rank run that crashes (on both ranks, at the same batch) and resumes from rank 0's last checkpoint
// ends with the weights of a two-rank run never stopped, bit for bit.
TEST(TrainerDDP, ResumeAfterACrashGivesTheSameWeightsBitForBit) {
  TempDir dir;
  const ResumeRun run{.epochs = 2, .workers = 0};
  auto fit = [&](const std::string& root, int64_t crash_at, bool resume, const std::string& out) {
    const uint16_t port = distributed::find_free_port();
    return run_ranks(2, [&](int rank) {
      set_rank_env(rank, 2, port);
      manual_seed(42);
      ResumeNet m;
      auto train = resume_train_loader(run);
      auto val = resume_val_loader();
      trainer::TrainerOptions o = resume_options(root, run);
      o.strategy = "ddp";
      o.process_group_timeout = 30;
      struct CrashAt : trainer::Callback {
        int64_t at, seen = 0;
        std::string state_key() const override { return "CrashAt"; }
        void on_train_batch_end(trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&,
                                int64_t) override {
          if (++seen == at) throw std::runtime_error("crash");
        }
      };
      auto crash = std::make_shared<CrashAt>();
      crash->at = crash_at;
      o.callbacks = {std::make_shared<SaveEveryStep>(root + "/last.ckpt"), crash};
      trainer::Trainer t(o);
      try {
        t.fit(m, *train, val.get(), resume ? root + "/last.ckpt" : "");
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) != "crash") throw;
        return;
      }
      write_numbers(out + "." + std::to_string(rank), flat(weights_of(m)));
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

}  // namespace
}  // namespace kiln::test
