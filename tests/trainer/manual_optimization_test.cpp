// Manual optimization (TrainModule::set_automatic_optimization(false)), and LBFGS's closure steps under either
// loop. The oracles are loops written out by hand with the same ops in the same order, and the automatic Trainer
// itself: on the CPU both must give the Trainer's weights bit for bit. Two ranks under ddp must train what one
// process trains on the whole batch.
#include <gtest/gtest.h>

#include <cmath>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "tensor/test_util.h"
#include "trainer/resume_net.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

// Two players trained by two optimizers, each on its own loss, the way a GAN's generator and discriminator
// are: the critic's loss reaches only the critic (the generator's output is detached), the generator's runs
// through the critic, which toggle_optimizer freezes meanwhile.
struct TwoPlayer : trainer::TrainModule {
  nn::Linear gen{4, 4}, critic{4, 1};
  bool toggle = true;
  bool step_schedulers = false;
  double clip = 0;  // clip the critic's gradients to this norm (0: no clipping)
  std::vector<bool> gen_requires_grad_in_critic_step;

  TwoPlayer() : TrainModule("TwoPlayer") {
    register_module("gen", gen);
    register_module("critic", critic);
    set_automatic_optimization(false);
  }
  Tensor training_step(const data::Batch& b, int64_t) override {
    auto opts = optimizers();
    // The critic: fit y on real inputs, and 0 on generated ones.
    if (toggle) toggle_optimizer(opts[1]);
    gen_requires_grad_in_critic_step.push_back(gen->weight.requires_grad());
    Tensor fake = gen(b[0]).detach();
    Tensor critic_loss = nn::F::mse_loss(critic(b[0]), b[1]) + critic(fake).pow(2).mean();
    opts[1].zero_grad();
    manual_backward(critic_loss);
    if (clip > 0) clip_gradients(opts[1], clip);
    opts[1].step();
    if (toggle) untoggle_optimizer();
    // The generator: make the critic say y for generated inputs.
    if (toggle) toggle_optimizer(opts[0]);
    Tensor gen_loss = nn::F::mse_loss(critic(gen(b[0])), b[1]);
    opts[0].zero_grad();
    manual_backward(gen_loss);
    opts[0].step();
    if (toggle) untoggle_optimizer();
    if (step_schedulers) {
      for (const auto& s : lr_schedulers()) s.scheduler->step();
    }
    log("critic_loss", critic_loss);
    log("gen_loss", gen_loss);
    return gen_loss;
  }
  trainer::OptimizerSetup configure_optimizers() override {
    auto g = std::make_shared<optim::Adam>(gen->parameters(), optim::AdamOptions{.lr = 1e-2});
    auto c = std::make_shared<optim::SGD>(critic->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    trainer::SchedulerConfig s;
    s.scheduler = std::make_shared<optim::StepLR>(*c, 1, 0.5);
    s.interval = "step";
    return trainer::OptimizerSetup({g, c}, {s});
  }
};

// TwoPlayer's steps written as a plain loop over the same batches, with its own optimizers.
std::vector<std::vector<float>> two_player_by_hand(int epochs, double clip = 0) {
  manual_seed(3);
  TwoPlayer m;
  optim::Adam g(m.gen->parameters(), optim::AdamOptions{.lr = 1e-2});
  optim::SGD c(m.critic->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  auto data = loader(regression_data(32), 8);
  auto freeze = [](nn::Module& mod, bool frozen) {
    for (const Tensor& p : mod.parameters()) p.requires_grad_(!frozen);
  };
  for (int e = 0; e < epochs; ++e) {
    for (const data::Batch& b : *data) {
      freeze(*m.gen, true);
      Tensor fake = m.gen(b[0]).detach();
      Tensor critic_loss = nn::F::mse_loss(m.critic(b[0]), b[1]) + m.critic(fake).pow(2).mean();
      c.zero_grad();
      critic_loss.backward();
      if (clip > 0) optim::clip_grad_norm_(m.critic->parameters(), clip);
      c.step();
      freeze(*m.gen, false);
      freeze(*m.critic, true);
      Tensor gen_loss = nn::F::mse_loss(m.critic(m.gen(b[0])), b[1]);
      g.zero_grad();
      gen_loss.backward();
      g.step();
      freeze(*m.critic, false);
    }
  }
  return weights_of(m);
}

TEST(ManualOptimization, TwoOptimizersTrainWhatAHandWrittenLoopTrains) {
  TempDir dir;
  for (double clip : {0.0, 0.05}) {
    manual_seed(3);
    TwoPlayer m;
    m.clip = clip;
    auto data = loader(regression_data(32), 8);
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 2;
    trainer::Trainer t(o);
    t.fit(m, *data);
    EXPECT_EQ(t.global_step(), 2 * 2 * 4) << "two optimizer steps per batch, 4 batches, 2 epochs";
    EXPECT_EQ(weights_of(m), two_player_by_hand(2, clip)) << "clip " << clip;
    // toggle_optimizer froze the generator for the critic's step, and untoggle_optimizer thawed it.
    ASSERT_EQ(m.gen_requires_grad_in_critic_step.size(), 8u);
    for (bool rg : m.gen_requires_grad_in_critic_step) EXPECT_FALSE(rg);
    for (const Tensor& p : m.parameters()) EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(t.callback_metrics().count("critic_loss"));
    // The scheduler is the module's to step: the Trainer left the critic's learning rate alone.
    EXPECT_EQ(t.optimizers()[1]->param_groups()[0].lr(), 0.05);
  }
}

TEST(ManualOptimization, TheModuleStepsItsSchedulers) {
  TempDir dir;
  manual_seed(3);
  TwoPlayer m;
  m.step_schedulers = true;
  auto data = loader(regression_data(32), 8);
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 1;
  trainer::Trainer t(o);
  t.fit(m, *data);
  EXPECT_DOUBLE_EQ(t.optimizers()[1]->param_groups()[0].lr(), 0.05 * std::pow(0.5, 4));
}

// Regressor's step, by hand: zero_grad, manual_backward and step, or the same in a closure given to step.
struct ManualRegressor : Regressor {
  bool use_closure = false;
  ManualRegressor() { set_automatic_optimization(false); }
  Tensor training_step(const data::Batch& b, int64_t) override {
    auto opt = optimizers().at(0);
    auto closure = [&] {
      opt.zero_grad();
      Tensor loss = nn::F::mse_loss(fc(b[0]), b[1]);
      manual_backward(loss);
      return loss;
    };
    Tensor loss;
    if (use_closure) {
      loss = opt.step(closure);
    } else {
      loss = closure();
      opt.step();
    }
    log("train/loss", loss);
    return loss;
  }
};

TEST(ManualOptimization, OneOptimizerByHandEqualsTheAutomaticLoop) {
  // precision 16-mixed too: manual_backward scales the loss and step() unscales, as the automatic loop does.
  for (const std::string precision : {"32", "16-mixed"}) {
    TempDir dir;
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 2;
    o.precision = precision;
    auto make_adam = [](Regressor& r) -> trainer::OptimizerSetup {
      return std::make_shared<optim::Adam>(r.parameters(), optim::AdamOptions{.lr = 1e-2});
    };
    manual_seed(5);
    Regressor automatic;
    automatic.make_optim = make_adam;
    auto data = loader(regression_data(32), 8);
    trainer::Trainer ta(o);
    ta.fit(automatic, *data);

    for (const bool use_closure : {false, true}) {
      const std::string what = precision + (use_closure ? ", closure" : "");
      manual_seed(5);
      ManualRegressor manual;
      manual.make_optim = make_adam;
      manual.use_closure = use_closure;
      trainer::Trainer tm(o);
      tm.fit(manual, *data);
      EXPECT_EQ(weights_of(manual), weights_of(automatic)) << what;
      EXPECT_EQ(tm.global_step(), ta.global_step()) << what;
      if (precision == "16-mixed") {
        ASSERT_NE(tm.grad_scaler(), nullptr);
        EXPECT_EQ(tm.grad_scaler()->get_scale(), ta.grad_scaler()->get_scale()) << what;
      }
    }
  }
}

// LBFGS by hand: each step's closure zeroes the gradients, runs the loss and backward, and clips them to
// `clip` (0: not), as the automatic loop's closure does.
std::vector<std::vector<float>> lbfgs_by_hand(const optim::LBFGSOptions& options, int epochs, double clip = 0) {
  manual_seed(5);
  Regressor by_hand;
  optim::LBFGS opt(by_hand.parameters(), options);
  auto data = loader(regression_data(32), 8);
  for (int e = 0; e < epochs; ++e) {
    for (const data::Batch& b : *data) {
      opt.step([&] {
        opt.zero_grad();
        Tensor loss = nn::F::mse_loss(by_hand.fc(b[0]), b[1]);
        loss.backward();
        if (clip > 0) optim::clip_grad_norm_(by_hand.parameters(), clip);
        return loss;
      });
    }
  }
  return weights_of(by_hand);
}

const optim::LBFGSOptions kLBFGS{.max_iter = 4, .history_size = 5, .line_search_fn = "strong_wolfe"};
trainer::OptimizerSetup lbfgs_setup(Regressor& r) { return std::make_shared<optim::LBFGS>(r.parameters(), kLBFGS); }

TEST(ManualOptimization, LBFGSStepsWithAClosureAsInAPlainLoop) {
  TempDir dir;
  manual_seed(5);
  ManualRegressor m;
  m.use_closure = true;
  m.make_optim = lbfgs_setup;
  auto data = loader(regression_data(32), 8);
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 2;
  trainer::Trainer t(o);
  t.fit(m, *data);
  EXPECT_EQ(t.global_step(), 8);
  EXPECT_EQ(weights_of(m), lbfgs_by_hand(kLBFGS, 2));
}

// The automatic loop makes the whole training step LBFGS's closure, as Lightning does; with clipping in it too.
TEST(ManualOptimization, AutomaticLBFGSClosesOverTheTrainingStep) {
  for (const double clip : {0.0, 0.05}) {
    TempDir dir;
    manual_seed(5);
    Regressor m;
    m.make_optim = lbfgs_setup;
    auto data = loader(regression_data(32), 8);
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 2;
    o.gradient_clip_val = clip;
    trainer::Trainer t(o);
    t.fit(m, *data);
    EXPECT_EQ(t.global_step(), 8);
    EXPECT_GT(m.train_steps, 8) << "the line search evaluates each batch more than once";
    EXPECT_EQ(weights_of(m), lbfgs_by_hand(kLBFGS, 2, clip)) << "clip " << clip;
    EXPECT_TRUE(std::isfinite(t.callback_metrics().at("train/loss")));
  }
}

TEST(ManualOptimization, AutomaticLBFGSRefusesWhatItCannotDo) {
  TempDir dir;
  auto data = loader(regression_data(32), 8);
  Regressor m;
  m.make_optim = lbfgs_setup;
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 1;
  o.accumulate_grad_batches = 2;
  expect_error([&] { trainer::Trainer(o).fit(m, *data); }, {"LBFGS", "accumulate_grad_batches must be 1, not 2"});
  o.accumulate_grad_batches = 1;
  o.precision = "16-mixed";
  expect_error([&] { trainer::Trainer(o).fit(m, *data); }, {"LBFGS", "'16-mixed'", "'bf16-mixed'"});
  o.precision = "32";
  m.make_optim = [](Regressor& r) -> trainer::OptimizerSetup {
    return trainer::OptimizerSetup({std::make_shared<optim::LBFGS>(r.parameters(), kLBFGS),
                                    std::make_shared<optim::SGD>(r.parameters(), optim::SGDOptions{.lr = 0.1})});
  };
  expect_error([&] { trainer::Trainer(o).fit(m, *data); }, {"only optimizer", "there are 2", "step(closure)"});
}

// Under ddp every evaluation is an all-reduce round, and the loss LBFGS sees is the mean over the ranks, so both
// ranks take the decisions one process takes on the whole batch: as many evaluations, and its weights. (One
// epoch: in the second, near the minimum, the line search compares losses that differ by float32 rounding, and
// the order in which the ranks' gradients were summed can tip a comparison; the ranks still agree.)
TEST(ManualOptimization, AutomaticLBFGSUnderDDPTrainsWhatOneProcessTrains) {
  TempDir dir;
  manual_seed(5);
  Regressor one;
  one.make_optim = lbfgs_setup;
  auto data8 = loader(regression_data(32), 8);
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 1;
  trainer::Trainer(o).fit(one, *data8);
  const std::vector<std::vector<float>> want = weights_of(one);
  const uint16_t port = distributed::find_free_port();
  const auto results = run_ranks(2, [&](int rank) {
    set_rank_env(rank, 2, port);
    manual_seed(rank == 0 ? 5 : 99);  // rank 1 starts elsewhere: DDP copies rank 0's weights
    Regressor m;
    m.make_optim = lbfgs_setup;
    auto data4 = loader(regression_data(32), 4);
    trainer::TrainerOptions ro = o;
    ro.strategy = "ddp";
    ro.process_group_timeout = 30;
    trainer::Trainer t(ro);
    t.fit(m, *data4);
    const std::string who = "rank " + std::to_string(rank);
    rank_check(m.train_steps == one.train_steps, who + " evaluated the training step " +
               std::to_string(m.train_steps) + " times, one process " + std::to_string(one.train_steps));
    const std::string mismatch = weights_mismatch(weights_of(m), want);
    rank_check(mismatch.empty(), who + " against one process: " + mismatch);
  }, std::chrono::seconds(60));
  expect_all_ok(results);
}

// A loss that overflows once: under 16-mixed that step is skipped (the weights stay) and the scale backs off.
struct OverflowOnce : ManualRegressor {
  int64_t overflow_batch = 1;
  std::vector<float> before, after;
  Tensor training_step(const data::Batch& b, int64_t idx) override {
    auto opt = optimizers().at(0);
    opt.zero_grad();
    Tensor loss = nn::F::mse_loss(fc(b[0]), b[1]);
    if (idx == overflow_batch) loss = loss * std::numeric_limits<float>::infinity();
    manual_backward(loss);
    if (idx == overflow_batch) before = weights_of(*this).at(0);
    opt.step();
    if (idx == overflow_batch) after = weights_of(*this).at(0);
    return loss;
  }
};

TEST(ManualOptimization, AnOverflowingStepIsSkippedUnder16Mixed) {
  TempDir dir;
  trainer::TrainerOptions o = quiet(dir.str());
  o.max_epochs = 1;
  o.precision = "16-mixed";
  OverflowOnce m;
  auto data = loader(regression_data(32), 8);
  trainer::Trainer t(o);
  t.fit(m, *data);
  ASSERT_FALSE(m.before.empty());
  EXPECT_EQ(m.before, m.after);
  EXPECT_EQ(t.global_step(), 4) << "a skipped step still counts, as in the automatic loop";
  EXPECT_LT(t.grad_scaler()->get_scale(), optim::GradScalerOptions{}.init_scale);
}

TEST(ManualOptimization, ResumeMidEpochGivesTheSameWeightsBitForBit) {
  TempDir dir;
  auto options = [&] {
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 3;
    o.seed = 99;
    return o;
  };
  auto data = loader(regression_data(32), 8, /*shuffle=*/true, /*workers=*/0, /*seed=*/4);
  manual_seed(3);
  TwoPlayer whole;
  whole.step_schedulers = true;
  trainer::Trainer(options()).fit(whole, *data);

  manual_seed(3);
  TwoPlayer first;
  first.step_schedulers = true;
  // A crash after 6 batches (in the second epoch), right after the checkpoint of that batch was written. (A
  // stop by max_steps would not do: the epoch's end runs after it, and its checkpoint resumes at the next epoch.)
  struct CrashAfter : trainer::Callback {
    void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                            int64_t) override {
      if (t.global_step() == 2 * 6) throw std::runtime_error("crash");
    }
  };
  trainer::TrainerOptions o = options();
  o.callbacks = {std::make_shared<SaveEveryStep>(dir / "run.ckpt"), std::make_shared<CrashAfter>()};
  EXPECT_THROW(trainer::Trainer(o).fit(first, *data), std::runtime_error);

  manual_seed(77);  // other initial weights: the checkpoint must bring back everything
  TwoPlayer resumed;
  resumed.step_schedulers = true;
  trainer::Trainer tr(options());
  tr.fit(resumed, *data, nullptr, dir / "run.ckpt");
  EXPECT_EQ(tr.global_step(), 2 * 12);
  EXPECT_EQ(weights_of(resumed), weights_of(whole));
}

TEST(ManualOptimization, MisuseIsAClearError) {
  TempDir dir;
  auto data = loader(regression_data(16), 8);
  {  // the Trainer's own accumulation and clipping do not apply to a module that steps itself
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 1;
    o.accumulate_grad_batches = 2;
    TwoPlayer m;
    expect_error([&] { trainer::Trainer(o).fit(m, *data); }, {"accumulate_grad_batches = 2"});
    o.accumulate_grad_batches = 1;
    o.gradient_clip_val = 1;
    expect_error([&] { trainer::Trainer(o).fit(m, *data); }, {"clip_gradients"});
  }
  {  // manual_backward in a module that left automatic optimization on
    struct Wrong : Regressor {
      Tensor training_step(const data::Batch& b, int64_t) override {
        manual_backward(nn::F::mse_loss(fc(b[0]), b[1]));
        return {};
      }
    } m;
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 1;
    expect_error([&] { trainer::Trainer(o).fit(m, *data); }, {"set_automatic_optimization(false)"});
  }
  {  // optimizers() outside fit
    TwoPlayer m;
    expect_error([&] { m.optimizers(); }, {"not being run by a Trainer"});
  }
  {  // toggling twice
    struct Twice : TwoPlayer {
      Tensor training_step(const data::Batch& b, int64_t i) override {
        auto opts = optimizers();
        toggle_optimizer(opts[0]);
        toggle_optimizer(opts[1]);
        return {};
      }
    } m;
    trainer::TrainerOptions o = quiet(dir.str());
    o.max_epochs = 1;
    expect_error([&] { trainer::Trainer(o).fit(m, *data); }, {"untoggle_optimizer() first"});
  }
}

TEST(ManualOptimization, TwoDDPRanksTrainWhatOneProcessTrainsOnTheWholeBatch) {
  // Each loss reaches only its own player's parameters. With toggle_optimizer the other player's are frozen
  // (requires_grad false) during each backward, and DDP lets frozen parameters sit the round out, so no
  // find_unused_parameters is needed; without toggling, the first backward names the parameters that got no
  // gradient unless find_unused_parameters is on.
  const std::vector<std::vector<float>> want = two_player_by_hand(2);
  TempDir dir;
  struct Case {
    bool find_unused, toggle, trains;
  };
  for (const Case c : {Case{true, true, true}, Case{false, true, true}, Case{false, false, false}}) {
    const uint16_t port = distributed::find_free_port();
    const std::string out = dir / ("case_" + std::to_string(c.find_unused) + std::to_string(c.toggle));
    std::filesystem::create_directories(out);
    const auto results = run_ranks(2, [&](int rank) {
      set_rank_env(rank, 2, port);
      manual_seed(rank == 0 ? 3 : 99);  // rank 1 starts elsewhere: DDP copies rank 0's weights
      TwoPlayer m;
      m.toggle = c.toggle;
      auto data4 = loader(regression_data(32), 4);
      trainer::TrainerOptions o = quiet(out);
      o.max_epochs = 2;
      o.strategy = "ddp";
      o.process_group_timeout = 30;
      o.ddp_find_unused_parameters = c.find_unused;
      trainer::Trainer t(o);
      try {
        t.fit(m, *data4);
      } catch (const std::exception& e) {
        rank_check(!c.trains && std::string(e.what()).find("got no gradient") != std::string::npos,
                   std::string("rank ") + std::to_string(rank) + ": " + e.what());
        return;
      }
      rank_check(c.trains, "rank " + std::to_string(rank) + ": trained without toggling or find_unused_parameters");
      const std::string mismatch = weights_mismatch(weights_of(m), want);
      rank_check(mismatch.empty(), "rank " + std::to_string(rank) + " against one process: " + mismatch);
    }, std::chrono::seconds(60));
    expect_all_ok(results);
  }
}

}  // namespace
}  // namespace kiln::test
