// TensorDataset, Subset, ConcatDataset and random_split.
#include <set>

#include "data/data_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::data;

std::shared_ptr<TensorDataset> make_pairs_dataset(int64_t n) {
  // x: (n, 2) with row i = (i, 10 i); y: (n) = i.
  std::vector<double> xs;
  for (int64_t i = 0; i < n; ++i) {
    xs.push_back(double(i));
    xs.push_back(10.0 * i);
  }
  return std::make_shared<TensorDataset>(std::vector<Tensor>{tensor(xs, {n, 2}), arange(n)});
}

TEST(TensorDataset, SlicesDimZeroOfEachTensor) {
  auto ds = make_pairs_dataset(5);
  EXPECT_EQ(ds->size(), 5);
  Example e = ds->get(3);
  ASSERT_EQ(e.size(), 2u);
  expect_tensor_near(e[0], {3, 30}, {2});
  EXPECT_EQ(e[1].dim(), 0);
  EXPECT_EQ(e[1].item<int64_t>(), 3);
  EXPECT_EQ(e[1].dtype(), kInt64);
}

TEST(TensorDataset, Errors) {
  expect_error([] { TensorDataset({zeros({3, 2}), zeros({4})}); }, {"TensorDataset", "3", "4"});
  expect_error([] { TensorDataset(std::vector<Tensor>{}); }, {"TensorDataset", "at least one"});
  expect_error([] { TensorDataset({scalar_tensor(1.0)}); }, {"TensorDataset", "0-dim"});
  auto ds = make_pairs_dataset(3);
  expect_error([&] { ds->get(3); }, {"TensorDataset", "index 3", "3 examples"});
  expect_error([&] { ds->get(-1); }, {"TensorDataset", "-1"});
}

TEST(Subset, MapsIndices) {
  auto ds = make_pairs_dataset(6);
  Subset s(ds, {5, 0, 5});
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.get(0)[1].item<int64_t>(), 5);
  EXPECT_EQ(s.get(1)[1].item<int64_t>(), 0);
  EXPECT_EQ(s.get(2)[1].item<int64_t>(), 5);
  expect_error([&] { s.get(3); }, {"Subset", "index 3"});
  expect_error([&] { Subset(ds, {6}); }, {"Subset", "index 6", "6 examples"});
}

// Parts of 3, 0 and 2 examples: the whole's example i is the i-th in reading order, the empty part passed over,
// and set_epoch reaches every part.
TEST(ConcatDataset, ReadsItsPartsInOrder) {
  struct EpochSeen : Dataset {
    int64_t n;
    uint64_t epoch = 0;
    explicit EpochSeen(int64_t n) : n(n) {}
    int64_t size() const override { return n; }
    Example get(int64_t i) const override { return {scalar_tensor(100.0 + static_cast<double>(i))}; }
    void set_epoch(uint64_t e) override { epoch = e; }
  };
  auto empty = std::make_shared<EpochSeen>(0), last = std::make_shared<EpochSeen>(2);
  ConcatDataset all({make_pairs_dataset(3), empty, last});
  EXPECT_EQ(all.size(), 5);
  EXPECT_EQ(all.cumulative_sizes(), (std::vector<int64_t>{3, 3, 5}));
  std::vector<double> firsts;
  for (int64_t i = 0; i < all.size(); ++i) firsts.push_back(all.get(i)[0].flatten()[0].item<double>());
  EXPECT_EQ(firsts, (std::vector<double>{0, 1, 2, 100, 101}));
  all.set_epoch(4);
  EXPECT_EQ(empty->epoch, 4u);
  EXPECT_EQ(last->epoch, 4u);
  expect_error([&] { all.get(5); }, {"ConcatDataset", "index 5", "5 examples"});
  expect_error([&] { all.get(-1); }, {"ConcatDataset", "index -1"});
  expect_error([] { ConcatDataset(std::vector<std::shared_ptr<Dataset>>{}); }, {"ConcatDataset", "at least one"});
  expect_error([] { ConcatDataset({make_pairs_dataset(1), nullptr}); }, {"ConcatDataset", "dataset 1 is null"});
}

TEST(RandomSplit, LengthsPartitionTheDataset) {
  auto ds = make_pairs_dataset(10);
  auto parts = random_split(ds, std::vector<int64_t>{3, 7}, 42);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0]->size(), 3);
  EXPECT_EQ(parts[1]->size(), 7);
  std::set<int64_t> seen;
  for (auto& p : parts)
    for (int64_t i = 0; i < p->size(); ++i) seen.insert(p->get(i)[1].item<int64_t>());
  EXPECT_EQ(seen.size(), 10u);
  // Same seed, same split; another seed, (almost surely) another.
  auto again = random_split(ds, std::vector<int64_t>{3, 7}, 42);
  EXPECT_EQ(again[0]->indices(), parts[0]->indices());
  auto other = random_split(ds, std::vector<int64_t>{3, 7}, 43);
  EXPECT_NE(other[1]->indices(), parts[1]->indices());
  expect_error([&] { random_split(ds, std::vector<int64_t>{3, 6}, 0); }, {"random_split", "9", "10"});
}

TEST(RandomSplit, FractionsDistributeTheRemainder) {
  auto ds = make_pairs_dataset(10);
  // floor(3.3) = 3 each, one left over goes to the first: 4, 3, 3 (as PyTorch).
  auto parts = random_split(ds, std::vector<double>{0.33, 0.33, 0.34}, 1);
  EXPECT_EQ(parts[0]->size(), 4);
  EXPECT_EQ(parts[1]->size(), 3);
  EXPECT_EQ(parts[2]->size(), 3);
  expect_error([&] { random_split(ds, std::vector<double>{0.5, 0.4}, 0); }, {"random_split", "sum", "0.9"});
}

TEST(RandomSplit, FromAGenerator) {
  auto ds = make_pairs_dataset(20);
  Generator g1(5), g2(5);
  auto a = random_split(ds, std::vector<int64_t>{10, 10}, g1);
  auto b = random_split(ds, std::vector<int64_t>{10, 10}, g2);
  EXPECT_EQ(a[0]->indices(), b[0]->indices());  // same generator state, same split
  auto c = random_split(ds, std::vector<double>{0.5, 0.5}, g1);  // g1 has advanced: another split
  EXPECT_NE(c[0]->indices(), a[0]->indices());
  EXPECT_EQ(g1.offset(), 2u);
}

TEST(RandomPermutation, IsAPermutationAndSeeded) {
  auto p = random_permutation(1000, 7);
  std::set<int64_t> s(p.begin(), p.end());
  EXPECT_EQ(s.size(), 1000u);
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), 999);
  EXPECT_EQ(random_permutation(1000, 7), p);
  EXPECT_NE(random_permutation(1000, 8), p);
  // Roughly uniform: element 0 lands in each half about equally often over many seeds.
  int first_half = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    auto q = random_permutation(10, seed);
    first_half += std::find(q.begin(), q.end(), 0) - q.begin() < 5;
  }
  EXPECT_NEAR(first_half, 1000, 150);
}

}  // namespace
}  // namespace kiln::test
