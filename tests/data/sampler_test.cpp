// The samplers: counts, determinism per (seed, epoch), and DistributedSampler's split across ranks.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "data/data_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::data;

std::vector<int64_t> iota_vec(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(SequentialSampler, InOrder) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(), iota_vec(5));
  s.set_epoch(3);
  EXPECT_EQ(s.indices(), iota_vec(5));
  EXPECT_TRUE(SequentialSampler(0).indices().empty());
}

TEST(RandomSampler, PermutationPerEpochDeterministic) {
  RandomSampler a(50, 123), b(50, 123), c(50, 124);
  auto e0 = a.indices();
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota_vec(50));
  EXPECT_NE(e0, iota_vec(50));
  EXPECT_EQ(b.indices(), e0);  // same seed, same epoch
  EXPECT_NE(c.indices(), e0);  // another seed
  a.set_epoch(1);
  auto e1 = a.indices();
  EXPECT_NE(e1, e0);  // a new order each epoch
  EXPECT_EQ(a.indices(), e1);  // ... that depends on nothing but (seed, epoch)
  b.set_epoch(5);
  b.set_epoch(1);
  EXPECT_EQ(b.indices(), e1);
}

TEST(WeightedRandomSampler, WithReplacementFollowsWeights) {
  // Weights 1, 0, 3: index 1 never, index 2 three times as often as index 0.
  WeightedRandomSampler s({1, 0, 3}, 8000, true, 9);
  auto idx = s.indices();
  ASSERT_EQ(idx.size(), 8000u);
  std::map<int64_t, int> count;
  for (int64_t i : idx) count[i]++;
  EXPECT_EQ(count[1], 0);
  EXPECT_EQ(count[0] + count[2], 8000);
  // Binomial(8000, 0.25): mean 2000, sd ~39.
  EXPECT_NEAR(count[0], 2000, 200);
  EXPECT_EQ(WeightedRandomSampler({1, 0, 3}, 8000, true, 9).indices(), idx);
  s.set_epoch(1);
  EXPECT_NE(s.indices(), idx);
}

TEST(WeightedRandomSampler, WithoutReplacementEachAtMostOnce) {
  WeightedRandomSampler s({1, 2, 0, 4, 8}, 4, false, 3);
  auto idx = s.indices();
  std::set<int64_t> uniq(idx.begin(), idx.end());
  EXPECT_EQ(uniq.size(), 4u);
  EXPECT_EQ(uniq.count(2), 0u);  // zero weight never drawn
  // The heaviest index comes first most of the time: P(8 first) = 8/15.
  int heavy_first = 0;
  for (uint64_t e = 0; e < 3000; ++e) {
    s.set_epoch(e);
    heavy_first += s.indices()[0] == 4;
  }
  EXPECT_NEAR(heavy_first / 3000.0, 8.0 / 15.0, 0.04);
  expect_error([] { WeightedRandomSampler({1, 0, 1}, 3, false, 0); }, {"WeightedRandomSampler", "3", "2"});
  expect_error([] { WeightedRandomSampler({1, -1}, 1, true, 0); }, {"WeightedRandomSampler", "weight 1", "-1"});
  expect_error([] { WeightedRandomSampler({0, 0}, 1, true, 0); }, {"WeightedRandomSampler", "zero"});
}

// Replays torch.utils.data.DistributedSampler(shuffle=False) by hand: pad by repeating, then stride by rank.
std::vector<int64_t> torch_distributed(int64_t n, int64_t R, int64_t rank, bool drop_last) {
  std::vector<int64_t> all = iota_vec(n);
  // num_samples = math.ceil((n - R) / R) with drop_last and a remainder, else math.ceil(n / R).
  int64_t num = (drop_last && n % R != 0) ? static_cast<int64_t>(std::ceil(double(n - R) / double(R)))
                                          : static_cast<int64_t>(std::ceil(double(n) / double(R)));
  int64_t total = num * R;
  if (!drop_last) {
    std::vector<int64_t> padded = all;
    while (static_cast<int64_t>(padded.size()) < total) padded.insert(padded.end(), all.begin(), all.end());
    all.assign(padded.begin(), padded.begin() + total);
  } else {
    all.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < total; i += R) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

TEST(DistributedSampler, MatchesTorchWithoutShuffle) {
  for (int64_t n : {0, 1, 3, 10, 11, 12}) {
    for (int64_t R : {1, 2, 3, 4, 5}) {
      for (bool drop : {false, true}) {
        for (int64_t r = 0; r < R; ++r) {
          DistributedSampler s(n, R, r, false, 0, drop);
          EXPECT_EQ(s.indices(), torch_distributed(n, R, r, drop)) << "n=" << n << " R=" << R << " rank=" << r << " drop=" << drop;
          EXPECT_EQ(s.size(), static_cast<int64_t>(s.indices().size()));
        }
      }
    }
  }
}

TEST(DistributedSampler, RanksCoverTheDatasetWithEqualCounts) {
  const int64_t n = 23, R = 4;
  for (uint64_t epoch : {0, 1}) {
    std::set<int64_t> all;
    std::vector<int64_t> flat;
    for (int64_t r = 0; r < R; ++r) {
      DistributedSampler s(n, R, r, true, 77);
      s.set_epoch(epoch);
      auto idx = s.indices();
      EXPECT_EQ(idx.size(), 6u);  // ceil(23 / 4)
      all.insert(idx.begin(), idx.end());
      flat.insert(flat.end(), idx.begin(), idx.end());
    }
    EXPECT_EQ(all.size(), static_cast<size_t>(n)) << "epoch " << epoch;
    EXPECT_EQ(flat.size(), 24u);  // one index repeated as padding
  }
  // drop_last: disjoint, 5 each, 3 left out.
  std::set<int64_t> all;
  for (int64_t r = 0; r < R; ++r) {
    DistributedSampler s(n, R, r, true, 77, true);
    auto idx = s.indices();
    EXPECT_EQ(idx.size(), 5u);
    all.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(all.size(), 20u);
}

TEST(DistributedSampler, ShuffleDependsOnSeedAndEpoch) {
  DistributedSampler a(100, 2, 0, true, 5), b(100, 2, 0, true, 5), c(100, 2, 0, true, 6);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_NE(a.indices(), c.indices());
  auto e0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), e0);
  expect_error([] { DistributedSampler(10, 2, 2); }, {"DistributedSampler", "rank 2"});
  expect_error([] { DistributedSampler(10, 0, 0); }, {"DistributedSampler", "num_replicas"});
}

}  // namespace
}  // namespace kiln::test
