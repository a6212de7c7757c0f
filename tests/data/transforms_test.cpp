// Transforms: values worked out by hand, and randomness that depends only on (seed, epoch, index).
#include <set>

#include "data/data_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::data;

TEST(Transforms, ToFloat) {
  Generator g(0);
  Tensor x = tensor(std::vector<double>{0, 51, 255}, {3}, kUInt8);
  Tensor y = ToFloat()(x, g);
  EXPECT_EQ(y.dtype(), kFloat32);
  expect_tensor_near(y, {0, 0.2, 1}, {3});
  expect_tensor_near(ToFloat()(tensor({2.5}, kFloat64), g), {2.5}, {1});
}

TEST(Transforms, NormalizePerChannel) {
  Generator g(0);
  // x: (2, 1, 2): channel 0 = (1, 3), channel 1 = (10, 20).
  Tensor x = tensor({1, 3, 10, 20}).view({2, 1, 2});
  Tensor y = Normalize({1, 10}, {2, 5})(x, g);
  expect_tensor_near(y, {0, 1, 0, 2}, {2, 1, 2});
  expect_tensor_near(Normalize({1}, {2})(x, g), {0, 1, 4.5, 9.5}, {2, 1, 2});  // one value for every channel
  expect_error([&] { Normalize({1, 2, 3}, {1, 1, 1})(x, g); }, {"Normalize", "2 channels", "3 means"});
  expect_error([&] { Normalize({0}, {1})(zeros({2, 2}, kUInt8), g); }, {"Normalize", "uint8", "ToFloat"});
  expect_error([] { Normalize({0}, {0}); }, {"Normalize", "std", "zero"});
}

TEST(Transforms, RandomCropCoversEveryOffsetAndPadsWithZeros) {
  // x: (1, 3, 3) = 1..9; crop 3x3 with padding 1: the window's top-left is one of 3x3 offsets.
  Tensor x = arange(1, 10).to(kFloat32).view({1, 3, 3});
  RandomCrop crop(3, 3, 1);
  std::set<std::vector<float>> seen;
  for (uint64_t s = 0; s < 200; ++s) {
    Generator g(s);
    Tensor y = crop(x, g);
    ASSERT_EQ(y.sizes(), (Shape{1, 3, 3}));
    seen.insert(y.to_vector<float>());
  }
  EXPECT_EQ(seen.size(), 9u);
  // Offset (0, 0) of the padded image: zero border on top and left, then the image's top-left 2x2.
  EXPECT_EQ(seen.count({0, 0, 0, 0, 1, 2, 0, 4, 5}), 1u);
  // Offset (2, 2): the image's bottom-right 2x2, zero border below and right.
  EXPECT_EQ(seen.count({5, 6, 0, 8, 9, 0, 0, 0, 0}), 1u);
  // Without padding and the full size, the crop is the identity.
  Generator g(1);
  expect_tensor_near(RandomCrop(3, 3)(x, g), values(x), {1, 3, 3});
  // uint8 images crop (and pad with zeros) too.
  Tensor u = tensor(std::vector<double>{7, 7, 7, 7}, {1, 2, 2}, kUInt8);
  Tensor cu = RandomCrop(2, 2, 2)(u, g);
  EXPECT_EQ(cu.dtype(), kUInt8);
  EXPECT_EQ(cu.sizes(), (Shape{1, 2, 2}));
  expect_error([&] { RandomCrop(4, 4)(x, g); }, {"RandomCrop", "4x4", "3x3"});
}

TEST(Transforms, RandomHorizontalFlip) {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}).view({1, 2, 3});
  Generator g(0);
  expect_tensor_near(RandomHorizontalFlip(1.0)(x, g), {3, 2, 1, 6, 5, 4}, {1, 2, 3});
  expect_tensor_near(RandomHorizontalFlip(0.0)(x, g), {1, 2, 3, 4, 5, 6}, {1, 2, 3});
  int flips = 0;
  for (uint64_t s = 0; s < 2000; ++s) {
    Generator gs(s);
    flips += RandomHorizontalFlip(0.3)(x, gs).to_vector<float>()[0] == 3;
  }
  EXPECT_NEAR(flips / 2000.0, 0.3, 0.04);
}

TEST(Transforms, ComposeAppliesInOrder) {
  Generator g(0);
  Compose c({std::make_shared<ToFloat>(), std::make_shared<Normalize>(std::vector<double>{0.5}, std::vector<double>{0.5})});
  expect_tensor_near(c(tensor(std::vector<double>{0, 255}, {1, 2}, kUInt8), g), {-1, 1}, {1, 2});
}

TEST(TransformDataset, RandomnessDependsOnSeedEpochAndIndexOnly) {
  // 16 identical images: any difference between examples comes from the transform's randomness.
  auto base = std::make_shared<TensorDataset>(
      std::vector<Tensor>{arange(16 * 16).to(kFloat32).view({1, 16, 16}).expand({16, 1, 16, 16}).contiguous(), arange(16)});
  auto aug = std::make_shared<Compose>(std::vector<std::shared_ptr<Transform>>{
      std::make_shared<RandomCrop>(12, 12, 2), std::make_shared<RandomHorizontalFlip>(0.5)});
  auto ds = std::make_shared<TransformDataset>(base, aug, 0, 42);
  auto ds_same = std::make_shared<TransformDataset>(base, aug, 0, 42);
  auto ds_other = std::make_shared<TransformDataset>(base, aug, 0, 43);
  // Same (seed, epoch, index): same result, in any order of access.
  std::vector<std::vector<float>> fwd, rev(16);
  for (int64_t i = 0; i < 16; ++i) fwd.push_back(ds->get(i)[0].to_vector<float>());
  for (int64_t i = 15; i >= 0; --i) rev[i] = ds_same->get(i)[0].to_vector<float>();
  EXPECT_EQ(fwd, rev);
  std::set<std::vector<float>> distinct(fwd.begin(), fwd.end());
  EXPECT_GT(distinct.size(), 8u);  // examples differ from each other
  int differ = 0;
  for (int64_t i = 0; i < 16; ++i) differ += ds_other->get(i)[0].to_vector<float>() != fwd[i];
  EXPECT_GT(differ, 8);  // another seed, other crops
  ds->set_epoch(1);
  differ = 0;
  for (int64_t i = 0; i < 16; ++i) differ += ds->get(i)[0].to_vector<float>() != fwd[i];
  EXPECT_GT(differ, 8);  // another epoch, other crops
  EXPECT_EQ(ds->get(3)[1].item<int64_t>(), 3);  // other fields untouched

  // Through a DataLoader: the same batches with 0 and 3 workers, and the loader's epoch reaches the transform.
  auto run = [&](int workers) {
    auto d = std::make_shared<TransformDataset>(base, aug, 0, 42);
    DataLoader loader(d, {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 1});
    std::vector<std::vector<float>> out;
    for (int e = 0; e < 2; ++e)
      for (auto& b : loader) out.push_back(b[0].to_vector<float>());
    EXPECT_EQ(d->epoch(), 1u);
    return out;
  };
  EXPECT_EQ(run(0), run(3));
}

}  // namespace
}  // namespace kiln::test
