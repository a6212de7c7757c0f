// The batch-size search (trainer::scale_batch_size). Its answers are checked two ways: against a module that
// runs out of "memory" past a known batch size, where the answer follows from the modes' definitions (power:
// the largest size of init_val's doubling or halving chain that fits; binsearch: the largest size that fits),
// and against real memory under a CPU budget, where a plain fit at the answer must run and one a size past it
// must fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kiln/tensor/allocator.h"
#include "kiln/trainer/batch_size_finder.h"
#include "tensor/test_util.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

// A regression module whose steps fail as a device out of memory would, past `capacity` rows a batch (and
// past `val_capacity` in validation); `hard_fail_at` rows raise an ordinary error instead. Each step draws from
// the default generator.
struct Budgeted : Regressor {
  int64_t capacity = int64_t{1} << 40, val_capacity = int64_t{1} << 40, hard_fail_at = -1;
  std::vector<int64_t> step_sizes;  // the rows of every training step that ran

  Tensor training_step(const data::Batch& b, int64_t i) override {
    const int64_t n = b[0].size(0);
    if (n == hard_fail_at) throw Error("training_step: a bug, not memory");
    if (n > capacity) throw OutOfMemoryError(detail::concat("simulated: ", n, " rows do not fit"));
    step_sizes.push_back(n);
    (void)rand({2});  // a draw from the default generator, which the search must put back
    return Regressor::training_step(b, i);
  }
  Tensor validation_step(const data::Batch& b, int64_t i) override {
    if (b[0].size(0) > val_capacity) throw OutOfMemoryError("simulated: validation does not fit");
    return Regressor::validation_step(b, i);
  }
};

std::vector<int64_t> sizes_tried(const trainer::BatchSizeResult& r) {
  std::vector<int64_t> s;
  for (const auto& t : r.trials) s.push_back(t.batch_size);
  return s;
}

trainer::BatchSizeResult search(Budgeted& m, int64_t dataset_size, const std::string& root,
                                const trainer::BatchSizeFinderOptions& f) {
  auto data = regression_data(dataset_size);
  return trainer::scale_batch_size(m, [&](int64_t b) { return loader(data, b); }, quiet(root), f);
}

// The sequences Lightning's two modes walk, for a capacity of 100 rows from 2: doubling to the first failure,
// then (binsearch) halving the gap between the largest fit and the smallest failure.
TEST(BatchSizeFinder, WalksEachModesSequence) {
  TempDir dir;
  Budgeted m;
  m.capacity = 100;
  const auto power = search(m, 1000, dir.str(), {.mode = "power"});
  EXPECT_EQ(sizes_tried(power), (std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128}));
  EXPECT_EQ(power.batch_size, 64);
  EXPECT_EQ(power.stopped_by, "out of memory");
  for (const auto& t : power.trials) {
    EXPECT_EQ(t.fits, t.batch_size <= 100) << t.batch_size;
    EXPECT_EQ(t.error.empty(), t.fits) << t.batch_size;
  }
  EXPECT_NE(power.trials.back().error.find("128 rows do not fit"), std::string::npos) << power.trials.back().error;

  const auto bin = search(m, 1000, dir.str(), {.mode = "binsearch"});
  EXPECT_EQ(sizes_tried(bin), (std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101}));
  EXPECT_EQ(bin.batch_size, 100);
  EXPECT_EQ(bin.stopped_by, "out of memory");

  // A start past the dataset is the dataset's size.
  EXPECT_EQ(sizes_tried(search(m, 70, dir.str(), {.init_val = 512})), (std::vector<int64_t>{70}));
  // Too large a start: halve until a size fits (power stops there; binsearch goes back up).
  m.capacity = 20;
  EXPECT_EQ(sizes_tried(search(m, 1000, dir.str(), {.mode = "power", .init_val = 256})),
            (std::vector<int64_t>{256, 128, 64, 32, 16}));
  const auto down = search(m, 1000, dir.str(), {.mode = "binsearch", .init_val = 256});
  EXPECT_EQ(sizes_tried(down), (std::vector<int64_t>{256, 128, 64, 32, 16, 24, 20, 22, 21}));
  EXPECT_EQ(down.batch_size, 20);

  // The dataset bounds the doubling: the last size is the dataset's, and the search ends there.
  m.capacity = 1000;
  const auto data_bound = search(m, 50, dir.str(), {});
  EXPECT_EQ(sizes_tried(data_bound), (std::vector<int64_t>{2, 4, 8, 16, 32, 50}));
  EXPECT_EQ(data_bound.batch_size, 50);
  EXPECT_EQ(data_bound.stopped_by, "dataset");
  // So does max_trials.
  const auto trials_bound = search(m, 1000, dir.str(), {.max_trials = 3});
  EXPECT_EQ(sizes_tried(trials_bound), (std::vector<int64_t>{2, 4, 8}));
  EXPECT_EQ(trials_bound.batch_size, 8);
  EXPECT_EQ(trials_bound.stopped_by, "max_trials");
}

// Random capacities, starts and dataset sizes, against the answers the definitions give: power, the largest
// size of the chain init_val * 2^k (k of either sign, integer halving) that fits, or the dataset's size once
// the chain passes it; binsearch, the largest size that fits (or the dataset's).
TEST(BatchSizeFinder, AnswersAreWhatTheModesDefine) {
  TempDir dir;
  std::mt19937 rng(5);
  for (int round = 0; round < 24; ++round) {
    Budgeted m;
    m.capacity = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    const int64_t init = std::vector<int64_t>{1, 2, 3, 5, 64, 200}[round % 6];
    const int64_t n = round % 4 == 0 ? std::uniform_int_distribution<int64_t>(1, 250)(rng) : 5000;
    SCOPED_TRACE(detail::concat("capacity ", m.capacity, ", init ", init, ", dataset ", n));
    int64_t power = std::min(init, n);  // a start past the dataset is the dataset's size
    if (power <= m.capacity) {
      while (power < n && std::min(power * 2, n) <= m.capacity) power = std::min(power * 2, n);
    } else {
      while (power > m.capacity) power /= 2;
    }
    const trainer::BatchSizeFinderOptions base{.steps_per_trial = 1, .init_val = init};
    auto f = base;
    EXPECT_EQ(search(m, n, dir.str(), f).batch_size, power);
    f.mode = "binsearch";
    EXPECT_EQ(search(m, n, dir.str(), f).batch_size, std::min(m.capacity, n));
  }
}

// Each trial is steps_per_trial optimizer steps; afterwards the weights and the generator are as before, and
// the gradients (there from a backward before the search) cleared.
TEST(BatchSizeFinder, TrialsRunTheirStepsAndPutTheModuleBack) {
  TempDir dir;
  manual_seed(3);
  Budgeted m;
  m.capacity = 40;
  const auto before = weights_of(m);
  auto data = regression_data(200);
  nn::F::mse_loss(m.fc(data->get(0)[0].unsqueeze(0)), data->get(0)[1].unsqueeze(0)).backward();
  ASSERT_TRUE(m.fc->weight.grad().defined());
  const uint64_t offset = default_generator().offset();
  trainer::TrainerOptions o = quiet(dir.str());
  const auto r = trainer::scale_batch_size(
      m, [&](int64_t b) { return loader(data, b, /*shuffle=*/true); }, o, {.steps_per_trial = 4, .init_val = 4});
  EXPECT_EQ(r.batch_size, 32);
  // 4, 8, 16 and 32 ran four steps each; 64 failed at its first.
  std::vector<int64_t> expected;
  for (int64_t b : {4, 8, 16, 32}) expected.insert(expected.end(), 4, b);
  EXPECT_EQ(m.step_sizes, expected);
  EXPECT_EQ(weights_of(m), before);
  EXPECT_EQ(default_generator().offset(), offset);
  for (const Tensor& p : m.parameters()) EXPECT_FALSE(p.grad().defined());
}

// A validation loader is tried at each size as well (steps_per_trial batches), and bounds the answer.
TEST(BatchSizeFinder, ValidationAtEachSizeCounts) {
  TempDir dir;
  Budgeted m;
  m.capacity = 100;
  m.val_capacity = 40;
  auto data = regression_data(1000);
  auto make = [&](int64_t b) { return loader(data, b); };
  const auto r = trainer::scale_batch_size(m, make, quiet(dir.str()), {}, make);
  EXPECT_EQ(sizes_tried(r), (std::vector<int64_t>{2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(r.batch_size, 32);
  EXPECT_EQ(m.val_steps, 5 * 3);  // three validation batches for each size that fit
}

// An out-of-memory error raised while a worker thread builds the batch reaches the search as one.
TEST(BatchSizeFinder, OutOfMemoryInTheLoadersWorkersCounts) {
  TempDir dir;
  Budgeted m;
  auto data = regression_data(1000);
  auto make = [&](int64_t b) {
    data::DataLoaderOptions o{.batch_size = b, .num_workers = 2};
    o.collate = [](std::vector<data::Example>&& examples) {
      if (examples.size() > 24) throw OutOfMemoryError("simulated: collate ran out");
      return data::default_collate(std::move(examples));
    };
    return std::make_unique<data::DataLoader>(data, o);
  };
  const auto r = trainer::scale_batch_size(m, make, quiet(dir.str()), {.mode = "binsearch"});
  EXPECT_EQ(r.batch_size, 24);
  EXPECT_NE(r.trials.back().error.find("collate ran out"), std::string::npos) << r.trials.back().error;
}

// Real memory: a wide MLP under a CPU budget. A plain fit at the answer runs within the budget, and one at the
// next size binsearch could have picked (or power's next doubling) runs out.
TEST(BatchSizeFinder, UnderACpuBudgetTheAnswerFitsAndTheNextSizeDoesNot) {
  TempDir dir;
  struct LiftLimit {
    ~LiftLimit() { set_cpu_memory_limit(0); }
  } lift;
  manual_seed(8);
  auto x = randn({4096, 32}), y = randn({4096, 1});
  auto data = std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
  auto make = [&](int64_t b) { return loader(data, b); };
  WideMlp m(32, 1024);
  set_cpu_memory_limit(cpu_memory_stats().allocated_bytes + (size_t{6} << 20));  // 6 MiB beyond what is held
  const trainer::TrainerOptions o = quiet(dir.str());
  auto plain_fit = [&](int64_t b) {  // the same module: another's weights would take from the budget
    trainer::TrainerOptions po = o;
    po.max_steps = 3;
    auto train = make(b);
    trainer::Trainer(po).fit(m, *train);
  };
  for (const std::string mode : {"binsearch", "power"}) {
    SCOPED_TRACE(mode);
    const auto r = trainer::scale_batch_size(m, make, o, {.mode = mode, .init_val = 16});
    EXPECT_EQ(r.stopped_by, "out of memory");
    EXPECT_GT(r.batch_size, 16);
    size_t last_peak = 0;
    for (const auto& t : r.trials) {
      if (!t.fits) continue;
      EXPECT_GT(t.peak_bytes, last_peak) << t.batch_size;  // more rows, more memory
      last_peak = t.peak_bytes;
    }
    EXPECT_NO_THROW(plain_fit(r.batch_size));
    EXPECT_THROW(plain_fit(mode == "power" ? 2 * r.batch_size : r.batch_size + 1), OutOfMemoryError);
  }
}

TEST(BatchSizeFinder, ErrorsAndBadOptions) {
  TempDir dir;
  Budgeted m;
  const auto before = weights_of(m);
  // Another error ends the search as it is, with the module put back.
  m.hard_fail_at = 16;
  expect_error([&] { search(m, 1000, dir.str(), {}); }, {"a bug, not memory"});
  EXPECT_EQ(weights_of(m), before);
  m.hard_fail_at = -1;
  m.capacity = 0;
  expect_error([&] { search(m, 1000, dir.str(), {}); }, {"even a batch of 1 does not fit", "1 rows do not fit"});
  m.capacity = 100;
  expect_error([&] { search(m, 1000, dir.str(), {.mode = "linear"}); }, {"mode 'linear'", "'power' or 'binsearch'"});
  expect_error([&] { search(m, 1000, dir.str(), {.steps_per_trial = 0}); }, {"steps_per_trial must be at least 1"});
  expect_error([&] { search(m, 1000, dir.str(), {.init_val = 0}); }, {"init_val must be at least 1"});
  expect_error([&] { search(m, 1000, dir.str(), {.max_trials = 0}); }, {"max_trials must be at least 1"});
  trainer::TrainerOptions ddp = quiet(dir.str());
  ddp.strategy = "ddp";
  auto data = regression_data(10);
  expect_error([&] { trainer::scale_batch_size(m, [&](int64_t b) { return loader(data, b); }, ddp); },
               {"one process", "'ddp'"});
  expect_error([&] { trainer::scale_batch_size(m, nullptr, quiet(dir.str())); }, {"no training loader"});
  expect_error([&] { trainer::scale_batch_size(m, [](int64_t) { return nullptr; }, quiet(dir.str())); },
               {"returned none for batch size 2"});
}

}  // namespace
}  // namespace kiln::test
