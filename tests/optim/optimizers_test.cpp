// SGD, Adam, AdamW, RMSprop and Adagrad against float64 scalar code written out from torch.optim's formulas.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "kiln/tensor/ops/fused_optim.h"
#include "optim/optim_test_util.h"

namespace kiln::test {
namespace {

using optim::OptimizerState;

// ---- SGD ----

ReferenceStep sgd_reference(optim::SGDOptions o) {
  auto buf = std::make_shared<std::vector<double>>();
  return [o, buf](std::vector<double>& p, const std::vector<double>& grad) {
    bool first = buf->empty();
    if (first) buf->resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -grad[i] : grad[i];
      g += o.weight_decay * p[i];
      if (o.momentum != 0) {
        double& b = (*buf)[i];
        b = first ? g : o.momentum * b + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * b : b;
      }
      p[i] -= o.lr * g;
    }
  };
}

TEST(SGD, MatchesReferenceForEachOption) {
  const optim::SGDOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.3},
      {.lr = 0.1, .momentum = 0.9, .nesterov = true},
      {.lr = 0.1, .weight_decay = 0.01},
      {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true, .maximize = true},
      {.lr = 0.2, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::SGD opt({p}, cases[c]);
    expect_matches_reference(opt, p, sgd_reference(cases[c]), 6, "SGD case " + std::to_string(c));
  }
}

TEST(SGD, DefaultsAndDesignatedInitializers) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p});
  EXPECT_EQ(opt.param_groups().size(), 1u);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr(), 1e-3);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].get("momentum"), 0.0);
  optim::SGD opt2({p}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_DOUBLE_EQ(opt2.param_groups()[0].get("momentum"), 0.9);
}

// ---- Adam and AdamW ----

ReferenceStep adam_reference(optim::AdamOptions o, bool decoupled) {
  struct State {
    std::vector<double> m, v, vmax;
    int t = 0;
  };
  auto s = std::make_shared<State>();
  return [o, decoupled, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->m.empty()) s->m = s->v = s->vmax = std::vector<double>(p.size(), 0.0);
    ++s->t;
    auto [b1, b2] = o.betas;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -grad[i] : grad[i];
      if (decoupled) p[i] *= 1 - o.lr * o.weight_decay;
      else g += o.weight_decay * p[i];
      s->m[i] = b1 * s->m[i] + (1 - b1) * g;
      s->v[i] = b2 * s->v[i] + (1 - b2) * g * g;
      s->vmax[i] = std::max(s->vmax[i], s->v[i]);
      double v = o.amsgrad ? s->vmax[i] : s->v[i];
      double bc1 = 1 - std::pow(b1, s->t), bc2 = 1 - std::pow(b2, s->t);
      p[i] -= (o.lr / bc1) * s->m[i] / (std::sqrt(v) / std::sqrt(bc2) + o.eps);
    }
  };
}

TEST(Adam, MatchesReferenceForEachOption) {
  const optim::AdamOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.05, .betas = {0.8, 0.9}, .eps = 1e-3},
      {.lr = 0.1, .weight_decay = 0.1},
      {.lr = 0.1, .betas = {0.9, 0.5}, .amsgrad = true},
      {.lr = 0.1, .weight_decay = 0.05, .amsgrad = true, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::Adam opt({p}, cases[c]);
    expect_matches_reference(opt, p, adam_reference(cases[c], false), 8, "Adam case " + std::to_string(c));
    EXPECT_EQ(opt.state(p).scalars.at("step"), 8.0);
    EXPECT_EQ(opt.state(p).tensors.count("max_exp_avg_sq"), cases[c].amsgrad ? 1u : 0u);
  }
}

TEST(AdamW, MatchesReferenceForEachOption) {
  const optim::AdamWOptions cases[] = {
      {.lr = 0.1},  // default weight_decay 1e-2
      {.lr = 0.1, .weight_decay = 0.2},
      {.lr = 0.05, .betas = {0.5, 0.7}, .weight_decay = 0.1, .amsgrad = true},
      {.lr = 0.1, .weight_decay = 0.1, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::AdamW opt({p}, cases[c]);
    EXPECT_STREQ(opt.name(), "AdamW");
    expect_matches_reference(opt, p, adam_reference(optim::AdamW::convert(cases[c]), true), 8,
                             "AdamW case " + std::to_string(c));
  }
}

// float32 parameters: the same update, rounded to float32 at each op.
TEST(Adam, Float32ParamsFollowTheFloat64Reference) {
  optim::AdamOptions o{.lr = 0.1, .weight_decay = 0.01, .amsgrad = true};
  Tensor p = make_param(initial_values()).detach().to(kFloat32);
  p.requires_grad_();
  optim::Adam opt({p}, o);
  ReferenceStep ref = adam_reference(o, false);
  std::vector<double> want = values(p);
  for (int t = 0; t < 5; ++t) {
    std::vector<double> g = fixed_grad(t);
    std::vector<double> g32(g.size());
    for (size_t i = 0; i < g.size(); ++i) g32[i] = static_cast<float>(g[i]);
    p.set_grad(tensor(g32, {2, 3}).to(kFloat32));
    opt.step();
    ref(want, g32);
    expect_tensor_near(p, want, {2, 3}, 1e-5, 1e-6, "float32 step " + std::to_string(t + 1));
  }
  EXPECT_EQ(opt.state(p).tensors.at("exp_avg").dtype(), kFloat32);
}

TEST(AdamW, DiffersFromAdamWithL2) {
  Tensor a = make_param(initial_values()), b = make_param(initial_values());
  optim::Adam adam({a}, {.lr = 0.1, .weight_decay = 0.1});
  optim::AdamW adamw({b}, {.lr = 0.1, .weight_decay = 0.1});
  a.set_grad(tensor(fixed_grad(1), {2, 3}));
  b.set_grad(tensor(fixed_grad(1), {2, 3}));
  adam.step();
  adamw.step();
  EXPECT_NE(values(a), values(b));
}

// ---- RMSprop ----

ReferenceStep rmsprop_reference(optim::RMSpropOptions o) {
  struct State {
    std::vector<double> sq, ga, buf;
  };
  auto s = std::make_shared<State>();
  return [o, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->sq.empty()) s->sq = s->ga = s->buf = std::vector<double>(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = (o.maximize ? -grad[i] : grad[i]) + o.weight_decay * p[i];
      s->sq[i] = o.alpha * s->sq[i] + (1 - o.alpha) * g * g;
      double avg;
      if (o.centered) {
        s->ga[i] = o.alpha * s->ga[i] + (1 - o.alpha) * g;
        avg = std::sqrt(s->sq[i] - s->ga[i] * s->ga[i]) + o.eps;
      } else {
        avg = std::sqrt(s->sq[i]) + o.eps;
      }
      if (o.momentum > 0) {
        s->buf[i] = o.momentum * s->buf[i] + g / avg;
        p[i] -= o.lr * s->buf[i];
      } else {
        p[i] -= o.lr * g / avg;
      }
    }
  };
}

TEST(RMSprop, MatchesReferenceForEachOption) {
  const optim::RMSpropOptions cases[] = {
      {.lr = 0.01},
      {.lr = 0.01, .alpha = 0.9, .eps = 1e-4},
      {.lr = 0.01, .weight_decay = 0.1},
      {.lr = 0.01, .momentum = 0.9},
      {.lr = 0.01, .alpha = 0.8, .centered = true},
      {.lr = 0.01, .alpha = 0.8, .weight_decay = 0.05, .momentum = 0.5, .centered = true, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::RMSprop opt({p}, cases[c]);
    expect_matches_reference(opt, p, rmsprop_reference(cases[c]), 8, "RMSprop case " + std::to_string(c), 1e-10);
  }
}

// ---- Adagrad ----

ReferenceStep adagrad_reference(optim::AdagradOptions o) {
  struct State {
    std::vector<double> sum;
    int t = 0;
  };
  auto s = std::make_shared<State>();
  return [o, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->sum.empty()) s->sum.assign(p.size(), o.initial_accumulator_value);
    ++s->t;
    double clr = o.lr / (1 + (s->t - 1) * o.lr_decay);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = (o.maximize ? -grad[i] : grad[i]) + o.weight_decay * p[i];
      s->sum[i] += g * g;
      p[i] -= clr * g / (std::sqrt(s->sum[i]) + o.eps);
    }
  };
}

TEST(Adagrad, MatchesReferenceForEachOption) {
  const optim::AdagradOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.1, .lr_decay = 0.5},
      {.lr = 0.1, .weight_decay = 0.1},
      {.lr = 0.1, .initial_accumulator_value = 0.5, .eps = 1e-3},
      {.lr = 0.1, .lr_decay = 0.1, .weight_decay = 0.05, .initial_accumulator_value = 0.2, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::Adagrad opt({p}, cases[c]);
    expect_matches_reference(opt, p, adagrad_reference(cases[c]), 8, "Adagrad case " + std::to_string(c), 1e-10);
  }
}

// ---- with gradients from backward ----

// loss = sum(0.5 * a * (p - c)^2), so dloss/dp = a * (p - c): the reference computes that from its own p.
TEST(Optimizers, MinimizeAQuadraticThroughBackward) {
  const std::vector<double> a = {1.0, 2.0, 0.5, 3.0, 1.5, 0.25}, c = {1.0, -2.0, 0.5, 0.0, 2.0, -1.0};
  Tensor at = tensor(a, {2, 3}), ct = tensor(c, {2, 3});
  auto run = [&](optim::Optimizer& opt, const Tensor& p, ReferenceStep ref, const std::string& what) {
    std::vector<double> want = values(p);
    double first_loss = 0, loss_value = 0;
    for (int t = 0; t < 30; ++t) {
      opt.zero_grad();
      Tensor d = sub(p, ct);
      Tensor loss = sum(mul(mul(d, d), at)) * 0.5;
      loss.backward();
      loss_value = loss.item<double>();
      if (t == 0) first_loss = loss_value;
      opt.step();
      std::vector<double> g(want.size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = a[i] * (want[i] - c[i]);
      ref(want, g);
      expect_tensor_near(p, want, {2, 3}, 1e-10, 1e-13, what + ", step " + std::to_string(t + 1));
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_LT(loss_value, 0.5 * first_loss) << what;
  };
  {
    optim::SGDOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true};
    Tensor p = make_param(initial_values());
    optim::SGD opt({p}, o);
    run(opt, p, sgd_reference(o), "SGD nesterov");
  }
  {
    optim::AdamOptions o{.lr = 0.1, .amsgrad = true};
    Tensor p = make_param(initial_values());
    optim::Adam opt({p}, o);
    run(opt, p, adam_reference(o, false), "Adam amsgrad");
  }
  {
    optim::RMSpropOptions o{.lr = 0.01, .momentum = 0.5, .centered = true};
    Tensor p = make_param(initial_values());
    optim::RMSprop opt({p}, o);
    run(opt, p, rmsprop_reference(o), "RMSprop centered");
  }
}

// ---- groups, skipping, zero_grad ----

// A group added with some options left out takes the optimizer's defaults for them, as PyTorch's
// add_param_group does: the options it was made with, not the first group's as they are now.
TEST(Optimizer, AnOptionLeftOutOfANewGroupTakesTheOptimizersDefault) {
  Tensor p = make_param(initial_values()), q = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  opt.param_groups()[0].options["momentum"] = 0.5;  // as a scheduler cycling momentum would
  opt.add_param_group({q}, {{"lr", 0.2}, {"weight_decay", 0.0}});
  const std::map<std::string, double>& g = opt.param_groups()[1].options;
  EXPECT_EQ(g.at("lr"), 0.2);
  EXPECT_EQ(g.at("weight_decay"), 0.0);
  EXPECT_EQ(g.at("momentum"), 0.9);
  EXPECT_EQ(g.at("dampening"), 0.0);
  EXPECT_EQ(g.size(), opt.defaults().size());
  EXPECT_EQ(opt.defaults().at("momentum"), 0.9);
  EXPECT_EQ(opt.defaults().at("lr"), 0.1);
}

TEST(Optimizer, GroupsHaveTheirOwnOptionsAndParamsWithoutGradAreSkipped) {
  Tensor p = make_param(initial_values()), q = make_param(initial_values()), r = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 0.1});
  opt.add_param_group({q}, optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  opt.add_param_group({r}, {.lr = 1.0});  // the options type may be left out
  ASSERT_EQ(opt.param_groups().size(), 3u);
  std::vector<double> g = fixed_grad(1);
  p.set_grad(tensor(g, {2, 3}));
  q.set_grad(tensor(g, {2, 3}));
  opt.step();  // r has no grad: untouched, and no state made for it
  std::vector<double> want_p = initial_values(), want_q = initial_values();
  for (size_t i = 0; i < g.size(); ++i) want_p[i] -= 0.1 * g[i], want_q[i] -= 0.01 * g[i];
  expect_tensor_near(p, want_p, {2, 3}, "group 0");
  expect_tensor_near(q, want_q, {2, 3}, "group 1");
  EXPECT_EQ(values(r), initial_values());
  EXPECT_TRUE(opt.state(r).tensors.empty());
  EXPECT_TRUE(opt.state(p).tensors.empty());  // no momentum in group 0
  EXPECT_EQ(opt.state(q).tensors.count("momentum_buffer"), 1u);
}

TEST(Optimizer, ZeroGrad) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 0.1});
  p.set_grad(tensor(fixed_grad(1), {2, 3}));
  opt.zero_grad(false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(values(p.grad()), std::vector<double>(6, 0.0));
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  opt.step();  // no grads: nothing happens
  EXPECT_EQ(values(p), initial_values());
}

TEST(Optimizer, StepDoesNotRecordHistory) {
  Tensor p = make_param(initial_values());
  optim::Adam opt({p}, {.lr = 0.1});
  p.set_grad(tensor(fixed_grad(1), {2, 3}));
  opt.step();
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(p.grad_fn(), nullptr);
}

// ---- the fused updates (kiln/tensor/ops/fused_optim.h) ----

// Two copies of one parameter step side by side with the same gradients: one gradient contiguous (the fused
// loop), the other the same values as a transposed view (the chain of tensor ops). Every option that changes
// the update, both float dtypes. The compiler may fuse a multiply and an add across what are two kernels in
// the chain, so the last bit may differ: within ~16 units of rounding after four steps.
template <typename Opt, typename Options>
void expect_fused_equals_chain(const Options& options, const std::string& what) {
  for (DType d : {kFloat32, kFloat64}) {
    SCOPED_TRACE(what + " " + dtype_name(d));
    std::mt19937 rng(31);
    const std::vector<double> init = random_values(20, d, rng);
    Tensor fused_p = make_tensor(init, {4, 5}, d).requires_grad_(), chain_p = make_tensor(init, {4, 5}, d).requires_grad_();
    Opt fused_opt({fused_p}, options), chain_opt({chain_p}, options);
    for (int t = 0; t < 4; ++t) {
      const std::vector<double> g = random_values(20, d, rng);
      fused_p.set_grad(make_tensor(g, {4, 5}, d));
      std::vector<double> gt(20);  // g transposed, so that gt viewed as (5, 4)^T is g
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j) gt[j * 4 + i] = g[i * 5 + j];
      Tensor strided = make_tensor(gt, {5, 4}, d).t();
      ASSERT_FALSE(strided.is_contiguous());
      chain_p.set_grad(strided);
      fused_opt.step();
      chain_opt.step();
      const double rtol = d == kFloat32 ? 1e-6 : 1e-14;
      expect_tensor_near(fused_p, values(chain_p), {4, 5}, rtol, rtol / 10, "step " + std::to_string(t + 1));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(FusedCpu, SgdEqualsTheOpChain) {
  using O = optim::SGDOptions;
  expect_fused_equals_chain<optim::SGD>(O{.lr = 0.1}, "plain");
  expect_fused_equals_chain<optim::SGD>(O{.lr = 0.1, .momentum = 0.9}, "momentum");
  expect_fused_equals_chain<optim::SGD>(O{.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.01},
                                        "dampening, weight decay");
  expect_fused_equals_chain<optim::SGD>(O{.lr = 0.1, .momentum = 0.9, .nesterov = true, .maximize = true},
                                        "nesterov, maximize");
}

TEST(FusedCpu, AdamEqualsTheOpChain) {
  using O = optim::AdamOptions;
  expect_fused_equals_chain<optim::Adam>(O{.lr = 1e-2}, "defaults");
  expect_fused_equals_chain<optim::Adam>(O{.lr = 1e-2, .betas = {0.3, 0.5}, .eps = 1e-3, .weight_decay = 0.1},
                                         "beta1 < 0.5 (lerp's other form), weight decay");
  expect_fused_equals_chain<optim::Adam>(O{.lr = 1e-2, .maximize = true}, "maximize");
  expect_fused_equals_chain<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1}, "AdamW");
}

// A gradient with g's values laid out with every stride doubled: not contiguous, so its parameter takes the chain.
Tensor strided_grad(const std::vector<double>& g, IntArrayRef shape, DType d) {
  std::vector<double> spread(2 * g.size());
  for (size_t i = 0; i < g.size(); ++i) spread[2 * i] = g[i];
  Shape strides = contiguous_strides(shape);
  for (auto& s : strides) s *= 2;
  return make_tensor(spread, {static_cast<int64_t>(spread.size())}, d).as_strided(shape, strides, 0);
}

// One group holding what a real model holds: float32 and float64 parameters (two fused calls), one whose gradient
// is strided (the chain, in the same step), an empty one, and one without a gradient in the first step (so its
// step count and momentum buffer lag the others': a second fused call with new buffers, per-parameter bias
// corrections). Each parameter must end where the chain alone takes a copy of it.
template <typename Opt, typename Options>
void expect_grouped_fused_equals_chain(const Options& options, const std::string& what) {
  SCOPED_TRACE(what);
  struct Case {
    Shape shape;
    DType dtype;
    bool strided;      // its gradient is strided in the grouped optimizer too
    bool late;         // no gradient in step 0
  };
  const std::vector<Case> cases = {{{4, 5}, kFloat32, false, false}, {{3}, kFloat64, false, false},
                                   {{7}, kFloat32, true, false},     {{0}, kFloat32, false, false},
                                   {{200, 3}, kFloat32, false, true}, {{1}, kFloat64, false, true}};
  std::mt19937 rng(7);
  std::vector<Tensor> grouped, alone;
  std::vector<std::unique_ptr<Opt>> alone_opts;
  for (const Case& c : cases) {
    const std::vector<double> init = random_values(shape_numel(c.shape), c.dtype, rng);
    grouped.push_back(make_tensor(init, c.shape, c.dtype).requires_grad_());
    alone.push_back(make_tensor(init, c.shape, c.dtype).requires_grad_());
    alone_opts.push_back(std::make_unique<Opt>(std::vector<Tensor>{alone.back()}, options));
  }
  Opt opt(grouped, options);
  for (int t = 0; t < 4; ++t) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      if (t == 0 && c.late) continue;
      const std::vector<double> g = random_values(shape_numel(c.shape), c.dtype, rng);
      grouped[k].set_grad(c.strided ? strided_grad(g, c.shape, c.dtype) : make_tensor(g, c.shape, c.dtype));
      alone[k].set_grad(strided_grad(g, c.shape, c.dtype));
      alone_opts[k]->step();
    }
    opt.step();
    opt.zero_grad();
    for (size_t k = 0; k < cases.size(); ++k) {
      const double rtol = cases[k].dtype == kFloat32 ? 1e-6 : 1e-14;
      expect_tensor_near(grouped[k], values(alone[k]), cases[k].shape, rtol, rtol / 10,
                         "parameter " + std::to_string(k) + " after step " + std::to_string(t + 1));
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(FusedCpu, AGroupOfMixedParametersEqualsTheChainPerParameter) {
  expect_grouped_fused_equals_chain<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01},
                                                "SGD with momentum");
  expect_grouped_fused_equals_chain<optim::SGD>(optim::SGDOptions{.lr = 0.1}, "plain SGD");
  expect_grouped_fused_equals_chain<optim::Adam>(optim::AdamOptions{.lr = 1e-2}, "Adam");
  expect_grouped_fused_equals_chain<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1}, "AdamW");
}

// The fused ops check their lists before touching anything.
TEST(FusedCpu, BadListsAreClearErrors) {
  Tensor p = zeros({3}), g = ones({3}), b = zeros({3}), b2 = zeros({3});
  const std::vector<Tensor> ps{p}, gs{g}, bs{b}, bs2{b2}, none;
  const uint64_t version = p.version();
  const SgdStepParams sgd{.lr = 0.1, .momentum = 0.9};
  expect_error([&] { ops::fused_sgd_step_(ps, none, bs, sgd); }, {"SGD.step", "1 parameters", "0 gradients"});
  expect_error([&] { ops::fused_sgd_step_(ps, gs, none, sgd); }, {"SGD.step", "0 momentum buffers"});
  const std::vector<Tensor> wrong_size{zeros({4})}, wrong_dtype{zeros({3}, kFloat64)},
      strided{zeros({6}).as_strided({3}, {2}, 0)};
  expect_error([&] { ops::fused_sgd_step_(ps, wrong_size, bs, sgd); }, {"gradients 0", "size (3)", "size (4)"});
  expect_error([&] { ops::fused_sgd_step_(ps, wrong_dtype, bs, sgd); }, {"gradients 0", "float32", "float64"});
  expect_error([&] { ops::fused_sgd_step_(ps, gs, strided, sgd); }, {"momentum buffers 0", "not contiguous"});
  const std::vector<Tensor> ints{zeros({3}, kInt32)};
  expect_error([&] { ops::fused_sgd_step_(ints, ints, ints, sgd); }, {"int32", "float32 and float64"});
  const std::vector<Tensor> two{p, zeros({2}, kFloat64)}, two_g{g, zeros({2}, kFloat64)};
  expect_error([&] { ops::fused_sgd_step_(two, two_g, {}, {.lr = 0.1}); }, {"parameter 1", "one device and dtype"});
  const std::vector<double> zero_step{0};
  expect_error([&] { ops::fused_adam_step_(ps, gs, bs, bs2, zero_step, {.lr = 0.1}); }, {"step count", "start at 1"});
  expect_error([&] { ops::fused_adam_step_(ps, gs, bs, bs2, {}, {.lr = 0.1}); }, {"0 step counts"});
  const std::vector<double> one_step{1};
  expect_error([&] { ops::fused_adam_step_(ps, gs, bs, bs, one_step, {.lr = 0.1}); },
               {"parameter 0", "exp_avg and exp_avg_sq share memory"});
  expect_error([&] { ops::fused_sgd_step_(ps, ps, bs, sgd); }, {"the parameter and gradients share memory"});
  EXPECT_EQ(values(p), std::vector<double>(3, 0.0));  // nothing was written
  EXPECT_EQ(p.version(), version);                     // nor marked as written
}

// The fused loops write through raw pointers; they must still bump the version, so that a graph that saved
// the parameter before the step refuses to run backward after it.
TEST(FusedCpu, TheStepBumpsTheParameterVersion) {
  for (int which = 0; which < 2; ++which) {
    Tensor p = tensor(std::vector<float>{1, 2, 3}).requires_grad_();
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0) opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{.lr = 0.1});
    Tensor y = (p * p).sum();
    p.set_grad(tensor(std::vector<float>{1, 1, 1}));
    const uint64_t before = p.version();
    opt->step();
    EXPECT_GT(p.version(), before);
    expect_error([&] { y.backward(); }, {"modified"});
  }
}

// ---- bad arguments ----

TEST(Optimizer, BadHyperparametersAndParametersAreErrors) {
  Tensor p = make_param(initial_values());
  expect_error([&] { optim::SGD({p}, {.lr = -0.1}); }, {"SGD", "lr", "-0.1"});
  expect_error([&] { optim::SGD({p}, {.lr = 0.1, .momentum = -1}); }, {"SGD", "momentum"});
  expect_error([&] { optim::SGD({p}, {.lr = 0.1, .nesterov = true}); }, {"SGD", "nesterov", "momentum"});
  expect_error([&] { optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
               {"nesterov", "dampening"});
  expect_error([&] { optim::Adam({p}, {.betas = {1.0, 0.999}}); }, {"Adam", "beta1", "[0, 1)"});
  expect_error([&] { optim::Adam({p}, {.betas = {0.9, -0.1}}); }, {"Adam", "beta2"});
  expect_error([&] { optim::Adam({p}, {.eps = -1}); }, {"Adam", "eps"});
  expect_error([&] { optim::AdamW({p}, {.weight_decay = -1}); }, {"AdamW", "weight_decay"});
  expect_error([&] { optim::RMSprop({p}, {.alpha = -0.5}); }, {"RMSprop", "alpha"});
  expect_error([&] { optim::RMSprop({p}, {.alpha = 1.5}); }, {"RMSprop", "alpha", "[0, 1)"});
  expect_error([&] { optim::Adagrad({p}, {.lr_decay = -0.5}); }, {"Adagrad", "lr_decay"});
  expect_error([&] { optim::Adagrad({p}, {.lr = std::nan("")}); }, {"Adagrad", "lr"});
  expect_error([&] { optim::SGD({}, {.lr = 0.1}); }, {"SGD", "empty parameter list"});
  expect_error([&] { optim::SGD({p, p}, {.lr = 0.1}); }, {"SGD", "more than one parameter group"});
  expect_error([&] { optim::SGD({tensor(std::vector<int64_t>{1, 2})}); }, {"SGD", "floating-point", "int64"});
  Tensor nonleaf = mul(p, 2.0);
  expect_error([&] { optim::SGD({nonleaf}); }, {"SGD", "non-leaf"});
  optim::SGD opt({p}, {.lr = 0.1});
  expect_error([&] { opt.add_param_group({p}, optim::SGDOptions{}); }, {"more than one parameter group"});
  expect_error([&] { opt.add_param_group({make_param(initial_values())}, {{"lr", -1.0}}); }, {"SGD", "lr"});
}

}  // namespace
}  // namespace kiln::test
