// LR schedulers against their closed forms over many steps, MultiplicativeLR, CosineAnnealingWarmRestarts and
// ChainedScheduler against PyTorch's recursive forms, and OneCycleLR / SequentialLR / ReduceLROnPlateau at steps
// worked out by hand from the formulas.
#include <cmath>
#include <numbers>

#include "optim/optim_test_util.h"

namespace kiln::test {
namespace {

constexpr double kPi = std::numbers::pi;

// An SGD over two groups with base lrs 1.0 and 0.1.
struct Fixture {
  Tensor p = make_param(initial_values()), q = make_param(initial_values());
  optim::SGD opt{{p}, {.lr = 1.0, .momentum = 0.9}};
  Fixture() { opt.add_param_group({q}, optim::SGDOptions{.lr = 0.1}); }
};

// Checks the groups' lr after construction (epoch 0) and after each of `steps` steps against f(epoch, base).
void expect_schedule(optim::LRScheduler& s, optim::Optimizer& opt, const std::function<double(int, double)>& f,
                     int steps, const std::string& what) {
  const double bases[] = {1.0, 0.1};
  for (int e = 0; e <= steps; ++e) {
    if (e > 0) s.step();
    ASSERT_EQ(s.last_epoch(), e);
    for (size_t g = 0; g < 2; ++g) {
      double want = f(e, bases[g]);
      EXPECT_NEAR(opt.param_groups()[g].lr(), want, 1e-15 + 1e-13 * std::fabs(want)) << what << " epoch " << e << " group " << g;
      EXPECT_EQ(s.get_last_lr()[g], opt.param_groups()[g].lr());
    }
  }
}

TEST(LRScheduler, StepLR) {
  Fixture f;
  optim::StepLR s(f.opt, 3, 0.5);
  expect_schedule(s, f.opt, [](int e, double b) { return b * std::pow(0.5, e / 3); }, 40, "StepLR");
  EXPECT_EQ(f.opt.param_groups()[0].get("initial_lr"), 1.0);
}

TEST(LRScheduler, MultiStepLR) {
  Fixture f;
  optim::MultiStepLR s(f.opt, {10, 3, 7, 7}, 0.1);  // unsorted, 7 twice: gamma^2 there
  auto lr = [](int e, double b) { return b * std::pow(0.1, (e >= 3) + 2 * (e >= 7) + (e >= 10)); };
  expect_schedule(s, f.opt, lr, 20, "MultiStepLR");
}

TEST(LRScheduler, ExponentialLR) {
  Fixture f;
  optim::ExponentialLR s(f.opt, 0.9);
  expect_schedule(s, f.opt, [](int e, double b) { return b * std::pow(0.9, e); }, 50, "ExponentialLR");
}

TEST(LRScheduler, CosineAnnealingLR) {
  Fixture f;
  optim::CosineAnnealingLR s(f.opt, 10, 0.001);
  auto lr = [](int e, double b) { return 0.001 + (b - 0.001) * (1 + std::cos(kPi * e / 10)) / 2; };
  expect_schedule(s, f.opt, lr, 25, "CosineAnnealingLR");
  Fixture g;
  optim::CosineAnnealingLR s2(g.opt, 4);
  s2.step(), s2.step();
  EXPECT_NEAR(g.opt.param_groups()[0].lr(), 0.5, 1e-15);  // halfway
  s2.step(), s2.step();
  EXPECT_NEAR(g.opt.param_groups()[0].lr(), 0.0, 1e-15);
}

TEST(LRScheduler, LinearLR) {
  Fixture f;
  optim::LinearLR s(f.opt, 0.25, 1.0, 6);
  auto lr = [](int e, double b) { return b * (0.25 + 0.75 * std::min(e, 6) / 6.0); };
  expect_schedule(s, f.opt, lr, 15, "LinearLR");
}

TEST(LRScheduler, ConstantPolynomialAndLambda) {
  Fixture f;
  optim::ConstantLR c(f.opt, 0.25, 3);
  expect_schedule(c, f.opt, [](int e, double b) { return e < 3 ? 0.25 * b : b; }, 8, "ConstantLR");
  Fixture g;
  optim::PolynomialLR poly(g.opt, 4, 2.0);
  const double want[] = {1.0, 0.5625, 0.25, 0.0625, 0.0, 0.0, 0.0};  // (1 - e/4)^2, by hand
  expect_schedule(poly, g.opt, [&](int e, double b) { return b * want[e]; }, 6, "PolynomialLR");
  Fixture h;
  optim::LambdaLR lam(h.opt, std::vector<optim::LambdaLR::Lambda>{[](int64_t e) { return 1.0 / (e + 1); },
                                                                   [](int64_t e) { return e % 2 ? 2.0 : 1.0; }});
  for (int e = 1; e <= 5; ++e) lam.step();
  EXPECT_NEAR(h.opt.param_groups()[0].lr(), 1.0 / 6, 1e-15);
  EXPECT_NEAR(h.opt.param_groups()[1].lr(), 0.2, 1e-15);  // epoch 5 is odd: 0.1 * 2
  Fixture k;
  optim::LambdaLR one(k.opt, [](int64_t e) { return std::pow(0.5, static_cast<double>(e)); });
  one.step();
  EXPECT_EQ(k.opt.param_groups()[0].lr(), 0.5);
  EXPECT_EQ(k.opt.param_groups()[1].lr(), 0.05);
  expect_error([&] { optim::LambdaLR(k.opt, std::vector<optim::LambdaLR::Lambda>{[](int64_t) { return 1.0; }}); },
               {"LambdaLR", "1 functions for 2 parameter groups"});
}

// Against PyTorch's recursive form: from epoch 1 on each step multiplies the lr by lambda(epoch); resumed from a
// state dict, the products are rebuilt from the functions.
TEST(LRScheduler, MultiplicativeLRMatchesTheRecursiveForm) {
  Fixture f;
  const optim::MultiplicativeLR::Lambda decay = [](int64_t e) { return e % 3 == 0 ? 0.5 : 0.95; };
  optim::MultiplicativeLR s(f.opt, decay);
  std::vector<double> recursive[2] = {{1.0}, {0.1}};  // each group's lr, one step after another
  for (auto& lrs : recursive)
    for (int e = 1; e <= 30; ++e) lrs.push_back(lrs.back() * decay(e));
  expect_schedule(s, f.opt, [&](int e, double b) { return recursive[b == 1.0 ? 0 : 1][static_cast<size_t>(e)]; }, 30,
                  "MultiplicativeLR");
  Fixture g;
  optim::MultiplicativeLR two(g.opt, std::vector<optim::MultiplicativeLR::Lambda>{[](int64_t) { return 0.9; },
                                                                                  [](int64_t) { return 1.1; }});
  for (int e = 1; e <= 4; ++e) two.step();
  EXPECT_NEAR(g.opt.param_groups()[0].lr(), std::pow(0.9, 4), 1e-15);
  EXPECT_NEAR(g.opt.param_groups()[1].lr(), 0.1 * std::pow(1.1, 4), 1e-15);
  Fixture h;
  optim::MultiplicativeLR resumed(h.opt, decay);
  resumed.load_state_dict(s.state_dict());
  resumed.step();
  s.step();
  EXPECT_NEAR(h.opt.param_groups()[0].lr(), f.opt.param_groups()[0].lr(), 1e-15);
  expect_error([&] { optim::MultiplicativeLR(h.opt, std::vector<optim::MultiplicativeLR::Lambda>{decay}); },
               {"MultiplicativeLR", "1 functions for 2 parameter groups"});
}

// Against PyTorch's recursive form of the schedule: T_cur counts up by one each epoch and, on reaching T_i,
// wraps to 0 while T_i grows T_mult times; the scheduler computes the same from the epoch alone.
TEST(LRScheduler, CosineAnnealingWarmRestartsMatchesTheRecursiveForm) {
  for (int64_t T_mult : {1, 2, 3}) {
    Fixture f;
    optim::CosineAnnealingWarmRestarts s(f.opt, 5, T_mult, 0.01);
    int64_t t_cur = 0, t_i = 5;
    for (int e = 0; e <= 400; ++e) {
      if (e > 0) {
        s.step();
        if (++t_cur >= t_i) t_cur -= t_i, t_i *= T_mult;
      }
      for (size_t g = 0; g < 2; ++g) {
        const double base = g == 0 ? 1.0 : 0.1;
        const double want = 0.01 + (base - 0.01) * (1 + std::cos(kPi * static_cast<double>(t_cur) / t_i)) / 2;
        ASSERT_NEAR(f.opt.param_groups()[g].lr(), want, 1e-14) << "T_mult " << T_mult << " epoch " << e;
      }
    }
  }
  Fixture g;
  optim::CosineAnnealingWarmRestarts s(g.opt, 2, 2);
  std::vector<double> lrs;
  for (int e = 0; e < 8; ++e, s.step()) lrs.push_back(g.opt.param_groups()[0].lr());
  // periods of 2 and 4 epochs: a restart to 1.0 at epochs 2 and 6
  const std::vector<double> want = {1.0, 0.5, 1.0, (1 + std::cos(kPi / 4)) / 2, 0.5, (1 + std::cos(3 * kPi / 4)) / 2,
                                    1.0, (1 + std::cos(kPi / 8)) / 2};
  for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(lrs[e], want[e], 1e-15) << "epoch " << e;
  expect_error([&] { optim::CosineAnnealingWarmRestarts(g.opt, 0); }, {"CosineAnnealingWarmRestarts", "T_0"});
}

// Steps worked out by hand from the triangle: base 0.1, max 1.0, 2 steps up and 3 down (a cycle of 5).
TEST(LRScheduler, CyclicLRModesAndMomentum) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 0.5, .momentum = 0.5});
  optim::CyclicLR tri(opt, {.base_lr = 0.1, .max_lr = 1.0, .step_size_up = 2, .step_size_down = 3});
  const double lrs[] = {0.1, 0.55, 1.0, 0.7, 0.4, 0.1, 0.55, 1.0};
  const double moms[] = {0.9, 0.85, 0.8, 0.9 - 0.1 * 2 / 3, 0.9 - 0.1 / 3, 0.9, 0.85, 0.8};
  for (int t = 0; t < 8; ++t) {
    if (t > 0) tri.step();
    EXPECT_NEAR(opt.param_groups()[0].lr(), lrs[t], 1e-15) << "triangular step " << t;
    EXPECT_NEAR(opt.param_groups()[0].get("momentum"), moms[t], 1e-15) << "step " << t;
  }
  Tensor q = make_param(initial_values());
  optim::Adam adam({q}, {.lr = 0.5});
  optim::CyclicLR tri2(adam, {.base_lr = 0.1, .max_lr = 1.0, .step_size_up = 2, .step_size_down = 3,
                              .mode = "triangular2"});
  for (int t = 1; t <= 7; ++t) tri2.step();
  EXPECT_NEAR(adam.param_groups()[0].lr(), 0.55, 1e-15);  // the second cycle's peak, at half height
  EXPECT_NEAR(adam.param_groups()[0].get("beta1"), 0.85, 1e-15);
  Tensor r = make_param(initial_values());
  optim::SGD sgd({r}, {.lr = 0.5});
  optim::CyclicLR exp_range(sgd, {.base_lr = 0.1, .max_lr = 1.0, .step_size_up = 2, .mode = "exp_range",
                                  .gamma = 0.9, .cycle_momentum = false});
  exp_range.step(), exp_range.step();
  EXPECT_NEAR(sgd.param_groups()[0].lr(), 0.1 + 0.9 * 0.81, 1e-15);  // peak at step 2, scaled by 0.9^2
  exp_range.step();
  EXPECT_NEAR(sgd.param_groups()[0].lr(), 0.1 + 0.9 * 0.5 * std::pow(0.9, 3), 1e-15);  // down 1 of 2 steps
  EXPECT_EQ(sgd.param_groups()[0].get("momentum"), 0.0);
  optim::Adagrad adagrad({r});
  expect_error([&] { optim::CyclicLR(adagrad, {.base_lr = 0.1, .max_lr = 1.0}); },
               {"CyclicLR", "cycle_momentum", "Adagrad"});
  expect_error([&] { optim::CyclicLR(sgd, {.max_lr = 1.0, .mode = "triangle", .cycle_momentum = false}); },
               {"CyclicLR", "mode", "triangle"});
}

TEST(LRScheduler, OneCycleTwoPhaseAtHandPickedSteps) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 0.123, .momentum = 0.9});
  optim::OneCycleLR s(opt, {.max_lr = 1.0, .total_steps = 10});
  // initial 0.04, max 1, min 4e-6; phase 1 ends at step 2, phase 2 at step 9.
  const double min_lr = 4e-6;
  std::map<int, std::pair<double, double>> want = {  // step -> (lr, momentum)
      {0, {0.04, 0.95}},
      {1, {0.52, 0.90}},
      {2, {1.0, 0.85}},
      {3, {min_lr + (1 - min_lr) / 2 * (std::cos(kPi / 7) + 1), 0.95 + (0.85 - 0.95) / 2 * (std::cos(kPi / 7) + 1)}},
      {9, {min_lr, 0.95}},
      {10, {min_lr + (1 - min_lr) / 2 * (std::cos(8 * kPi / 7) + 1), 0.95 + (0.85 - 0.95) / 2 * (std::cos(8 * kPi / 7) + 1)}},
  };
  for (int e = 0; e <= 10; ++e) {
    if (e > 0) s.step();
    if (!want.count(e)) continue;
    EXPECT_NEAR(opt.param_groups()[0].lr(), want[e].first, 1e-14) << "step " << e;
    EXPECT_NEAR(opt.param_groups()[0].get("momentum"), want[e].second, 1e-14) << "step " << e;
  }
  expect_error([&] { s.step(); }, {"OneCycleLR", "tried to step 11 times", "10 steps"});
}

TEST(LRScheduler, OneCycleLinearThreePhaseAndAdamBeta1) {
  Tensor p = make_param(initial_values());
  optim::Adam opt({p}, {.lr = 0.5});
  optim::OneCycleLR s(opt, {.max_lr = 1.0, .total_steps = 10, .three_phase = true});
  // Phases end at steps 2, 4, 9 (cos): rise 0.04 -> 1, fall back to 0.04, anneal to 4e-6.
  std::map<int, std::pair<double, double>> want = {
      {1, {0.52, 0.90}}, {3, {0.52, 0.90}}, {4, {0.04, 0.95}},
      {5, {4e-6 + (0.04 - 4e-6) / 2 * (std::cos(kPi / 5) + 1), 0.95}}, {9, {4e-6, 0.95}}};
  for (int e = 0; e <= 9; ++e) {
    if (e > 0) s.step();
    if (!want.count(e)) continue;
    EXPECT_NEAR(opt.param_groups()[0].lr(), want[e].first, 1e-14) << "step " << e;
    EXPECT_NEAR(opt.param_groups()[0].get("beta1"), want[e].second, 1e-14) << "step " << e;
  }
  Tensor q = make_param(initial_values());
  optim::SGD sgd({q}, {.lr = 0.5});
  optim::OneCycleLR lin(sgd, {.max_lr = 1.0, .total_steps = 10, .anneal_strategy = "linear", .cycle_momentum = false});
  lin.step(), lin.step(), lin.step();
  EXPECT_NEAR(sgd.param_groups()[0].lr(), (4e-6 - 1) / 7 + 1, 1e-14);
  EXPECT_EQ(sgd.param_groups()[0].get("momentum"), 0.0);
}

TEST(LRScheduler, SequentialWarmupThenCosine) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 1.0});
  // The warmup ends at 0.5, not at the base lr, so that an off-by-one at the milestone shows.
  auto warmup = std::make_shared<optim::LinearLR>(opt, 0.1, 0.5, 4);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 10, 0.01);
  optim::SequentialLR s(opt, {warmup, cosine}, {4});
  std::map<int, double> want = {{0, 0.1}, {1, 0.2}, {3, 0.4}, {4, 1.0}, {9, 0.505}, {14, 0.01}};
  for (int e = 0; e <= 14; ++e) {
    if (e > 0) s.step();
    if (want.count(e)) EXPECT_NEAR(opt.param_groups()[0].lr(), want[e], 1e-14) << "epoch " << e;
  }
  expect_error([&] { optim::SequentialLR(opt, {warmup, cosine}, {}); }, {"SequentialLR", "2 schedulers need 1"});
  Tensor q = make_param(initial_values());
  optim::SGD other({q}, {.lr = 1.0});
  auto foreign = std::make_shared<optim::StepLR>(other, 2);
  expect_error([&] { optim::SequentialLR(opt, {warmup, foreign}, {3}); }, {"SequentialLR", "scheduler 1", "another optimizer"});
}

// Against PyTorch's chain of recursive steps: each scheduler scales the lr the chain's last step left, ConstantLR
// by its factor at epoch 0 and back at total_iters, ExponentialLR by gamma every epoch, StepLR by gamma every
// step_size epochs.
TEST(LRScheduler, ChainedMatchesTheRecursiveSteps) {
  Fixture f;
  auto constant = std::make_shared<optim::ConstantLR>(f.opt, 0.1, 2);
  auto exponential = std::make_shared<optim::ExponentialLR>(f.opt, 0.9);
  auto step = std::make_shared<optim::StepLR>(f.opt, 3, 0.5);
  optim::ChainedScheduler s(f.opt, {constant, exponential, step});
  std::vector<double> recursive[2] = {{0.1}, {0.01}};  // epoch 0: ConstantLR's factor on the base lrs
  for (auto& lrs : recursive)
    for (int e = 1; e <= 12; ++e) {
      double lr = lrs.back();
      if (e == 2) lr /= 0.1;
      lr *= 0.9;
      if (e % 3 == 0) lr *= 0.5;
      lrs.push_back(lr);
    }
  expect_schedule(s, f.opt, [&](int e, double b) { return recursive[b == 1.0 ? 0 : 1][static_cast<size_t>(e)]; }, 12,
                  "ChainedScheduler");
  Fixture g;
  optim::ChainedScheduler resumed(g.opt, {std::make_shared<optim::ConstantLR>(g.opt, 0.1, 2),
                                          std::make_shared<optim::ExponentialLR>(g.opt, 0.9),
                                          std::make_shared<optim::StepLR>(g.opt, 3, 0.5)});
  resumed.load_state_dict(s.state_dict());
  resumed.step();
  s.step();
  EXPECT_NEAR(g.opt.param_groups()[1].lr(), f.opt.param_groups()[1].lr(), 1e-16);
  Fixture h;
  auto cycle = std::make_shared<optim::OneCycleLR>(h.opt, optim::OneCycleOptions{.max_lr = 1.0, .total_steps = 9});
  expect_error([&] { optim::ChainedScheduler(h.opt, {cycle}); },
               {"ChainedScheduler", "scheduler 0", "OneCycleLR", "outright"});
  expect_error([&] { optim::ChainedScheduler(g.opt, {}); }, {"ChainedScheduler", "at least one"});
  expect_error([&] { optim::ChainedScheduler(g.opt, {exponential}); }, {"ChainedScheduler", "another optimizer"});
}

TEST(LRScheduler, StateDictRoundTrip) {
  Fixture a, b;
  optim::CosineAnnealingLR sa(a.opt, 20, 0.01);
  for (int i = 0; i < 7; ++i) sa.step();
  optim::SchedulerState saved = sa.state_dict();
  EXPECT_EQ(saved.at("last_epoch"), 7.0);
  optim::CosineAnnealingLR sb(b.opt, 20, 0.01);
  sb.load_state_dict(saved);
  EXPECT_EQ(sb.get_last_lr(), sa.get_last_lr());
  for (int i = 0; i < 10; ++i) {
    sa.step(), sb.step();
    EXPECT_EQ(sa.get_last_lr(), sb.get_last_lr());
    EXPECT_EQ(a.opt.param_groups()[1].lr(), b.opt.param_groups()[1].lr());
  }
  saved.erase("base_lrs.1");
  expect_error([&] { sb.load_state_dict(saved); }, {"CosineAnnealingLR.load_state_dict", "base_lrs.1", "missing"});
}

TEST(LRScheduler, BadArgumentsAreErrors) {
  Fixture f;
  expect_error([&] { optim::StepLR(f.opt, 0); }, {"StepLR", "step_size", "0"});
  expect_error([&] { optim::CosineAnnealingLR(f.opt, 0); }, {"CosineAnnealingLR", "T_max"});
  expect_error([&] { optim::LinearLR(f.opt, 0.0); }, {"LinearLR", "start_factor"});
  expect_error([&] { optim::LinearLR(f.opt, 0.5, 1.5); }, {"LinearLR", "end_factor"});
  expect_error([&] { optim::OneCycleLR(f.opt, {.max_lr = 1.0}); }, {"OneCycleLR", "total_steps"});
  expect_error([&] { optim::OneCycleLR(f.opt, {.max_lr = 1.0, .total_steps = 5, .anneal_strategy = "cosine"}); },
               {"OneCycleLR", "anneal_strategy", "cosine"});
  Tensor p = make_param(initial_values());
  optim::Adagrad adagrad({p});
  expect_error([&] { optim::OneCycleLR(adagrad, {.max_lr = 1.0, .total_steps = 5}); },
               {"OneCycleLR", "cycle_momentum", "Adagrad"});
  expect_error([&] { optim::ReduceLROnPlateau(f.opt, {.factor = 1.0}); }, {"ReduceLROnPlateau", "factor"});
  expect_error([&] { optim::ReduceLROnPlateau(f.opt, {.mode = "minimum"}); }, {"ReduceLROnPlateau", "mode", "minimum"});
  expect_error([&] { optim::ReduceLROnPlateau(f.opt, {.threshold_mode = "relative"}); }, {"threshold_mode"});
}

// ---- ReduceLROnPlateau ----

TEST(ReduceLROnPlateau, MinModeRelativeThresholdWithCooldown) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 1.0});
  optim::ReduceLROnPlateau s(opt, {.factor = 0.5, .patience = 2, .threshold = 0.1, .cooldown = 1});
  // Better means < best * 0.9. Traced by hand: bad epochs 1, 2, 3 -> drop (cooldown 1); the next bad one is
  // eaten by the cooldown; 8.0 is a new best; then three bad epochs -> drop.
  const double metrics[] = {10, 9.5, 9.2, 9.1, 9.1, 9.0, 8.0, 8.0, 8.0, 8.0};
  const double lrs[] = {1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25};
  for (size_t i = 0; i < std::size(metrics); ++i) {
    s.step(metrics[i]);
    EXPECT_EQ(opt.param_groups()[0].lr(), lrs[i]) << "step " << i + 1;
    EXPECT_EQ(s.get_last_lr()[0], lrs[i]);
  }
  EXPECT_EQ(s.best(), 8.0);
  EXPECT_EQ(s.last_epoch(), 10);
}

TEST(ReduceLROnPlateau, MaxModeAbsoluteThresholdAndMinLr) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 1.0});
  optim::ReduceLROnPlateau s(opt, {.mode = "max", .factor = 0.1, .patience = 0, .threshold = 0.5,
                                   .threshold_mode = "abs", .min_lr = 0.05});
  s.step(1.0);  // better than -inf
  EXPECT_EQ(opt.param_groups()[0].lr(), 1.0);
  s.step(1.4);  // not > 1.5: bad, patience 0 -> drop to 0.1
  EXPECT_NEAR(opt.param_groups()[0].lr(), 0.1, 1e-16);
  s.step(1.6);  // > 1.5: new best
  EXPECT_NEAR(opt.param_groups()[0].lr(), 0.1, 1e-16);
  EXPECT_EQ(s.best(), 1.6);
  s.step(1.0);  // drop, clamped at min_lr
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.05);
  s.step(0.0);  // already at min_lr: stays
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.05);

  optim::SchedulerState st = s.state_dict();
  optim::ReduceLROnPlateau s2(opt);
  s2.load_state_dict(st);
  EXPECT_EQ(s2.best(), 1.6);
  EXPECT_EQ(s2.last_epoch(), 5);
  EXPECT_EQ(s2.num_bad_epochs(), s.num_bad_epochs());
}

}  // namespace
}  // namespace kiln::test
