// The built-in models and datasets of `kiln train`, without the command line. Parameter counts are written
// out by hand from the architectures in models.h (weights + biases per layer; a BatchNorm has 2 per channel,
// its running statistics are buffers); datasets are checked for the split sizes the config asks for, for
// determinism in data.seed, and, on a CSV written here, for rows that stay whole through the split.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "kiln/kiln.h"
#include "kiln/tools/datasets.h"
#include "kiln/tools/models.h"
#include "kiln/tools/run_config.h"
#include "tensor/test_util.h"
#include "tools/tools_test_util.h"

namespace kiln::tools {
namespace {

using test::expect_error;

RunConfig::Model model_config(const std::string& name) {
  RunConfig::Model m;
  m.name = name;
  return m;
}

// Runs a batch of 2 examples of `input` through the model; returns the output's shape.
Shape output_shape(nn::Module& net, const Shape& input) {
  Shape batch{2};
  batch.insert(batch.end(), input.begin(), input.end());
  NoGradGuard no_grad;
  net.eval();
  return net(randn(batch)).shape();
}

// ---- models ----

TEST(Models, MlpParameterCount) {
  RunConfig::Model c = model_config("mlp");
  c.hidden = {512, 256};
  // 784*512 + 512 = 401,920; 512*256 + 256 = 131,328; 256*10 + 10 = 2,570.
  auto net = make_model(c, {.input_shape = {784}, .num_classes = 10});
  EXPECT_EQ(net->num_parameters(), 535'818);
  EXPECT_EQ(output_shape(*net, {784}), (Shape{2, 10}));
  // Images are flattened first: (1, 28, 28) is the same network.
  EXPECT_EQ(make_model(c, {.input_shape = {1, 28, 28}, .num_classes = 10})->num_parameters(), 535'818);
  // Dropout adds layers, not parameters.
  c.dropout = 0.5;
  EXPECT_EQ(make_model(c, {.input_shape = {784}, .num_classes = 10})->num_parameters(), 535'818);
  // No hidden layer: logistic regression, 8*3 + 3.
  c.hidden = {};
  auto linear = make_model(c, {.input_shape = {8}, .num_classes = 3});
  EXPECT_EQ(linear->num_parameters(), 27);
  EXPECT_EQ(output_shape(*linear, {8}), (Shape{2, 3}));
}

TEST(Models, CnnParameterCount) {
  RunConfig::Model c = model_config("cnn");
  c.channels = {32, 64};
  c.fc = 128;
  // conv 1->32: 1*32*9 + 32 = 320; conv 32->64: 32*64*9 + 64 = 18,496; 28 -> 14 -> 7, so the flattened
  // 64*7*7 = 3,136 -> 128: 3,136*128 + 128 = 401,536; 128 -> 10: 1,290.
  auto net = make_model(c, {.input_shape = {1, 28, 28}, .num_classes = 10});
  EXPECT_EQ(net->num_parameters(), 421'642);
  EXPECT_EQ(output_shape(*net, {1, 28, 28}), (Shape{2, 10}));
  // An odd size floors at each pool: 3 x 15 x 15 -> 7 -> 3, so 64*3*3 = 576 -> 128.
  // 3*32*9 + 32 = 896; 18,496; 576*128 + 128 = 73,856; 128*5 + 5 = 645.
  auto odd = make_model(c, {.input_shape = {3, 15, 15}, .num_classes = 5});
  EXPECT_EQ(odd->num_parameters(), 896 + 18'496 + 73'856 + 645);
  EXPECT_EQ(output_shape(*odd, {3, 15, 15}), (Shape{2, 5}));
}

TEST(Models, ResNetSmallParameterCount) {
  const RunConfig::Model c = model_config("resnet-small");
  // Stem: conv 3->16 (no bias) 432, bn 32.
  // Block 16->16, stride 1: two 16->16 convs 2*2,304, two bns 2*32; identity shortcut: 4,672.
  // Block 16->32, stride 2: conv 16->32 4,608, conv 32->32 9,216, bns 2*64, shortcut 1x1 16->32 512 + bn 64:
  //   14,528.
  // Block 32->64, stride 2: conv 32->64 18,432, conv 64->64 36,864, bns 2*128, shortcut 2,048 + bn 128: 57,728.
  // Linear 64 -> 10: 650.
  auto rgb = make_model(c, {.input_shape = {3, 32, 32}, .num_classes = 10});
  EXPECT_EQ(rgb->num_parameters(), 432 + 32 + 4'672 + 14'528 + 57'728 + 650);
  EXPECT_EQ(rgb->num_parameters(), 78'042);
  EXPECT_EQ(output_shape(*rgb, {3, 32, 32}), (Shape{2, 10}));
  // One input channel: the stem conv is 1*16*9 = 144 instead of 432; global pooling makes 28x28 no different.
  auto gray = make_model(c, {.input_shape = {1, 28, 28}, .num_classes = 10});
  EXPECT_EQ(gray->num_parameters(), 77'754);
  EXPECT_EQ(output_shape(*gray, {1, 28, 28}), (Shape{2, 10}));
}

TEST(Models, ImagesTooSmallOrMissingAreClearErrors) {
  RunConfig::Model c = model_config("cnn");
  c.channels = {32, 64, 128};
  // 5 -> 2 -> 1: the third stage has nothing left to pool.
  expect_error([&] { make_model(c, {.input_shape = {1, 5, 5}, .num_classes = 10}); },
               {"model 'cnn'", "3 pooling stages", "(1, 5, 5)", "model.channels"});
  // 8 -> 4 -> 2 -> 1 is still fine.
  EXPECT_EQ(output_shape(*make_model(c, {.input_shape = {1, 8, 8}, .num_classes = 10}), {1, 8, 8}), (Shape{2, 10}));
  expect_error([&] { make_model(c, {.input_shape = {8}, .num_classes = 10}); }, {"model 'cnn'", "(C, H, W)", "mlp"});
  expect_error([&] { make_model(model_config("resnet-small"), {.input_shape = {8}, .num_classes = 10}); },
               {"resnet-small", "(C, H, W)"});
  expect_error([&] { make_model(model_config("mlp"), {.input_shape = {8}, .num_classes = 1}); }, {"1 classes", "2"});
}

// ---- datasets ----

RunConfig::Data synthetic_config(int64_t seed) {
  RunConfig::Data d;
  d.name = "synthetic";
  d.num_samples = 600;
  d.num_features = 8;
  d.num_classes = 4;
  d.val_size = 100;
  d.seed = seed;
  return d;
}

const Tensor& features(const std::shared_ptr<data::Dataset>& ds) {
  return std::dynamic_pointer_cast<data::TensorDataset>(ds)->tensors().at(0);
}
const Tensor& labels(const std::shared_ptr<data::Dataset>& ds) {
  return std::dynamic_pointer_cast<data::TensorDataset>(ds)->tensors().at(1);
}

bool identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>() == 0;
}

TEST(Datasets, SyntheticSplitsHaveTheConfiguredSizes) {
  const DataSplits d = make_data(synthetic_config(0));
  // 100 held out for test, 100 for validation, the remaining 400 to train.
  EXPECT_EQ(d.train->size(), 400);
  ASSERT_TRUE(d.val != nullptr);
  EXPECT_EQ(d.val->size(), 100);
  EXPECT_EQ(d.test->size(), 100);
  EXPECT_EQ(d.info.input_shape, (Shape{8}));
  EXPECT_EQ(d.info.num_classes, 4);
  EXPECT_EQ(features(d.train).shape(), (Shape{400, 8}));
  // Labels go round the classes: 150 of each over the three splits.
  for (int64_t k = 0; k < 4; ++k) {
    int64_t n = 0;
    for (const auto& ds : {d.train, d.val, d.test}) n += (labels(ds) == k).to(kInt64).sum().item<int64_t>();
    EXPECT_EQ(n, 150) << "class " << k;
  }
  // Standardized by the training part: each training column has mean 0 and (population) std 1.
  const Tensor x = features(d.train).to(kFloat64);
  const Tensor mean = x.mean({0});
  const Tensor var = (x - mean).pow(2).mean({0});
  for (int64_t f = 0; f < 8; ++f) {
    EXPECT_NEAR(mean[f].item<double>(), 0.0, 1e-5) << "feature " << f;
    EXPECT_NEAR(var[f].item<double>(), 1.0, 1e-4) << "feature " << f;
  }
}

TEST(Datasets, SyntheticSplitsAreDisjoint) {
  RunConfig::Data c = synthetic_config(0);
  c.normalize = false;
  const DataSplits d = make_data(c);
  // No example of one split is an example of another: every pairwise L1 distance is > 0.
  auto min_distance = [](const Tensor& a, const Tensor& b) {  // a: (n, F), b: (m, F)
    return (a.unsqueeze(1) - b.unsqueeze(0)).abs().sum({2}).min().item<double>();
  };
  EXPECT_GT(min_distance(features(d.test), features(d.train)), 0);
  EXPECT_GT(min_distance(features(d.test), features(d.val)), 0);
  EXPECT_GT(min_distance(features(d.val), features(d.train)), 0);
}

TEST(Datasets, SyntheticIsTheSameForTheSameSeed) {
  const DataSplits a = make_data(synthetic_config(3)), b = make_data(synthetic_config(3)),
                   other = make_data(synthetic_config(4));
  EXPECT_TRUE(identical(features(a.train), features(b.train)));
  EXPECT_TRUE(identical(labels(a.train), labels(b.train)));
  EXPECT_TRUE(identical(features(a.val), features(b.val)));
  EXPECT_TRUE(identical(features(a.test), features(b.test)));
  EXPECT_TRUE(identical(labels(a.test), labels(b.test)));
  EXPECT_FALSE(identical(features(a.train), features(other.train)));
  EXPECT_FALSE(identical(features(a.test), features(other.test)));
}

TEST(Datasets, SyntheticWithoutValidation) {
  RunConfig::Data c = synthetic_config(0);
  c.val_size = 0;
  const DataSplits d = make_data(c);
  EXPECT_EQ(d.val, nullptr);
  EXPECT_EQ(d.train->size() + d.test->size(), 600);
}

// MNIST-style images are standardized over all their pixels: value / 255, then minus the training part's mean
// and over its (population) std.
TEST(Datasets, MnistStyleImagesAreStandardizedOverAllPixels) {
  testing::TempDir dir;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  auto write = [&](const std::string& stem, int64_t n) {
    std::vector<uint8_t> px(static_cast<size_t>(n * 784)), lab(static_cast<size_t>(n));
    for (auto& v : px) v = static_cast<uint8_t>(byte(rng) / 4 * (byte(rng) % 2));  // dark, half zeros
    for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<uint8_t>(i % 10);
    Tensor images = empty({n, 28, 28}, kUInt8), labels = empty({n}, kUInt8);
    std::copy(px.begin(), px.end(), images.data_ptr<uint8_t>());
    std::copy(lab.begin(), lab.end(), labels.data_ptr<uint8_t>());
    data::write_idx(dir / (stem + "-images-idx3-ubyte"), images);
    data::write_idx(dir / (stem + "-labels-idx1-ubyte"), labels);
    return images;
  };
  const Tensor train_px = write("train", 300);
  const Tensor test_px = write("t10k", 40);
  RunConfig::Data c;
  c.name = "mnist";
  c.path = dir.path().string();
  c.val_size = 50;
  const DataSplits d = make_data(c);
  ASSERT_EQ(features(d.train).shape(), (Shape{250, 1, 28, 28}));
  // Kept as read (uint8, a quarter of float32's size); DataSplits::inputs makes the model's input of them.
  EXPECT_EQ(features(d.train).dtype(), kUInt8);
  // The training part, standardized over all its pixels: mean 0, population std 1.
  const Tensor x = d.inputs(features(d.train)).to(kFloat64);
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 1e-5);
  EXPECT_NEAR((x * x).mean().item<double>(), 1.0, 1e-4);
  // The test images, mapped by that same affine map: (raw / 255 - mean) / std with one mean and std for every
  // pixel (fitted on two pixels here, then checked on all), which sends a raw 0 where the training part's 0s
  // went (its smallest value).
  const std::vector<double> raw = test_px.to(kFloat64).reshape({-1}).to_vector<double>();
  const std::vector<double> got = d.inputs(features(d.test)).to(kFloat64).reshape({-1}).to_vector<double>();
  size_t a = 0, b = 1;
  while (raw[b] == raw[a]) ++b;
  const double stdev = (raw[a] - raw[b]) / 255.0 / (got[a] - got[b]), mean = raw[a] / 255.0 - got[a] * stdev;
  for (size_t i = 0; i < raw.size(); ++i) ASSERT_NEAR(got[i], (raw[i] / 255.0 - mean) / stdev, 1e-5) << i;
  EXPECT_NEAR(x.min().item<double>(), -mean / stdev, 1e-5);
  // A loader with the splits' collate gives those inputs, batch by batch.
  data::DataLoader loader(d.test, data::DataLoaderOptions{.batch_size = 16, .collate = d.collate()});
  int64_t at = 0;
  for (const data::Batch& batch : loader) {
    EXPECT_EQ(batch[0].dtype(), kFloat32);
    const Tensor want = d.inputs(features(d.test).narrow(0, at, batch[0].size(0)));
    EXPECT_TRUE(identical(batch[0], want)) << "batch at " << at;
    at += batch[0].size(0);
  }
  EXPECT_EQ(at, 40);
}

class CsvData : public ::testing::Test {
 protected:
  // 30 rows of x1 = i, x2 = 2i, label = i % 3 (the label column `label_name`, in the middle); `bad` replaces
  // row 7's label.
  std::string write(const std::string& label_name = "label", const std::string& bad = "") {
    const std::string path = dir_ / "data.csv";
    std::ofstream out(path);
    out << "x1," << label_name << ",x2\n";
    for (int i = 0; i < 30; ++i) {
      out << i << "," << (i == 7 && !bad.empty() ? bad : std::to_string(i % 3)) << "," << 2 * i << "\n";
    }
    return path;
  }
  RunConfig::Data config(const std::string& path) {
    RunConfig::Data d;
    d.name = "csv";
    d.path = path;
    d.val_size = 5;
    d.normalize = false;
    return d;
  }
  testing::TempDir dir_;
};

TEST_F(CsvData, SplitsKeepEachRowWhole) {
  const DataSplits d = make_data(config(write()));
  EXPECT_EQ(d.train->size(), 20);
  EXPECT_EQ(d.val->size(), 5);
  EXPECT_EQ(d.test->size(), 5);
  EXPECT_EQ(d.info.input_shape, (Shape{2}));
  EXPECT_EQ(d.info.num_classes, 3);
  // Every example is some row i of the file: (i, 2i) with label i % 3, and each row is used once.
  std::vector<int> seen(30, 0);
  for (const auto& ds : {d.train, d.val, d.test}) {
    const Tensor& x = features(ds);
    const Tensor& y = labels(ds);
    for (int64_t r = 0; r < x.size(0); ++r) {
      const double x1 = x[r][0].item<double>(), x2 = x[r][1].item<double>();
      const auto i = static_cast<int64_t>(x1);
      ASSERT_TRUE(i >= 0 && i < 30) << x1;
      EXPECT_EQ(x2, 2.0 * x1);
      EXPECT_EQ(y[r].item<int64_t>(), i % 3);
      ++seen[static_cast<size_t>(i)];
    }
  }
  EXPECT_EQ(seen, std::vector<int>(30, 1));
}

TEST_F(CsvData, LabelColumnByName) {
  RunConfig::Data c = config(write("class"));
  c.label_column = "class";
  const DataSplits d = make_data(c);
  EXPECT_EQ(d.info.input_shape, (Shape{2}));
  EXPECT_EQ(d.info.num_classes, 3);
}

TEST_F(CsvData, BadLabelsAreClearErrorsNamingTheFile) {
  const std::string fraction = write("label", "1.5");
  expect_error([&] { make_data(config(fraction)); }, {fraction, "not a whole number"});
  const std::string negative = write("label", "-1");
  expect_error([&] { make_data(config(negative)); }, {negative, "negative"});
  RunConfig::Data c = config(write());
  c.label_column = "target";
  expect_error([&] { make_data(c); }, {"target"});
  const std::string missing = dir_ / "missing.csv";
  expect_error([&] { make_data(config(missing)); }, {missing});
  c = config(write());
  c.val_size = 15;  // 15 for test and 15 for validation leaves nothing to train on
  expect_error([&] { make_data(c); }, {"data.val_size = 15", "30 examples"});
}

}  // namespace
}  // namespace kiln::tools
