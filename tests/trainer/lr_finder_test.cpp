// The learning-rate range test (trainer::lr_find). The oracle for a run is a plain SGD loop written here, with
// the rates of the range and the smoothing recurrence in float64; the suggestion rule is checked on curves
// whose steepest point is known.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/trainer/lr_finder.h"
#include "tensor/test_util.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

// Uneven spacing: exact derivatives of a quadratic inside, the end intervals' secant slopes at the ends.
TEST(LRFinder, GradientOnUnevenPointsIsExactForQuadratics) {
  const std::vector<double> x{0.0, 0.1, 0.35, 0.4, 1.0, 1.7};
  std::vector<double> y;
  for (double v : x) y.push_back(3 * v * v - 2 * v + 1);
  const std::vector<double> d = trainer::gradient_uneven(y, x);
  for (size_t i = 1; i + 1 < x.size(); ++i) EXPECT_NEAR(d[i], 6 * x[i] - 2, 1e-12) << i;
  EXPECT_NEAR(d.front(), 3 * (x[0] + x[1]) - 2, 1e-12);  // a quadratic's secant slope
  EXPECT_NEAR(d.back(), 3 * (x[4] + x[5]) - 2, 1e-12);
  expect_error([] { trainer::gradient_uneven({1.0}, {0.0}); }, {"at least 2 points"});
}

// A loss that falls fastest against log(lr) at lr = 0.1 (exponential mode), and one that falls fastest
// against lr there (linear): the suggestion is the grid point there or next to it; the skipped ends and
// non-finite losses are left out; too few points give no suggestion.
TEST(LRFinder, SuggestionIsTheSteepestDescentAgainstTheRate) {
  trainer::LRFinderResult r;
  const int n = 60;
  for (int i = 0; i < n; ++i) {
    const double lr = 1e-4 * std::pow(1e4, i / (n - 1.0));
    r.lrs.push_back(lr);
    r.losses.push_back(2 - std::tanh(2 * std::log10(lr / 0.1)));
  }
  const auto s = r.suggestion();
  ASSERT_TRUE(s.has_value());
  const double step = std::pow(1e4, 1.0 / (n - 1));  // one grid point's ratio
  EXPECT_LE(std::abs(std::log(*s / 0.1)), std::log(step)) << *s;

  // The loss falling faster still near the start does not count inside skip_begin, and counts outside it.
  trainer::LRFinderResult early = r;
  early.losses[3] -= 1e3;
  EXPECT_EQ(early.suggestion(), s);
  EXPECT_LE(*early.suggestion_index(0, 1), 3u);
  // A NaN loss is skipped, not chosen and not poisoning its neighbours' differences.
  trainer::LRFinderResult nan = r;
  nan.losses[*r.suggestion_index()] = std::numeric_limits<double>::quiet_NaN();
  ASSERT_TRUE(nan.suggestion().has_value());
  EXPECT_TRUE(std::isfinite(*nan.suggestion()));
  EXPECT_NE(nan.suggestion_index(), r.suggestion_index());
  // Linear mode: against lr itself.
  trainer::LRFinderResult linear;
  linear.exponential = false;
  for (int i = 0; i < n; ++i) {
    const double lr = 0.3 * i / (n - 1.0);
    linear.lrs.push_back(lr);
    linear.losses.push_back(2 - std::tanh((lr - 0.1) / 0.05));
  }
  ASSERT_TRUE(linear.suggestion().has_value());
  EXPECT_LE(std::abs(*linear.suggestion() - 0.1), 0.3 / (n - 1.0)) << *linear.suggestion();
  // Fewer than 2 points after the skips.
  trainer::LRFinderResult few;
  few.lrs = {1e-3, 1e-2, 1e-1};
  few.losses = {1.0, 0.9, 0.2};
  EXPECT_FALSE(few.suggestion().has_value());
  EXPECT_EQ(few.suggestion_index(0, 0), 2u);  // per decade: -0.1, -0.4, -0.7
  few.exponential = false;
  EXPECT_EQ(few.suggestion_index(0, 0), 0u);  // per unit of rate: -11.1, -10.8, -7.8
}

// The run, against a hand-written SGD loop on the same batches at the range's rates, with the smoothing in
// float64: the same rates and losses. The module's weights and the generator's state come back unchanged.
TEST(LRFinder, RecordsTheRangeAsAPlainSgdLoopAndRestoresTheModule) {
  TempDir dir;
  for (const std::string mode : {"exponential", "linear"}) {
    SCOPED_TRACE(mode);
    manual_seed(21);
    Regressor m;
    m.lr = 123;  // overridden at every step
    const auto before = weights_of(m);
    auto train = loader(regression_data(32), 4);  // 8 batches an epoch: 20 steps run 3 epochs
    trainer::LRFinderOptions f{.min_lr = 1e-4, .max_lr = 0.05, .num_training = 20, .mode = mode};
    const uint64_t offset = default_generator().offset();
    const trainer::LRFinderResult r = trainer::lr_find(m, *train, quiet(dir.str()), f);
    EXPECT_EQ(weights_of(m), before);
    EXPECT_EQ(default_generator().offset(), offset);
    ASSERT_EQ(r.lrs.size(), 20u);

    manual_seed(21);
    Regressor ref;
    optim::SGD sgd(ref.parameters(), {.lr = 1});
    auto batches = loader(regression_data(32), 4);
    double avg = 0;
    int i = 0;
    for (int epoch = 0; i < 20; ++epoch) {
      for (const data::Batch& b : *batches) {
        if (i == 20) break;
        const double t = i / 19.0;
        const double lr = mode == "linear" ? 1e-4 + t * (0.05 - 1e-4) : 1e-4 * std::pow(0.05 / 1e-4, t);
        sgd.param_groups()[0].set_lr(lr);
        sgd.zero_grad();
        Tensor loss = nn::F::mse_loss(ref.fc(b[0]), b[1]);
        loss.backward();
        sgd.step();
        avg = 0.98 * avg + 0.02 * loss.item<double>();
        EXPECT_NEAR(r.lrs[static_cast<size_t>(i)], lr, 1e-12 * lr) << "step " << i;
        const double smoothed = avg / (1 - std::pow(0.98, i + 1));
        EXPECT_NEAR(r.losses[static_cast<size_t>(i)], smoothed, 1e-5 * smoothed) << "step " << i;
        ++i;
      }
    }
  }
}

// Rates far past what SGD on this problem stands: the loss diverges and the test stops there, well before its
// last step; the suggestion comes from before the divergence.
TEST(LRFinder, StopsOnceTheLossDiverges) {
  TempDir dir;
  manual_seed(22);
  Regressor m;
  auto train = loader(regression_data(32), 4);
  const trainer::LRFinderResult r =
      trainer::lr_find(m, *train, quiet(dir.str()), {.min_lr = 1e-4, .max_lr = 100, .num_training = 200});
  ASSERT_LT(r.lrs.size(), 200u);
  ASSERT_GT(r.lrs.size(), 20u);
  double best = r.losses[0];
  for (size_t i = 0; i + 1 < r.losses.size(); ++i) best = std::min(best, r.losses[i]);
  EXPECT_GT(r.losses.back(), 4 * best);  // the step that stopped it
  ASSERT_TRUE(r.suggestion().has_value());
  EXPECT_LT(*r.suggestion(), r.lrs.back());
}

// A loss below zero (a likelihood) does not look diverged at its second step; a schedule that waits for a
// validation metric is dropped rather than failing; an epoch without a step is an error, not an endless loop.
TEST(LRFinder, NegativeLossesPlateauSchedulersAndStepLessEpochs) {
  TempDir dir;
  Regressor shifted;
  auto train = loader(regression_data(32), 4);
  struct Negative : Regressor {
    Tensor training_step(const data::Batch& b, int64_t) override { return nn::F::mse_loss(fc(b[0]), b[1]) - 100.0; }
  } negative;
  const auto r = trainer::lr_find(negative, *train, quiet(dir.str()), {.min_lr = 1e-5, .max_lr = 1e-3, .num_training = 15});
  EXPECT_EQ(r.lrs.size(), 15u);

  shifted.make_optim = [](Regressor& m) {
    auto opt = std::make_shared<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.1});
    trainer::OptimizerSetup setup(opt);
    setup.schedulers.push_back(
        {.plateau = std::make_shared<optim::ReduceLROnPlateau>(*opt), .monitor = "val/loss"});
    return setup;
  };
  EXPECT_EQ(trainer::lr_find(shifted, *train, quiet(dir.str()), {.num_training = 12}).lrs.size(), 12u);

  // The run's own validation cadence does not apply: a count longer than this 8-batch loader is no error.
  trainer::TrainerOptions cadence = quiet(dir.str());
  cadence.val_check_interval = 50;
  EXPECT_EQ(trainer::lr_find(shifted, *train, cadence, {.num_training = 12}).lrs.size(), 12u);

  struct Silent : Regressor {
    Tensor training_step(const data::Batch&, int64_t) override { return {}; }
  } silent;
  expect_error([&] { trainer::lr_find(silent, *train, quiet(dir.str()), {}); }, {"took no optimizer step"});
}

TEST(LRFinder, BadOptionsAreErrors) {
  TempDir dir;
  Regressor m;
  auto train = loader(regression_data(8), 4);
  expect_error([&] { trainer::lr_find(m, *train, quiet(dir.str()), {.min_lr = 1, .max_lr = 0.1}); },
               {"expected 0 < min_lr < max_lr"});
  expect_error([&] { trainer::lr_find(m, *train, quiet(dir.str()), {.num_training = 1}); }, {"at least 2 steps"});
  expect_error([&] { trainer::lr_find(m, *train, quiet(dir.str()), {.mode = "cosine"}); }, {"mode 'cosine'"});
  trainer::TrainerOptions ddp = quiet(dir.str());
  ddp.strategy = "ddp";
  expect_error([&] { trainer::lr_find(m, *train, ddp, {}); }, {"runs in one process"});
}

}  // namespace
}  // namespace kiln::test
