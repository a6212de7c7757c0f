// DataLoader over an IterableDataset: the batches and their order are worked out here from the rule (each
// worker batches its own stream, the loader takes the workers' batches in turn, skipping those whose stream
// ended), for several worker counts, with and without drop_last; epochs, early breaks, resume, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "kiln/data/data.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

// Examples 0..n-1 of epoch e are {i + 1000 e, -i}; stream `part` of `num_parts` gives those with
// i % num_parts == part, in order. throw_at: an example whose read throws (-1: none).
struct Counting : data::IterableDataset {
  int64_t n;
  int64_t throw_at = -1;
  mutable std::atomic<int> streams_made{0};
  mutable std::vector<data::StreamInfo> infos;  // written on the loader's thread only
  explicit Counting(int64_t count) : n(count) {}
  data::ExampleStream stream(const data::StreamInfo& info) const override {
    ++streams_made;
    infos.push_back(info);
    auto next = std::make_shared<int64_t>(info.part());
    return [this, info, next]() -> std::optional<data::Example> {
      if (*next >= n) return std::nullopt;
      const int64_t i = *next;
      *next += info.num_parts();
      if (i == throw_at) throw std::runtime_error("record " + std::to_string(i) + " is corrupt");
      return data::Example{scalar_tensor(i + 1000 * static_cast<int64_t>(info.epoch), kInt64), scalar_tensor(-i, kInt64)};
    };
  }
};

// The batches the rule gives, as lists of example numbers (before the epoch offset).
std::vector<std::vector<int64_t>> expected_batches(int64_t n, int workers, int64_t batch, bool drop_last,
                                                   int rank = 0, int world = 1) {
  const int streams = std::max(1, workers);
  std::vector<std::vector<std::vector<int64_t>>> per(streams);
  for (int w = 0; w < streams; ++w) {
    std::vector<int64_t> mine;
    for (int64_t i = rank * streams + w; i < n; i += static_cast<int64_t>(streams) * world) mine.push_back(i);
    for (size_t s = 0; s < mine.size(); s += static_cast<size_t>(batch)) {
      std::vector<int64_t> b(mine.begin() + static_cast<int64_t>(s),
                             mine.begin() + static_cast<int64_t>(std::min(mine.size(), s + static_cast<size_t>(batch))));
      if (drop_last && static_cast<int64_t>(b.size()) < batch) break;
      per[w].push_back(b);
    }
  }
  std::vector<std::vector<int64_t>> out;
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (int w = 0; w < streams; ++w) {
      if (k < per[w].size()) out.push_back(per[w][k]), any = true;
    }
    if (!any) return out;
  }
}

std::vector<std::vector<int64_t>> read_epoch(data::DataLoader& loader, int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (const data::Batch& b : loader) {
    std::vector<int64_t> ids = b[0].to_vector<int64_t>();
    const std::vector<int64_t> neg = b[1].to_vector<int64_t>();
    for (size_t j = 0; j < ids.size(); ++j) {
      EXPECT_EQ(ids[j] - 1000 * epoch, -neg[j]) << "the fields of one example";
      ids[j] -= 1000 * epoch;
    }
    out.push_back(ids);
  }
  return out;
}

TEST(IterableLoader, BatchesFollowTheRuleForAnyWorkersAndDropLast) {
  auto ds = std::make_shared<Counting>(23);
  for (int workers : {0, 1, 2, 3}) {
    for (bool drop_last : {false, true}) {
      data::DataLoader loader(ds, {.batch_size = 4, .drop_last = drop_last, .num_workers = workers});
      EXPECT_EQ(loader.size(), -1);
      EXPECT_TRUE(loader.is_iterable());
      EXPECT_EQ(read_epoch(loader), expected_batches(23, workers, 4, drop_last))
          << workers << " workers, drop_last " << drop_last;
    }
  }
  // Every example exactly once without drop_last, with 3 workers: the streams split the examples.
  data::DataLoader loader(ds, {.batch_size = 5, .num_workers = 3});
  std::vector<int64_t> all;
  for (const auto& b : read_epoch(loader)) all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all.size(), 23u);
  for (int64_t i = 0; i < 23; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
}

TEST(IterableLoader, EpochsRanksAndEarlyBreaks) {
  auto ds = std::make_shared<Counting>(12);
  data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 2, .seed = 9}, /*rank=*/1, /*world_size=*/2);
  EXPECT_EQ(read_epoch(loader, 0), expected_batches(12, 2, 2, false, 1, 2));
  // The loader moved on to epoch 1 by itself; the streams were told so, and the rank, workers and seed.
  EXPECT_EQ(read_epoch(loader, 1), expected_batches(12, 2, 2, false, 1, 2));
  ASSERT_EQ(ds->infos.size(), 4u);
  const data::StreamInfo& last = ds->infos.back();
  EXPECT_EQ(last.epoch, 1u);
  EXPECT_EQ(last.worker, 1);
  EXPECT_EQ(last.num_workers, 2);
  EXPECT_EQ(last.rank, 1);
  EXPECT_EQ(last.world_size, 2);
  EXPECT_EQ(last.seed, 9u);
  EXPECT_EQ(last.part(), 3);
  EXPECT_EQ(last.num_parts(), 4);
  // A loop left early: the next one starts the next epoch from its start.
  for (const data::Batch& b : loader) {
    (void)b;
    break;
  }
  EXPECT_EQ(read_epoch(loader, 3), expected_batches(12, 2, 2, false, 1, 2));
}

TEST(IterableLoader, ResumeReplaysTheBatchesHandedOut) {
  auto ds = std::make_shared<Counting>(30);
  for (int workers : {0, 2}) {
    const data::DataLoaderOptions o{.batch_size = 4, .num_workers = workers};
    data::DataLoader whole(ds, o);
    whole.set_epoch(1);
    const auto want = read_epoch(whole, 1);

    data::DataLoader first(ds, o);
    first.set_epoch(1);
    int taken = 0;
    for (const data::Batch& b : first) {
      (void)b;
      if (++taken == 3) break;
    }
    const data::DataLoaderState state = first.state();
    EXPECT_EQ(state.batches_yielded, 3);
    data::DataLoader resumed(ds, o);
    resumed.set_state(state);
    const auto rest = read_epoch(resumed, 1);
    EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(want.begin() + 3, want.end())) << workers << " workers";
  }
}

TEST(IterableLoader, ErrorsNameTheBatchAndStream) {
  auto ds = std::make_shared<Counting>(40);
  ds->throw_at = 13;
  for (int workers : {0, 2}) {
    data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    expect_error([&] { read_epoch(loader); }, {"DataLoader", "building batch", "record 13 is corrupt"});
  }
  // A loader destroyed mid-epoch stops its workers.
  ds->throw_at = -1;
  {
    data::DataLoader loader(ds, {.batch_size = 1, .num_workers = 3, .prefetch_factor = 1});
    auto it = loader.begin();
    ++it;
  }
  expect_error([&] { data::DataLoader(ds, {.shuffle = true}); }, {"shuffle", "iterable"});
  expect_error([&] { data::DataLoader(ds, {}, 2, 2); }, {"rank 2", "world_size 2"});
  expect_error([&] { data::DataLoader(std::shared_ptr<data::IterableDataset>(), {}); }, {"dataset is null"});
}

}  // namespace
}  // namespace kiln
