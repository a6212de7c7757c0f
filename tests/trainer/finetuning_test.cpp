// BackboneFinetuning against a training loop written out by hand with the same SGD: the backbone frozen, then
// its own group from the unfreeze epoch, at the rates Lightning's rule gives (worked out in the test), must end
// at the same weights. Then: a resume from after the unfreeze (at an epoch's end and mid-epoch) ends where a
// run never stopped does, bit for bit; an LR scheduler leaves the backbone's group alone; the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "kiln/trainer/finetuning.h"
#include "kiln/trainer/lambda_callback.h"
#include "tensor/test_util.h"
#include "trainer/callbacks_test_util.h"
#include "trainer/trainer_test_util.h"

namespace kiln::trainer::callbacks_testing {
namespace finetuning_tests {  // named: this target is built as one unit

using kiln::test::expect_error;

struct Backbone : nn::Module {
  nn::Linear fc{2, 4};
  nn::BatchNorm1d bn{4};
  Backbone() : nn::Module("Backbone") {
    register_module("fc", fc);
    register_module("bn", bn);
  }
  Tensor forward(const Tensor& x) override { return tanh(bn(fc(x))); }
};

// A pretrained-looking net: backbone (Linear + BatchNorm), then a linear head. Seeded weights.
struct Net : TrainModule {
  std::shared_ptr<Backbone> backbone = std::make_shared<Backbone>();
  nn::Linear head{4, 1};
  double lr = 0.1;
  bool optimize_everything = false;  // the mistake the callback refuses
  bool head_only = false;            // an optimizer of the head alone: the batch norm joins at the unfreeze
  std::function<void(OptimizerSetup&)> add_scheduler;

  Net() : TrainModule("Net") {
    register_module("backbone", backbone);
    register_module("head", head);
    reset_parameters_from_seed();
  }
  void reset_parameters_from_seed() {
    Generator gen(11);
    NoGradGuard no_grad;
    for (auto& [name, p] : named_parameters()) p.copy_(randn(p.sizes(), p.dtype(), &gen) * 0.5);
  }
  Tensor forward(const Tensor& x) override { return head(backbone->forward(x)); }
  Tensor training_step(const data::Batch& b, int64_t) override { return nn::F::mse_loss(forward(b[0]), b[1]); }
  OptimizerSetup configure_optimizers() override {
    std::vector<Tensor> params = head->parameters();
    if (!head_only) {
      params.clear();
      for (const Tensor& p : parameters()) {
        if (optimize_everything || p.requires_grad()) params.push_back(p);
      }
    }
    OptimizerSetup setup(std::make_shared<optim::SGD>(params, optim::SGDOptions{.lr = lr, .momentum = 0.9}));
    if (add_scheduler) add_scheduler(setup);
    return setup;
  }
};

std::vector<double> flat_weights(nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters()) {
    for (double v : kiln::test::values(p)) out.push_back(v);
  }
  return out;
}

// The backbone's lr at the start of each epoch from the unfreeze (Lightning's rule, written out): the first
// group's lr times the ratio, then twice the last, never above the first group's.
std::vector<double> expected_backbone_lrs(double head_lr, int64_t epochs_after) {
  std::vector<double> lrs{head_lr * 0.1};
  while (static_cast<int64_t>(lrs.size()) < epochs_after) lrs.push_back(std::min(lrs.back() * 2, head_lr));
  return lrs;
}

TEST(BackboneFinetuning, MatchesAHandWrittenLoop) {
  constexpr int64_t kEpochs = 9, kUnfreeze = 2;
  TempDir dir;
  Data d;  // 8 examples, 2 batches of 4
  Net net;
  auto ft = std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = kUnfreeze});
  std::vector<std::vector<double>> group_lrs;  // per epoch, after the callback ran
  LambdaHooks h;
  h.on_train_epoch_start = [&](Trainer& t, TrainModule&) {
    std::vector<double> lrs;
    for (const auto& g : t.optimizers().front()->param_groups()) lrs.push_back(g.lr());
    group_lrs.push_back(lrs);
  };
  Trainer(quiet(dir, kEpochs, {ft, std::make_shared<LambdaCallback>(h)})).fit(net, *d.train);

  const std::vector<double> want_lrs = expected_backbone_lrs(0.1, kEpochs - kUnfreeze);
  ASSERT_EQ(group_lrs.size(), static_cast<size_t>(kEpochs));
  for (int64_t e = 0; e < kEpochs; ++e) {
    if (e < kUnfreeze) {
      EXPECT_EQ(group_lrs[e], std::vector<double>{0.1}) << "epoch " << e;
    } else {
      ASSERT_EQ(group_lrs[e].size(), 2u) << "epoch " << e;
      EXPECT_DOUBLE_EQ(group_lrs[e][1], want_lrs[e - kUnfreeze]) << "epoch " << e;
    }
  }
  EXPECT_DOUBLE_EQ(want_lrs.back(), 0.1);  // the run is long enough to reach the cap
  EXPECT_TRUE(ft->unfrozen());

  // The same by hand: batch norm (train_bn) and head from the start, fc joining at the unfreeze.
  Net ref;
  std::vector<Tensor> early;
  for (const Tensor& p : ref.parameters()) {
    if (p.impl() != ref.backbone->fc->weight.impl() && p.impl() != ref.backbone->fc->bias.impl()) early.push_back(p);
  }
  ref.backbone->fc->weight.requires_grad_(false);
  ref.backbone->fc->bias.requires_grad_(false);
  optim::SGD sgd(early, {.lr = 0.1, .momentum = 0.9});
  for (int64_t e = 0; e < kEpochs; ++e) {
    if (e == kUnfreeze) {
      ref.backbone->fc->weight.requires_grad_(true);
      ref.backbone->fc->bias.requires_grad_(true);
      sgd.add_param_group({ref.backbone->fc->weight, ref.backbone->fc->bias},
                          optim::SGDOptions{.lr = want_lrs[0], .momentum = 0.9});
    } else if (e > kUnfreeze) {
      sgd.param_groups()[1].set_lr(want_lrs[e - kUnfreeze]);
    }
    for (const data::Batch& b : *d.train) {
      Tensor loss = nn::F::mse_loss(ref.forward(b[0]), b[1]);
      loss.backward();
      sgd.step();
      sgd.zero_grad();
    }
  }
  const std::vector<double> got = flat_weights(net), want = flat_weights(ref);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "weight " << i;
}

TEST(BackboneFinetuning, FrozenMeansUntouchedAndTrainBnOffFreezesBatchNormToo) {
  TempDir dir;
  Data d;
  Net net;
  const std::vector<double> fc0 = kiln::test::values(net.backbone->fc->weight);
  const std::vector<double> bn0 = kiln::test::values(net.backbone->bn->weight);
  const std::vector<double> mean0 = kiln::test::values(net.backbone->bn->running_mean);
  auto ft = std::make_shared<BackboneFinetuning>(
      BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = 5, .train_bn = false});
  Trainer(quiet(dir, 3, {ft})).fit(net, *d.train);
  EXPECT_EQ(kiln::test::values(net.backbone->fc->weight), fc0);
  EXPECT_EQ(kiln::test::values(net.backbone->bn->weight), bn0);
  // Unlike Lightning's freeze, the running statistics still follow the batches (finetuning.h says so).
  EXPECT_NE(kiln::test::values(net.backbone->bn->running_mean), mean0);
  EXPECT_FALSE(ft->unfrozen());
  EXPECT_FALSE(net.backbone->fc->weight.requires_grad());
}

// An optimizer of the head alone leaves the batch norm (train_bn) out until the unfreeze, which adds it to the
// backbone's group with the frozen layer.
TEST(BackboneFinetuning, TheUnfreezeAddsWhatNoOptimizerHolds) {
  TempDir dir;
  Data d;
  Net net;
  net.head_only = true;
  auto ft = std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = 1});
  Trainer t(quiet(dir, 2, {ft}));
  t.fit(net, *d.train);
  const auto& groups = t.optimizers().front()->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  std::vector<const TensorImpl*> got, want;
  for (const Tensor& p : groups[1].params) got.push_back(p.impl());
  for (const Tensor& p : net.backbone->parameters()) want.push_back(p.impl());
  EXPECT_EQ(got, want);  // fc's weight and bias, then bn's
}

// The backbone's group takes the backbone's lr and the optimizer's defaults for every other option (Lightning's
// add_param_group call), not the head group's options as something changed them.
TEST(BackboneFinetuning, TheBackbonesGroupTakesTheOptimizersDefaults) {
  TempDir dir;
  Data d;
  Net net;  // SGD, lr 0.1, momentum 0.9
  auto ft = std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = 1});
  LambdaHooks h;
  h.on_train_epoch_start = [&](Trainer& t, TrainModule&) {
    if (t.current_epoch() == 0) t.optimizers().front()->param_groups()[0].options["momentum"] = 0.5;
  };
  Trainer t(quiet(dir, 2, {std::make_shared<LambdaCallback>(h), ft}));
  t.fit(net, *d.train);
  const auto& groups = t.optimizers().front()->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].get("momentum"), 0.5);
  EXPECT_EQ(groups[1].get("momentum"), 0.9);
  EXPECT_DOUBLE_EQ(groups[1].lr(), 0.1 * 0.1);  // the head's lr times backbone_initial_ratio_lr
  std::map<std::string, double> rest = groups[1].options, defaults = t.optimizers().front()->defaults();
  rest.erase("lr"), defaults.erase("lr");
  EXPECT_EQ(rest, defaults);
}

// 7 epochs straight, against the same stopped after the unfreeze (at an epoch's end, and mid-epoch) and resumed.
TEST(BackboneFinetuning, ResumesExactlyAfterTheUnfreeze) {
  constexpr int64_t kEpochs = 7;
  auto options = [] { return BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = 2}; };
  TempDir straight_dir;
  Data d;
  Net straight;
  Trainer(quiet(straight_dir, kEpochs, {std::make_shared<BackboneFinetuning>(options())})).fit(straight, *d.train);
  const std::vector<double> want = flat_weights(straight);

  for (const char* stop : {"epoch=3-step=8.ckpt", "epoch=3-step=7.ckpt"}) {  // after epoch 3; in its middle
    TempDir dir;
    Net first;
    ModelCheckpointOptions every_step;
    every_step.dirpath = (dir.path / "ckpt").string();
    every_step.save_top_k = -1;
    every_step.every_n_train_steps = 1;
    Trainer(quiet(dir, 4, {std::make_shared<BackboneFinetuning>(options()),
                           std::make_shared<ModelCheckpoint>(every_step)}))
        .fit(first, *d.train);
    const std::string ckpt = (dir.path / "ckpt" / stop).string();
    ASSERT_TRUE(fs::exists(ckpt)) << ckpt;
    Net resumed;  // fresh: frozen and with the one group, until the checkpoint says otherwise
    auto ft = std::make_shared<BackboneFinetuning>(options());
    Trainer(quiet(dir, kEpochs, {ft})).fit(resumed, *d.train, nullptr, ckpt);
    EXPECT_EQ(flat_weights(resumed), want) << stop;
    EXPECT_DOUBLE_EQ(ft->backbone_lr(), expected_backbone_lrs(0.1, kEpochs - 2).back()) << stop;
  }
}

TEST(BackboneFinetuning, ASchedulerLeavesTheBackboneGroupAlone) {
  TempDir dir;
  Data d;
  Net net;
  net.add_scheduler = [](OptimizerSetup& s) {
    s.schedulers.push_back({.scheduler = std::make_shared<optim::StepLR>(*s.optimizers[0], 1, 0.5)});
  };
  std::vector<std::vector<double>> group_lrs;
  LambdaHooks h;
  h.on_train_epoch_start = [&](Trainer& t, TrainModule&) {
    std::vector<double> lrs;
    for (const auto& g : t.optimizers().front()->param_groups()) lrs.push_back(g.lr());
    group_lrs.push_back(lrs);
  };
  auto ft = std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = 1});
  Trainer(quiet(dir, 5, {ft, std::make_shared<LambdaCallback>(h)})).fit(net, *d.train);
  // Head: 0.1 halved after each epoch. Backbone: 0.05 * 0.1 at epoch 1, then doubled, capped by the head's.
  const std::vector<std::vector<double>> want{
      {0.1}, {0.05, 0.005}, {0.025, 0.01}, {0.0125, 0.0125}, {0.00625, 0.00625}};
  ASSERT_EQ(group_lrs.size(), want.size());
  for (size_t e = 0; e < want.size(); ++e) {
    ASSERT_EQ(group_lrs[e].size(), want[e].size()) << "epoch " << e;
    for (size_t g = 0; g < want[e].size(); ++g) EXPECT_DOUBLE_EQ(group_lrs[e][g], want[e][g]) << "epoch " << e;
  }
}

// Under ddp the backbone's gradients are averaged over the ranks from the unfreeze on: two ranks, each on its
// own half of the data, end with the same weights, and the backbone did train.
TEST(BackboneFinetuning, UnderDdpTheRanksStayTogether) {
  TempDir dir;
  const uint16_t port = distributed::find_free_port();
  const auto results = kiln::test::run_ranks(2, [&](int rank) {
    kiln::test::set_rank_env(rank, 2, port);
    Data d;
    Net net;
    const std::vector<double> fc0 = kiln::test::values(net.backbone->fc->weight);
    TrainerOptions o = quiet(dir, 4, {std::make_shared<BackboneFinetuning>(
                                          BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = 2})});
    o.strategy = "ddp";
    o.process_group_timeout = 30;
    Trainer(o).fit(net, *d.train);
    kiln::test::rank_check(kiln::test::values(net.backbone->fc->weight) != fc0, "the backbone did not train");
    kiln::test::write_numbers((dir.path / ("weights." + std::to_string(rank))).string(), flat_weights(net));
  });
  kiln::test::expect_all_ok(results);
  EXPECT_EQ(kiln::test::read_numbers((dir.path / "weights.0").string()),
            kiln::test::read_numbers((dir.path / "weights.1").string()));
}

// Under parameter_server the workers refuse BackboneFinetuning when fit starts (the servers' optimizers are
// made from the workers' groups then, and would never see the backbone's); the server learns that its workers
// left, and every process ends well within the deadline.
TEST(BackboneFinetuning, UnderAParameterServerTheWorkersRefuseIt) {
  TempDir dir;
  const uint16_t port = distributed::find_free_port();
  const auto results = kiln::test::run_ranks(3, [&](int rank) {
    kiln::test::set_rank_env(rank, 3, port);
    Data d;
    Net net;
    TrainerOptions o = quiet(dir, 2, {std::make_shared<BackboneFinetuning>()});
    o.strategy = "parameter_server";
    o.ps.servers = 1;
    o.process_group_timeout = 20;
    std::string error;
    try {
      Trainer(o).fit(net, *d.train);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (rank == 0) return;  // the server: an error naming its lost workers, or none
    kiln::test::rank_check(error.find("BackboneFinetuning: strategy 'parameter_server' is not supported") !=
                               std::string::npos,
                           "worker " + std::to_string(rank) + ": " + (error.empty() ? "no error" : error));
  }, std::chrono::seconds(60));
  kiln::test::expect_all_ok(results);
}

TEST(BackboneFinetuning, Errors) {
  TempDir dir;
  Data d;
  Net everything;
  everything.optimize_everything = true;
  expect_error([&] { Trainer(quiet(dir, 1, {std::make_shared<BackboneFinetuning>()})).fit(everything, *d.train); },
               {"optimizer 0", "SGD", "already holds parameters of the backbone 'backbone'", "epoch 10"});
  Net net;
  expect_error(
      [&] {
        Trainer(quiet(dir, 1, {std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions{.backbone = "trunk"})}))
            .fit(net, *d.train);
      },
      {"trunk"});
  expect_error([] { BackboneFinetuning({.unfreeze_backbone_at_epoch = -1}); }, {"unfreeze_backbone_at_epoch", ">= 0"});
  expect_error([] { BackboneFinetuning({.backbone_initial_ratio_lr = 0}); }, {"backbone_initial_ratio_lr", "> 0"});
}

}  // namespace finetuning_tests
}  // namespace kiln::trainer::callbacks_testing
