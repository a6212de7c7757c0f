// The Trainer over loaders of unknown length (iterable datasets): an epoch ends where the stream does, with
// its validation and its last accumulation window; the result must be what the same examples give through an
// indexed dataset, bit for bit. A crash mid-epoch resumes exactly; under ddp, ranks whose streams differ in
// length end each epoch together.
#include <gtest/gtest.h>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "tensor/test_util.h"
#include "kiln/trainer/progress_bar.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

// The examples of a TensorDataset as a stream: part p of P gets examples p, p + P, ... in order.
struct Streamed : data::IterableDataset {
  std::shared_ptr<data::TensorDataset> source;
  explicit Streamed(std::shared_ptr<data::TensorDataset> s) : source(std::move(s)) {}
  data::ExampleStream stream(const data::StreamInfo& info) const override {
    auto next = std::make_shared<int64_t>(info.part());
    return [this, next, step = info.num_parts()]() -> std::optional<data::Example> {
      if (*next >= source->size()) return std::nullopt;
      data::Example e = source->get(*next);
      *next += step;
      return e;
    };
  }
};

std::unique_ptr<data::DataLoader> stream_loader(std::shared_ptr<data::TensorDataset> ds, int64_t batch) {
  return std::make_unique<data::DataLoader>(std::make_shared<Streamed>(std::move(ds)),
                                            data::DataLoaderOptions{.batch_size = batch});
}

TEST(IterableTrainer, AStreamTrainsWhatTheIndexedDatasetTrains) {
  TempDir dir;
  for (const int64_t accumulate : {1, 3}) {  // 4 batches: windows of 3 + 1, the last one stepped at the epoch's end
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 2;
    o.accumulate_grad_batches = accumulate;
    manual_seed(4);
    Regressor indexed;
    auto train = loader(regression_data(32), 8);
    auto val = loader(regression_data(12, 9), 8);
    trainer::Trainer ti(o);
    ti.fit(indexed, *train, val.get());

    manual_seed(4);
    Regressor streamed;
    auto train_s = stream_loader(regression_data(32), 8);
    auto val_s = stream_loader(regression_data(12, 9), 8);
    trainer::Trainer ts(o);
    ts.fit(streamed, *train_s, val_s.get());
    EXPECT_EQ(ts.num_training_batches(), -1);
    EXPECT_EQ(weights_of(streamed), weights_of(indexed)) << "accumulate " << accumulate;
    EXPECT_EQ(ts.global_step(), ti.global_step());
    EXPECT_EQ(streamed.val_steps, indexed.val_steps) << "a validation at each epoch's end (2 batches each)";
    EXPECT_EQ(ts.callback_metrics().at("val/loss"), ti.callback_metrics().at("val/loss"));
    EXPECT_EQ(ts.test(streamed, *val_s).at("test/loss"), ti.test(indexed, *val).at("test/loss"));
  }
}

TEST(IterableTrainer, LimitsAreCountsAndFractionsAreRefused) {
  TempDir dir;
  auto train = stream_loader(regression_data(32), 8);
  Regressor m;
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 3;
  o.limit_train_batches = 2;
  trainer::Trainer t(o);
  t.fit(m, *train);
  EXPECT_EQ(t.global_step(), 6);
  EXPECT_EQ(m.train_steps, 6);
  o.limit_train_batches = 0.5;
  expect_error([&] { trainer::Trainer(o).fit(m, *train); }, {"limit_train_batches = 0.5", "unknown", "number of batches"});
  EXPECT_FALSE(m.has_trainer()) << "a fit refused before it started leaves the module free";
  o.limit_train_batches = 1.0;
  o.val_check_interval = 0.25;
  auto val = stream_loader(regression_data(8, 9), 8);
  expect_error([&] { trainer::Trainer(o).fit(m, *train, val.get()); }, {"val_check_interval = 0.25", "unknown"});
  // A count works: validation after every 3 batches, and none again at the end of the epoch (batch 4 ends it).
  o.val_check_interval = 3;
  o.max_epochs = 1;
  Regressor counted;
  trainer::Trainer tc(o);
  tc.fit(counted, *train, val.get());
  EXPECT_EQ(counted.val_steps, 1 + 1) << "after batch 3, and at the stream's end";
}

TEST(IterableTrainer, TheProgressBarCountsWithoutATotal) {
  TempDir dir;
  auto train = stream_loader(regression_data(32), 8);
  for (const bool tty : {true, false}) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    Regressor m;
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 1;
    o.enable_progress_bar = true;
    o.callbacks = {std::make_shared<trainer::ProgressBar>(trainer::ProgressBarOptions{
        .out = out, .force_tty = tty, .refresh_seconds = 0, .print_every_n_batches = 2})};
    trainer::Trainer(o).fit(m, *train);
    std::rewind(out);
    std::string text;
    for (int c; (c = std::fgetc(out)) != EOF;) text += static_cast<char>(c);
    std::fclose(out);
    EXPECT_NE(text.find(tty ? " 4/? " : "[2/?]"), std::string::npos) << text;
    EXPECT_EQ(text.find("/-1"), std::string::npos) << text;
  }
}

TEST(IterableTrainer, ResumeMidEpochGivesTheSameWeightsBitForBit) {
  TempDir dir;
  auto options = [&] {
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 2;
    o.accumulate_grad_batches = 2;
    o.seed = 3;
    return o;
  };
  auto train = stream_loader(regression_data(48), 8);  // 6 batches, 3 steps per epoch
  manual_seed(1);
  Regressor whole;
  trainer::Trainer(options()).fit(whole, *train);

  struct CrashAfter : trainer::Callback {
    void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                            int64_t) override {
      if (t.global_step() == 5) throw std::runtime_error("crash");  // in the second epoch
    }
  };
  manual_seed(1);
  Regressor first;
  trainer::TrainerOptions o = options();
  o.callbacks = {std::make_shared<SaveEveryStep>(dir / "run.ckpt"), std::make_shared<CrashAfter>()};
  EXPECT_THROW(trainer::Trainer(o).fit(first, *train), std::runtime_error);

  manual_seed(2);
  Regressor resumed;
  auto fresh = stream_loader(regression_data(48), 8);
  trainer::Trainer tr(options());
  tr.fit(resumed, *fresh, nullptr, dir / "run.ckpt");
  EXPECT_EQ(tr.global_step(), 6);
  EXPECT_EQ(weights_of(resumed), weights_of(whole));
}

TEST(IterableTrainer, DDPRanksEndAnEpochTogetherAtTheShorterStream) {
  // 33 examples split by rank: rank 0 streams 17 (5 batches of 4, the last short), rank 1 16 (4 batches). Both
  // stop after 4: the 32 examples one process trains on in batches of 8 (2 epochs).
  TempDir dir;
  manual_seed(3);
  Regressor single;
  auto train8 = loader(regression_data(32), 8);
  trainer::TrainerOptions so = quiet(dir / "single");
  so.max_epochs = 2;
  trainer::Trainer(so).fit(single, *train8);
  const auto want = weights_of(single);

  const uint16_t port = distributed::find_free_port();
  const auto results = run_ranks(2, [&](int rank) {
    set_rank_env(rank, 2, port);
    manual_seed(3);
    Regressor m;
    auto train = stream_loader(regression_data(33), 4);
    trainer::TrainerOptions o = quiet(dir / "ddp");
    o.max_epochs = 2;
    o.strategy = "ddp";
    o.process_group_timeout = 30;
    trainer::Trainer t(o);
    t.fit(m, *train);
    rank_check(t.global_step() == 8, "rank " + std::to_string(rank) + ": " + std::to_string(t.global_step()) +
                                         " steps, expected 8");
    const std::string mismatch = weights_mismatch(weights_of(m), want);
    rank_check(mismatch.empty(), "rank " + std::to_string(rank) + " against one process: " + mismatch);
  }, std::chrono::seconds(60));
  expect_all_ok(results);
}

}  // namespace
}  // namespace kiln::test
