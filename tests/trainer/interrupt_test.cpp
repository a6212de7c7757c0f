// TrainerOptions::handle_signals and OnExceptionCheckpoint: a SIGINT or SIGTERM during fit() stops training at
// the next optimizer-step boundary (an open accumulation window runs to its step first), throws Interrupted
// after the on_exception hooks, and the checkpoint OnExceptionCheckpoint writes there resumes to the weights of
// a run never stopped, bit for bit, on one process and on two ddp ranks (the signal reaching one rank stops
// both at the same batch). A second signal ends the process; the handlers found before fit() come back after.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <thread>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "kiln/trainer/callbacks.h"
#include "trainer/resume_net.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace interrupt_tests {  // named: this target is built as one unit, beside files with helpers of their own

// Raises `signal` in this process at the end of its `at`-th training batch (counting from 1), as Ctrl-C would.
struct RaiseAt : trainer::Callback {
  int64_t at, seen = 0;
  int signal;
  RaiseAt(int64_t a, int s) : at(a), signal(s) {}
  std::string state_key() const override { return "RaiseAt"; }
  void on_train_batch_end(trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&,
                          int64_t) override {
    if (++seen == at) std::raise(signal);
  }
};

void (*current_handler(int signal))(int) {
  struct sigaction now {};
  sigaction(signal, nullptr, &now);
  return now.sa_handler;
}

extern "C" void ignore_signal(int) {}

TEST(Interrupt, ScopesInstallOnceAndRestoreWhatWasThere) {
  struct sigaction mine {}, before {};
  mine.sa_handler = ignore_signal;
  sigemptyset(&mine.sa_mask);
  sigaction(SIGTERM, &mine, &before);
  {
    trainer::InterruptScope outer;
    auto* installed = current_handler(SIGTERM);
    EXPECT_NE(installed, ignore_signal);
    EXPECT_EQ(current_handler(SIGINT), installed);
    {
      trainer::InterruptScope inner;
      EXPECT_EQ(current_handler(SIGTERM), installed);
    }
    EXPECT_EQ(current_handler(SIGTERM), installed) << "an inner scope's end must not restore the handlers";
    std::raise(SIGTERM);
    EXPECT_EQ(trainer::pending_interrupt(), SIGTERM);
  }
  EXPECT_EQ(current_handler(SIGTERM), ignore_signal);
  {
    trainer::InterruptScope again;
    EXPECT_EQ(trainer::pending_interrupt(), 0) << "a new scope starts without the old signal";
  }
  sigaction(SIGTERM, &before, nullptr);
}

// In a child process each: a second signal ends the process, but the same one again within a second is the
// same event seen twice; a signal the process ignored stays ignored; one nobody stopped for is raised again
// when the scope ends.
TEST(Interrupt, SecondRepeatedIgnoredAndUnconsumedSignals) {
  auto expect_killed_by = [](const std::vector<RankResult>& r, int signal, const std::string& what) {
    ASSERT_EQ(r.size(), 1u);
    EXPECT_FALSE(r[0].exited) << what << ": " << r[0].describe();
    EXPECT_EQ(r[0].status, signal) << what << ": " << r[0].describe();
  };
  expect_killed_by(run_ranks(1, [](int) {
    trainer::InterruptScope scope;
    std::raise(SIGINT);
    if (trainer::pending_interrupt() != SIGINT) throw std::runtime_error("the first SIGINT was not caught");
    std::raise(SIGINT);  // the same event twice
    if (trainer::pending_interrupt() != SIGINT) throw std::runtime_error("the repeat changed the flag");
    std::raise(SIGTERM);  // asked again
    throw std::runtime_error("still alive after SIGTERM");
  }, std::chrono::seconds(20)), SIGTERM, "a different second signal");
  expect_killed_by(run_ranks(1, [](int) {
    trainer::InterruptScope scope;
    std::raise(SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    std::raise(SIGINT);
    throw std::runtime_error("still alive after the second SIGINT");
  }, std::chrono::seconds(20)), SIGINT, "the same signal a second later");
  expect_killed_by(run_ranks(1, [](int) {
    { trainer::InterruptScope scope; std::raise(SIGTERM); }  // never consumed: raised again at the end
    throw std::runtime_error("still alive after the scope");
  }, std::chrono::seconds(20)), SIGTERM, "an unconsumed signal");
  expect_all_ok(run_ranks(1, [](int) {
    std::signal(SIGINT, SIG_IGN);
    trainer::InterruptScope scope;
    if (current_handler(SIGINT) != SIG_IGN) throw std::runtime_error("an ignored SIGINT got a handler");
    std::raise(SIGINT);
    if (trainer::pending_interrupt() != 0) throw std::runtime_error("an ignored SIGINT was caught");
  }, std::chrono::seconds(20)));
}

std::vector<std::vector<float>> straight_run(const std::string& root, const ResumeRun& run) {
  manual_seed(42);
  ResumeNet m;
  auto train = resume_train_loader(run);
  auto val = resume_val_loader();
  trainer::Trainer(resume_options(root, run)).fit(m, *train, val.get());
  return weights_of(m);
}

// 12 batches an epoch, accumulated two by two. A signal after batch 5 (the first of a window) stops after
// batch 6; after batch 12, the epoch's last, it stops once the epoch's end (validation, schedulers) is done;
// after batch 13 (the first of epoch 1's first window), after batch 14.
TEST(Interrupt, StopsAtAStepBoundaryAndItsCheckpointResumesBitForBit) {
  const ResumeRun run;
  TempDir ref_dir;
  const auto want = straight_run(ref_dir.str(), run);
  struct Case {
    int64_t raise_at;
    int signal;
    int64_t step, epoch, batch_in_epoch;  // where it stops
  };
  auto* const before = current_handler(SIGINT);
  // After batch 36, the run's last: caught at the end of its last epoch, not lost as fit() returns.
  for (const Case& c : {Case{5, SIGINT, 3, 0, 6}, Case{12, SIGTERM, 6, 1, 0}, Case{13, SIGINT, 7, 1, 2},
                        Case{36, SIGINT, 18, 3, 0}}) {
    const std::string what = "signal after batch " + std::to_string(c.raise_at);
    TempDir dir;
    manual_seed(42);
    ResumeNet m;
    auto train = resume_train_loader(run);
    auto val = resume_val_loader();
    trainer::TrainerOptions o = resume_options(dir.str(), run);
    o.handle_signals = true;
    auto saver = std::make_shared<trainer::OnExceptionCheckpoint>(
        trainer::OnExceptionCheckpointOptions{.dirpath = dir.str(), .filename = "stopped"});
    o.callbacks = {std::make_shared<RaiseAt>(c.raise_at, c.signal), saver};
    trainer::Trainer t(o);
    try {
      t.fit(m, *train, val.get());
      ADD_FAILURE() << what << ": fit() ran to its end";
      continue;
    } catch (const trainer::Interrupted& e) {
      EXPECT_EQ(e.signal(), c.signal) << what;
      EXPECT_NE(std::string(e.what()).find(trainer::signal_name(c.signal)), std::string::npos) << e.what();
    }
    EXPECT_EQ(current_handler(SIGINT), before) << what << ": the handlers must be restored after fit()";
    EXPECT_EQ(t.global_step(), c.step) << what;
    ASSERT_EQ(saver->saved_path(), dir / "stopped.ckpt") << what;
    const trainer::Checkpoint ckpt = trainer::load_checkpoint(saver->saved_path());
    EXPECT_EQ(ckpt.get_int("trainer.global_step"), c.step) << what;
    EXPECT_EQ(ckpt.get_int("trainer.epoch"), c.epoch) << what;
    EXPECT_EQ(ckpt.get_int("trainer.batch_in_epoch"), c.batch_in_epoch) << what;

    manual_seed(999);  // the checkpoint's generator state must win
    ResumeNet resumed;
    auto train2 = resume_train_loader(run);
    auto val2 = resume_val_loader();
    trainer::Trainer t2(resume_options(dir.str(), run));
    t2.fit(resumed, *train2, val2.get(), saver->saved_path());
    EXPECT_EQ(t2.global_step(), 18) << what;
    EXPECT_EQ(weights_of(resumed), want) << what;
  }
}

// Without handle_signals no handler is installed: the signal keeps its default action.
TEST(Interrupt, OffByDefault) {
  struct SeeHandler : trainer::Callback {
    void (*seen)(int) = nullptr;
    void on_train_start(trainer::Trainer&, trainer::TrainModule&) override { seen = current_handler(SIGINT); }
  };
  auto* const before = current_handler(SIGINT);
  TempDir dir;
  auto see = std::make_shared<SeeHandler>();
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 1;
  o.callbacks = {see};
  Regressor m;
  auto train = loader(regression_data(16), 8);
  trainer::Trainer(o).fit(m, *train);
  EXPECT_EQ(see->seen, before);
}

// After another error, OnExceptionCheckpoint saves the state as the error left it (here after two steps).
TEST(Interrupt, OnExceptionCheckpointAlsoSavesAfterAnError) {
  struct FailAt : trainer::Callback {
    void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                            int64_t batch_idx) override {
      if (batch_idx == 1) throw std::runtime_error("bad batch");
    }
  };
  TempDir dir;
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 1;
  auto saver = std::make_shared<trainer::OnExceptionCheckpoint>(trainer::OnExceptionCheckpointOptions{.dirpath = dir.str()});
  o.callbacks = {std::make_shared<FailAt>(), saver};
  Regressor m;
  auto train = loader(regression_data(32), 8);
  EXPECT_THROW(trainer::Trainer(o).fit(m, *train), std::runtime_error);
  ASSERT_EQ(saver->saved_path(), dir / "on_exception.ckpt");
  EXPECT_EQ(trainer::load_checkpoint(saver->saved_path()).get_int("trainer.global_step"), 2);
  expect_error([] { trainer::OnExceptionCheckpoint({.filename = "a/b"}); }, {"OnExceptionCheckpoint", "a/b"});
}

// Two ddp ranks; the signal reaches rank 1 alone (after its batch 9, the first of a window in epoch 1: 6 batches
// an epoch per rank). Both stop after batch 10, rank 0 writes the checkpoint, and two ranks resumed from it end
// with the weights of two ranks never stopped.
TEST(Interrupt, OneRanksSignalStopsEveryRankAtTheSameStep) {
  TempDir dir;
  const ResumeRun run{.epochs = 2, .workers = 0};
  auto fit = [&](const std::string& root, int64_t raise_at, const std::string& resume_from, const std::string& out) {
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
      o.handle_signals = true;
      o.callbacks = {std::make_shared<trainer::OnExceptionCheckpoint>(
          trainer::OnExceptionCheckpointOptions{.dirpath = root})};
      if (rank == 1) o.callbacks.push_back(std::make_shared<RaiseAt>(raise_at, SIGINT));
      trainer::Trainer t(o);
      try {
        t.fit(m, *train, val.get(), resume_from);
      } catch (const trainer::Interrupted&) {
        std::ofstream(out + ".step." + std::to_string(rank)) << t.global_step();
        return;
      }
      write_numbers(out + "." + std::to_string(rank), flat(weights_of(m)));
    }, std::chrono::seconds(60));
  };
  expect_all_ok(fit(dir / "straight", -1, "", dir / "want"));
  expect_all_ok(fit(dir / "stopped", 9, "", dir / "stop"));
  for (int rank : {0, 1}) {
    std::ifstream f(dir / ("stop.step." + std::to_string(rank)));
    int64_t step = -1;
    f >> step;
    EXPECT_EQ(step, 5) << "rank " << rank << " (5 steps: an epoch of 3, then batches 7-10)";
  }
  ASSERT_TRUE(std::filesystem::exists(dir / "stopped/on_exception.ckpt"));
  expect_all_ok(fit(dir / "resumed", -1, dir / "stopped/on_exception.ckpt", dir / "got"));
  for (int rank : {0, 1}) {
    const auto want = read_numbers(dir / ("want." + std::to_string(rank)));
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(read_numbers(dir / ("got." + std::to_string(rank))), want) << "rank " << rank;
  }
}

}  // namespace interrupt_tests
}  // namespace kiln::test
