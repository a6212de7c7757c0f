// Several validation and test loaders: each validation runs every loader in order, validation_step learns the
// loader's index, limits apply per loader, and each loader's metrics come back under "/dataloader_idx_<k>"
// names, equal to the loss over that loader's examples computed here in float64 from the final weights.
#include <gtest/gtest.h>

#include <utility>

#include "tensor/test_util.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

// Regressor that records which loader and batch each validation and test step saw.
struct TwoLoaderRegressor : Regressor {
  std::vector<std::pair<int64_t, int64_t>> seen;  // (dataloader_idx, batch_idx)
  bool add_idx = true;
  Tensor validation_step(const data::Batch& b, int64_t batch_idx, int64_t dataloader_idx) override {
    seen.emplace_back(dataloader_idx, batch_idx);
    log("val/loss", nn::F::mse_loss(fc(b[0]), b[1]), {.add_dataloader_idx = add_idx});
    return {};
  }
  Tensor test_step(const data::Batch& b, int64_t batch_idx, int64_t dataloader_idx) override {
    seen.emplace_back(dataloader_idx, batch_idx);
    log("test/loss", nn::F::mse_loss(fc(b[0]), b[1]));
    return {};
  }
};

// The mean squared error of the module's fc over every example of `ds`, in float64.
double mse_over(Regressor& m, const data::TensorDataset& ds, int64_t first = 0, int64_t count = -1) {
  const Tensor x = ds.tensors()[0].to(kFloat64), y = ds.tensors()[1].to(kFloat64);
  const std::vector<double> w = m.fc->weight.detach().to(kFloat64).to_vector<double>();
  const double bias = m.fc->bias.detach().to(kFloat64).item<double>();
  const int64_t n = count < 0 ? x.size(0) - first : count;
  double sum = 0;
  for (int64_t i = first; i < first + n; ++i) {
    const std::vector<double> xi = x.select(0, i).to_vector<double>();
    double pred = bias;
    for (size_t j = 0; j < w.size(); ++j) pred += w[j] * xi[j];
    const double d = pred - y.select(0, i).item<double>();
    sum += d * d;
  }
  return sum / static_cast<double>(n);
}

TEST(EvalLoaders, FitValidatesOnEveryLoaderAndNamesItsMetrics) {
  TempDir dir;
  auto train = loader(regression_data(32), 8);
  auto val_a_data = regression_data(16, 9), val_b_data = regression_data(24, 10);
  auto val_a = loader(val_a_data, 8), val_b = loader(val_b_data, 8);  // 2 and 3 batches
  TwoLoaderRegressor m;
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 2;
  o.num_sanity_val_steps = 1;  // one batch of each loader
  trainer::Trainer t(o);
  t.fit(m, *train, {val_a.get(), val_b.get()});
  EXPECT_EQ(t.num_val_batches(), 5);
  // Sanity check (1 + 1), then two validations (2 + 3 each), loader by loader.
  const std::vector<std::pair<int64_t, int64_t>> one_validation = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, 2}};
  std::vector<std::pair<int64_t, int64_t>> want = {{0, 0}, {1, 0}};
  for (int e = 0; e < 2; ++e) want.insert(want.end(), one_validation.begin(), one_validation.end());
  EXPECT_EQ(m.seen, want);
  const auto& metrics = t.callback_metrics();
  ASSERT_TRUE(metrics.count("val/loss/dataloader_idx_0") && metrics.count("val/loss/dataloader_idx_1"));
  EXPECT_FALSE(metrics.count("val/loss"));
  EXPECT_NEAR(metrics.at("val/loss/dataloader_idx_0"), mse_over(m, *val_a_data), 1e-5);
  EXPECT_NEAR(metrics.at("val/loss/dataloader_idx_1"), mse_over(m, *val_b_data), 1e-5);
  EXPECT_NE(metrics.at("val/loss/dataloader_idx_0"), metrics.at("val/loss/dataloader_idx_1"));
}

TEST(EvalLoaders, OneNameOverEveryLoaderAndLimitsPerLoader) {
  TempDir dir;
  auto val_a_data = regression_data(16, 9), val_b_data = regression_data(24, 10);
  auto val_a = loader(val_a_data, 8), val_b = loader(val_b_data, 8);
  TwoLoaderRegressor m;
  m.add_idx = false;
  trainer::TrainerOptions o = quiet(dir.str());
  o.limit_val_batches = 1;  // the first batch of each loader
  trainer::Trainer t(o);
  const auto metrics = t.validate(m, {val_a.get(), val_b.get()});
  EXPECT_EQ(m.seen, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 0}}));
  ASSERT_EQ(metrics.count("val/loss"), 1u);
  // The mean over both first batches (8 examples each, so an equal weight).
  EXPECT_NEAR(metrics.at("val/loss"), (mse_over(m, *val_a_data, 0, 8) + mse_over(m, *val_b_data, 0, 8)) / 2, 1e-5);
}

TEST(EvalLoaders, TestOnSeveralLoadersAndTheLoaderIndexInHooks) {
  TempDir dir;
  auto test_a_data = regression_data(8, 11), test_b_data = regression_data(16, 12);
  auto test_a = loader(test_a_data, 8), test_b = loader(test_b_data, 8);
  struct Recorder : trainer::Callback {
    std::vector<int64_t> loaders;
    void on_test_batch_start(trainer::Trainer& t, trainer::TrainModule&, const data::Batch&, int64_t) override {
      loaders.push_back(t.dataloader_idx());
    }
  };
  auto rec = std::make_shared<Recorder>();
  TwoLoaderRegressor m;
  trainer::TrainerOptions o = quiet(dir.str());
  o.callbacks = {rec};
  trainer::Trainer t(o);
  const auto metrics = t.test(m, {test_a.get(), test_b.get()});
  EXPECT_EQ(rec->loaders, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_NEAR(metrics.at("test/loss/dataloader_idx_0"), mse_over(m, *test_a_data), 1e-5);
  EXPECT_NEAR(metrics.at("test/loss/dataloader_idx_1"), mse_over(m, *test_b_data), 1e-5);

  // One loader: the plain names, as before.
  TwoLoaderRegressor single;
  const auto one = trainer::Trainer(quiet(dir.str())).test(single, *test_a);
  EXPECT_EQ(one.count("test/loss"), 1u);
  EXPECT_EQ(one.count("test/loss/dataloader_idx_0"), 0u);

  expect_error([&] { trainer::Trainer(quiet(dir.str())).test(m, {test_a.get(), nullptr}); }, {"test()", "loader 1", "null"});
  auto train = loader(regression_data(16), 8);
  expect_error([&] { trainer::Trainer(quiet(dir.str())).fit(m, *train, std::vector<data::DataLoader*>{nullptr}); },
               {"fit()", "validation loader 0", "null"});
}

}  // namespace
}  // namespace kiln::test
