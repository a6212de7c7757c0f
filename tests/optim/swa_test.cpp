// Weight averaging against references written here in float64: the equal mean and the exponential average of
// the weights handed to update(), SWALR against PyTorch's recursive schedule (each lr from the previous one),
// and update_bn and momentum-free batch norm against the plain mean of the batches' statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/swa.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

std::vector<double> flat_weights(const nn::Module& m) {
  std::vector<double> out;
  for (const auto& [n, p] : m.named_parameters())
    for (double v : p.detach().to(kFloat64).contiguous().to_vector<double>()) out.push_back(v);
  return out;
}

void set_weights(nn::Module& m, uint64_t seed) {
  Generator g(seed);
  NoGradGuard no_grad;
  for (const Tensor& p : m.parameters()) p.copy_(randn(p.sizes(), kFloat64, &g));
}

TEST(AveragedWeights, EqualMeanAndExponentialAverageOfTheUpdates) {
  nn::Linear lin(3, 2);
  lin->to(kFloat64);
  optim::AveragedWeights swa(*lin), ema(*lin, {.decay = 0.75});
  std::vector<std::vector<double>> seen;
  for (uint64_t s = 1; s <= 4; ++s) {
    set_weights(*lin, s);
    seen.push_back(flat_weights(*lin));
    swa.update(*lin);
    ema.update(*lin);
  }
  EXPECT_EQ(swa.num_updates(), 4);
  nn::Linear out(3, 2);
  out->to(kFloat64);
  swa.copy_to(*out);
  const std::vector<double> mean_got = flat_weights(*out);
  ema.copy_to(*out);
  const std::vector<double> ema_got = flat_weights(*out);
  for (size_t i = 0; i < mean_got.size(); ++i) {
    double mean = 0, e = seen[0][i];
    for (const auto& w : seen) mean += w[i] / 4.0;
    for (size_t k = 1; k < seen.size(); ++k) e = 0.75 * e + 0.25 * seen[k][i];
    EXPECT_NEAR(mean_got[i], mean, 1e-14) << i;
    EXPECT_NEAR(ema_got[i], e, 1e-14) << i;
  }
}

TEST(AveragedWeights, SwapTwiceRestoresTheBitsAndBuffersFollowUseBuffers) {
  nn::Sequential net(nn::Linear(3, 4), nn::BatchNorm1d(4));
  optim::AveragedWeights plain(*net), with_buffers(*net, {.decay = 0.5, .use_buffers = true});
  EXPECT_EQ(plain.averages().size(), 4u);         // two weights, two biases... of Linear and BatchNorm
  EXPECT_EQ(with_buffers.averages().size(), 7u);  // and running_mean, running_var, num_batches_tracked
  net->train();
  net(randn({8, 3}));  // moves the running statistics and counts a batch
  with_buffers.update(*net);
  net(randn({8, 3}) + 2.0);
  with_buffers.update(*net);
  auto bn = std::dynamic_pointer_cast<nn::BatchNormImpl>((*net)[1]);
  const std::vector<double> raw = flat_weights(*net);
  const Tensor raw_mean = bn->running_mean.clone();
  const Tensor averaged_mean = with_buffers.averages().at("1.running_mean").clone();
  EXPECT_FALSE(averaged_mean.equal(raw_mean));  // the average of two different states
  with_buffers.swap(*net);
  EXPECT_TRUE(bn->running_mean.equal(averaged_mean));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);   // integers are copied, not averaged
  with_buffers.swap(*net);
  EXPECT_EQ(flat_weights(*net), raw);
  EXPECT_TRUE(bn->running_mean.equal(raw_mean));
  // A module of another shape is named in the error.
  nn::Sequential other(nn::Linear(3, 5), nn::BatchNorm1d(5));
  expect_error([&] { plain.copy_to(*other); }, {"AveragedWeights::copy_to", "\"0.weight\" has shape (5, 3)",
                                                 "the average (4, 3)"});
  nn::Linear lone(3, 4);
  expect_error([&] { plain.update(*lone); }, {"AveragedWeights::update", "Linear has no \"0.bias\""});
  expect_error([&] { optim::AveragedWeights(*net, {.decay = 1.5}); }, {"decay must be in [0, 1]"});
}

TEST(AveragedWeights, LoadTakesBackWhatAveragesGave) {
  nn::Linear lin(2, 2);
  optim::AveragedWeights a(*lin, {.decay = 0.9});
  a.update(*lin);
  set_weights(*lin, 9);
  a.update(*lin);
  optim::AveragedWeights b(*lin, {.decay = 0.9});
  b.load(a.averages(), a.num_updates());
  set_weights(*lin, 10);
  a.update(*lin);
  b.update(*lin);
  for (const auto& [name, t] : a.averages()) EXPECT_TRUE(t.equal(b.averages().at(name))) << name;
  expect_error([&] { b.load({}, 1); }, {"AveragedWeights::load", "0 tensors given"});
}

// PyTorch's SWALR, as its get_lr computes it: the previous lr inverted back to the start, then the next.
std::vector<double> swalr_reference(double lr, double swa_lr, int64_t anneal, bool cosine, int steps) {
  auto f = [&](double t) { return cosine ? (1 - std::cos(std::numbers::pi * t)) / 2 : t; };
  std::vector<double> out;
  for (int count = 1; count <= steps; ++count) {  // _step_count after each step(), construction's included
    double step = count - 1;
    if (anneal == 0) step = std::max(1.0, step);
    const double prev_alpha = f(std::clamp((step - 1) / std::max<int64_t>(1, anneal), 0.0, 1.0));
    const double prev = prev_alpha == 1 ? swa_lr : (lr - prev_alpha * swa_lr) / (1 - prev_alpha);
    const double alpha = f(std::clamp(step / std::max<int64_t>(1, anneal), 0.0, 1.0));
    lr = swa_lr * alpha + prev * (1 - alpha);
    out.push_back(lr);
  }
  return out;
}

TEST(SWALR, FollowsPyTorchsSchedule) {
  struct Case {
    int64_t anneal;
    const char* strategy;
  };
  for (const Case& c : {Case{4, "cos"}, Case{3, "linear"}, Case{0, "cos"}}) {
    SCOPED_TRACE(c.strategy);
    Tensor w = zeros({2}).requires_grad_(), v = zeros({2}).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.5});
    opt.add_param_group({v}, optim::SGDOptions{.lr = 0.2});
    optim::SWALR sched(opt, {0.05, 0.01}, c.anneal, c.strategy);
    const std::vector<double> want0 = swalr_reference(0.5, 0.05, c.anneal, c.strategy[0] == 'c', 8);
    const std::vector<double> want1 = swalr_reference(0.2, 0.01, c.anneal, c.strategy[0] == 'c', 8);
    for (size_t k = 0; k < want0.size(); ++k) {
      EXPECT_NEAR(opt.param_groups()[0].lr(), want0[k], 1e-15) << "step " << k;
      EXPECT_NEAR(opt.param_groups()[1].lr(), want1[k], 1e-15) << "step " << k;
      sched.step();
    }
    // Resuming: a scheduler built on a fresh optimizer, given the state and the groups' lrs (the optimizer's
    // state holds those), goes on alike.
    optim::SGD other({w}, {.lr = opt.param_groups()[0].lr()});
    other.add_param_group({v}, optim::SGDOptions{.lr = opt.param_groups()[1].lr()});
    optim::SWALR resumed(other, {0.05, 0.01}, c.anneal, c.strategy);
    resumed.load_state_dict(sched.state_dict());
    sched.step();
    resumed.step();
    EXPECT_EQ(resumed.get_last_lr(), sched.get_last_lr());
  }
  // PyTorch's recipe: a cosine schedule until the SWA epochs, then SWALR, which anneals from where the cosine
  // left the lr, not from the lr it was built with.
  {
    Tensor w = zeros({2}).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.5});
    optim::CosineAnnealingLR cosine(opt, 10);
    optim::SWALR swa_lr(opt, 0.05, 3, "linear");
    EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr(), 0.5);  // building it changes nothing
    for (int e = 0; e < 4; ++e) cosine.step();
    const double left = opt.param_groups()[0].lr();
    ASSERT_LT(left, 0.45);
    const std::vector<double> want = swalr_reference(left, 0.05, 3, false, 6);
    for (size_t k = 1; k < want.size(); ++k) {
      swa_lr.step();
      EXPECT_NEAR(opt.param_groups()[0].lr(), want[k], 1e-15) << "step " << k;
    }
  }
  Tensor w = zeros({1}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  expect_error([&] { optim::SWALR(opt, 0.05, 5, "step"); }, {"SWALR", "'cos' or 'linear'"});
  expect_error([&] { optim::SWALR(opt, {0.05, 0.01}, 5); }, {"SWALR", "2 swa_lrs for 1 parameter groups"});
}

TEST(UpdateBn, RunningStatisticsBecomeThePlainMeanOverThePass) {
  // Four batches of 5 rows with very different means: a momentum of 0.1 would remember mostly the last.
  std::vector<Tensor> batches;
  for (int b = 0; b < 4; ++b) batches.push_back(test::randn64({5, 3}, 400 + b) * (b + 1.0) + 3.0 * b);
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{cat(batches, 0)});
  data::DataLoader loader(ds, {.batch_size = 5});
  nn::Sequential net(nn::BatchNorm1d(3));
  net->to(kFloat64);
  net->eval();
  optim::update_bn(loader, *net);
  auto bn = std::dynamic_pointer_cast<nn::BatchNormImpl>((*net)[0]);
  std::vector<double> mean(3, 0.0), var(3, 0.0);
  for (const Tensor& b : batches) {
    const std::vector<double> v = b.to_vector<double>();
    for (int c = 0; c < 3; ++c) {
      double m = 0, s = 0;
      for (int r = 0; r < 5; ++r) m += v[static_cast<size_t>(r * 3 + c)] / 5;
      for (int r = 0; r < 5; ++r) s += std::pow(v[static_cast<size_t>(r * 3 + c)] - m, 2) / 4;  // unbiased
      mean[static_cast<size_t>(c)] += m / 4, var[static_cast<size_t>(c)] += s / 4;
    }
  }
  const std::vector<double> rm = bn->running_mean.to_vector<double>(), rv = bn->running_var.to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(rm[static_cast<size_t>(c)], mean[static_cast<size_t>(c)], 1e-12) << c;
    EXPECT_NEAR(rv[static_cast<size_t>(c)], var[static_cast<size_t>(c)], 1e-12) << c;
  }
  EXPECT_FALSE(net->is_training());                 // the mode it had
  EXPECT_EQ(bn->options().momentum, 0.1);           // and its momentum
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 4);
  EXPECT_EQ(nn::BatchNorm1d(3, {.momentum = std::nullopt})->str(),
            "BatchNorm1d(3, eps=1e-05, momentum=None, affine=true, track_running_stats=true)");
}

}  // namespace
}  // namespace kiln
