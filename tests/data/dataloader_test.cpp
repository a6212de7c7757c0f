// DataLoader: batch contents and order for any num_workers, drop_last, collate, errors, early exit, resume.
#include <atomic>
#include <set>
#include <chrono>
#include <thread>

#include "data/data_test_util.h"
#include "kiln/tensor/cuda/cuda.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::data;

// Example i: x = (i, -i) float32, y = i int64.
std::shared_ptr<TensorDataset> make_dataset(int64_t n) {
  std::vector<double> xs;
  for (int64_t i = 0; i < n; ++i) {
    xs.push_back(double(i));
    xs.push_back(-double(i));
  }
  return std::make_shared<TensorDataset>(std::vector<Tensor>{tensor(xs, {n, 2}), arange(n)});
}

// Every batch's label list, for one epoch.
std::vector<std::vector<int64_t>> epoch_labels(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) out.push_back(batch[1].to_vector<int64_t>());
  return out;
}

// A dataset that sleeps a varying time per example, so that workers finish out of order.
class SlowDataset : public Dataset {
 public:
  explicit SlowDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 5 * 200));
    KILN_CHECK(i != fail_at_, "SlowDataset: example ", i, " is broken");
    calls.fetch_add(1);
    return {full({3}, static_cast<double>(i)), scalar_tensor(i, kInt64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
};

TEST(DataLoader, SequentialBatches) {
  DataLoader loader(make_dataset(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  std::vector<Batch> batches;
  for (auto& b : loader) batches.push_back(b);
  ASSERT_EQ(batches.size(), 3u);
  ASSERT_EQ(batches[0].size(), 2u);
  expect_tensor_near(batches[0][0], {0, -0., 1, -1, 2, -2, 3, -3}, {4, 2});
  expect_tensor_near(batches[0][1], {0, 1, 2, 3}, {4});
  EXPECT_EQ(batches[0][1].dtype(), kInt64);
  expect_tensor_near(batches[2][1], {8, 9}, {2});  // the short last batch
  expect_tensor_near(batches[2][0], {8, -8, 9, -9}, {2, 2});
}

// pin_memory asks for batches in pinned memory; without a CUDA device it does nothing, and the batches are the
// same as without it (the GPU side, where batches come pinned: tests/cuda/allocator_test.cpp).
TEST(DataLoader, PinMemoryWithoutADeviceChangesNothing) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present: the GPU tests cover pinned batches";
  for (int workers : {0, 2}) {
    DataLoader plain(make_dataset(10), {.batch_size = 4, .num_workers = workers});
    DataLoader pinned(make_dataset(10), {.batch_size = 4, .num_workers = workers, .pin_memory = true});
    EXPECT_TRUE(pinned.options().pin_memory);
    EXPECT_FALSE(pinned.pins_memory());
    std::vector<Batch> a, b;
    for (auto& batch : plain) a.push_back(batch);
    for (auto& batch : pinned) b.push_back(batch);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(b[i][0].sizes(), a[i][0].sizes());
      EXPECT_EQ(values(b[i][0]), values(a[i][0]));
      EXPECT_EQ(values(b[i][1]), values(a[i][1]));
      EXPECT_EQ(b[i][1].dtype(), kInt64);
      EXPECT_FALSE(cuda::is_pinned(b[i][0].raw_data_ptr()));
    }
  }
}

TEST(DataLoader, DropLast) {
  DataLoader loader(make_dataset(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  auto labels = epoch_labels(loader);
  ASSERT_EQ(labels.size(), 2u);
  EXPECT_EQ(labels[1], (std::vector<int64_t>{4, 5, 6, 7}));
  DataLoader exact(make_dataset(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(epoch_labels(exact).size(), 2u);
}

TEST(DataLoader, SameBatchesForAnyNumberOfWorkers) {
  auto ds = std::make_shared<SlowDataset>(37);
  std::vector<std::vector<std::vector<int64_t>>> reference;
  for (int workers : {0, 1, 2, 4}) {
    DataLoader loader(ds, {.batch_size = 3, .shuffle = true, .num_workers = workers, .seed = 11});
    std::vector<std::vector<std::vector<int64_t>>> epochs;
    for (int e = 0; e < 2; ++e) epochs.push_back(epoch_labels(loader));
    if (workers == 0) {
      reference = epochs;
      ASSERT_EQ(reference[0].size(), 13u);
      EXPECT_NE(reference[0], reference[1]);  // a new order in the second epoch
      std::vector<int64_t> all;
      for (auto& b : reference[0]) all.insert(all.end(), b.begin(), b.end());
      std::sort(all.begin(), all.end());
      for (int64_t i = 0; i < 37; ++i) EXPECT_EQ(all[i], i);
    } else {
      EXPECT_EQ(epochs, reference) << workers << " workers";
    }
  }
}

TEST(DataLoader, BatchContentsMatchLabelsWithWorkers) {
  auto ds = std::make_shared<SlowDataset>(20);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .num_workers = 3, .seed = 5});
  for (auto& batch : loader) {
    auto labels = batch[1].to_vector<int64_t>();
    auto xs = batch[0].to_vector<float>();
    ASSERT_EQ(xs.size(), labels.size() * 3);
    for (size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(xs[i * 3 + 2], static_cast<float>(labels[i]));
  }
}

TEST(DataLoader, CustomCollateAndSampler) {
  // Collate that sums the labels of a batch into one 1-element tensor.
  CollateFn sum_labels = [](std::vector<Example>&& ex) {
    int64_t s = 0;
    for (auto& e : ex) s += e[1].item<int64_t>();
    return Batch{tensor(std::vector<int64_t>{s}), full({1}, static_cast<double>(ex.size()))};
  };
  auto sampler = std::make_shared<SequentialSampler>(6);
  DataLoader loader(make_dataset(6), {.batch_size = 4, .num_workers = 2, .collate = sum_labels}, sampler);
  std::vector<int64_t> sums, counts;
  for (auto& b : loader) {
    sums.push_back(b[0].item<int64_t>());
    counts.push_back(b[1].item<int64_t>());
  }
  EXPECT_EQ(sums, (std::vector<int64_t>{0 + 1 + 2 + 3, 4 + 5}));
  EXPECT_EQ(counts, (std::vector<int64_t>{4, 2}));
  expect_error([&] { DataLoader(make_dataset(6), {.shuffle = true}, sampler); }, {"DataLoader", "shuffle", "sampler"});
  expect_error([] { DataLoader(make_dataset(6), {.batch_size = 0}); }, {"DataLoader", "batch_size"});
}

TEST(DataLoader, DefaultCollateChecksShapes) {
  expect_error([] { default_collate({{zeros({2})}, {zeros({3})}}); }, {"default_collate", "field 0", "example 1", "(3)", "(2)"});
  expect_error([] { default_collate({{zeros({2})}, {zeros({2}), zeros({1})}}); }, {"default_collate", "example 1", "2 fields"});
  Batch b = default_collate({{full({2, 2}, 1.0)}, {full({2, 2}, 2.0)}});
  expect_tensor_near(b[0], {1, 1, 1, 1, 2, 2, 2, 2}, {2, 2, 2});
}

// The allocator form (what pin_memory uses, with pinned memory) stacks into the allocator's tensors: row e of
// field k holds example e's field k, read element by element from the example itself, for every dtype,
// non-contiguous examples included; and no graph.
TEST(DataLoader, DefaultCollateIntoAllocatedTensors) {
  std::mt19937 rng(20261202);
  for (DType dtype : {kFloat32, kFloat64, kUInt8, kInt64, kBool, kBFloat16}) {
    std::vector<Example> examples;
    std::vector<double> want_images, want_labels;  // the examples' values in row-major order, concatenated
    for (int e = 0; e < 5; ++e) {
      Tensor image = random_tensor({3, 4}, dtype, rng).t();  // not contiguous
      Tensor label = random_tensor({}, kInt64, rng);
      if (dtype == kFloat32) image.requires_grad_();
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 3; ++j) want_images.push_back(image.select(0, i).select(0, j).item<double>());
      want_labels.push_back(label.item<double>());
      examples.push_back({image, label});
    }
    std::vector<Tensor> made;
    std::vector<Shape> asked;
    Batch got = default_collate(std::move(examples), [&](IntArrayRef shape, DType d) {
      asked.emplace_back(shape.begin(), shape.end());
      made.push_back(empty(shape, d));
      return made.back();
    });
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(asked, (std::vector<Shape>{{5, 4, 3}, {5}})) << dtype_name(dtype);
    const std::vector<std::vector<double>> want{want_images, want_labels};
    const std::vector<DType> want_dtypes{dtype, kInt64};
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(got[k].raw_data_ptr(), made[k].raw_data_ptr()) << "field " << k << " was not built in place";
      EXPECT_EQ(got[k].dtype(), want_dtypes[k]);
      EXPECT_EQ(got[k].sizes(), asked[k]);
      EXPECT_EQ(values(got[k]), want[k]) << dtype_name(dtype) << " field " << k;
      EXPECT_FALSE(got[k].requires_grad());
    }
  }
  auto wrong_shape = [](IntArrayRef, DType d) { return empty({2}, d); };
  expect_error([&] { default_collate({{zeros({3})}, {zeros({3})}}, wrong_shape); },
               {"default_collate", "allocator returned", "(2)", "field 0", "expected", "(2, 3)"});
  auto strided = [](IntArrayRef shape, DType d) { return empty({shape[1], shape[0]}, d).t(); };
  expect_error([&] { default_collate({{zeros({3})}, {zeros({3})}}, strided); }, {"not contiguous", "field 0"});
  expect_error([] { default_collate({{zeros({2})}, {zeros({3})}}, [](IntArrayRef s, DType d) { return empty(s, d); }); },
               {"default_collate", "field 0", "example 1"});
}

TEST(DataLoader, WorkerErrorReachesConsumerWithBatchIndex) {
  for (int workers : {0, 1, 3}) {
    auto ds = std::make_shared<SlowDataset>(30, /*fail_at=*/13);
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    std::vector<int64_t> seen;
    try {
      for (auto& batch : loader) seen.push_back(batch[1].to_vector<int64_t>()[0]);
      ADD_FAILURE() << "no error with " << workers << " workers";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("batch 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("example 13 is broken"), std::string::npos) << msg;
    }
    // The batches before the broken one arrived, in order.
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 4, 8})) << workers << " workers";
    // The loader is usable again: the next epoch starts (and fails at the same place).
    EXPECT_THROW(for (auto& b : loader) (void)b, Error);
  }
}

TEST(DataLoader, EarlyExitAndDestructionJoinWorkers) {
  auto ds = std::make_shared<SlowDataset>(400);
  {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 4, .prefetch_factor = 2});
    int n = 0;
    for (auto& b : loader) {
      (void)b;
      if (++n == 3) break;
    }
    // Destroyed here mid-epoch: must join, not hang. The bounded window kept workers from running far ahead.
  }
  EXPECT_LE(ds->calls.load(), 2 * (3 + 4 * 2 + 4));
  // Destroying a loader whose epoch has just started (workers busy) also returns.
  auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 4});
    auto it = loader.begin();
    (void)*it;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(DataLoader, EpochsAndState) {
  DataLoader loader(make_dataset(10), {.batch_size = 3, .shuffle = true, .seed = 3});
  EXPECT_EQ(loader.state(), (DataLoaderState{0, 0, 3}));
  auto e0 = epoch_labels(loader);
  EXPECT_EQ(loader.state(), (DataLoaderState{1, 0, 3}));
  auto e1 = epoch_labels(loader);
  EXPECT_NE(e0, e1);
  loader.set_epoch(0);
  EXPECT_EQ(epoch_labels(loader), e0);

  // Leave epoch 1 after two batches; the state says so.
  std::vector<std::vector<int64_t>> e1_head;
  for (auto& b : loader) {
    e1_head.push_back(b[1].to_vector<int64_t>());
    if (e1_head.size() == 2) break;
  }
  EXPECT_EQ(e1_head, std::vector<std::vector<int64_t>>(e1.begin(), e1.begin() + 2));
  EXPECT_EQ(loader.state(), (DataLoaderState{1, 2, 3}));
  // Without set_state, the next loop starts the following epoch (2) from its start, as PyTorch would.
  auto e2 = epoch_labels(loader);
  DataLoader fresh(make_dataset(10), {.batch_size = 3, .shuffle = true, .seed = 3});
  fresh.set_epoch(2);
  EXPECT_EQ(e2, epoch_labels(fresh));
  EXPECT_EQ(loader.state(), (DataLoaderState{3, 0, 3}));

  // ...and a fresh loader given a saved state resumes exactly at that batch.
  DataLoader a(make_dataset(10), {.batch_size = 3, .shuffle = true, .seed = 3});
  a.set_epoch(4);
  auto full4 = epoch_labels(a);
  DataLoader b(make_dataset(10), {.batch_size = 3, .shuffle = true, .seed = 999});
  b.set_state({4, 2, 3});
  auto rest = epoch_labels(b);
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(full4.begin() + 2, full4.end()));
  EXPECT_EQ(b.state(), (DataLoaderState{5, 0, 3}));
  expect_error([&] { b.set_state({0, 5, 3}); }, {"set_state", "5", "4 batches"});
}

TEST(DataLoader, DistributedSamplerSplitsBatchesAcrossRanks) {
  // 3 ranks over 10 examples: 4 each (two padded), batches of 2; together every example is seen.
  auto ds = make_dataset(10);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(10, 3, rank, true, 8);
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 2}, sampler);
    EXPECT_EQ(loader.size(), 2);
    loader.set_epoch(3);
    int batches = 0;
    for (auto& b : loader) {
      ++batches;
      for (int64_t y : b[1].to_vector<int64_t>()) seen.insert(y);
    }
    EXPECT_EQ(batches, 2);
    EXPECT_EQ(sampler->epoch(), 3u);  // the loader passed its epoch on
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(DataLoader, EmptyDataset) {
  DataLoader loader(make_dataset(0), {.batch_size = 3});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(epoch_labels(loader).empty());
}

}  // namespace
}  // namespace kiln::test
