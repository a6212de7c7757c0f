// Adamax, NAdam and RAdam against float64 scalar code written out from torch.optim's formulas (their
// documentation's algorithm boxes), and resumed bitwise from a state_dict.
#include <algorithm>
#include <cmath>
#include <memory>

#include "optim/optim_test_util.h"

namespace kiln::test {
namespace {

struct Moments {
  std::vector<double> m, v;
  int t = 0;
  double mu_product = 1.0;
};

// The gradient after maximize and coupled weight decay, or p after decoupled decay.
double decayed_grad(double grad, double& p, double lr, double weight_decay, bool decoupled, bool maximize) {
  double g = maximize ? -grad : grad;
  if (decoupled) p *= 1 - lr * weight_decay;
  else g += weight_decay * p;
  return g;
}

ReferenceStep adamax_reference(optim::AdamaxOptions o) {
  auto s = std::make_shared<Moments>();
  return [o, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->m.empty()) s->m = s->v = std::vector<double>(p.size(), 0.0);
    ++s->t;
    auto [b1, b2] = o.betas;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = decayed_grad(grad[i], p[i], o.lr, o.weight_decay, false, o.maximize);
      s->m[i] = b1 * s->m[i] + (1 - b1) * g;
      s->v[i] = std::max(b2 * s->v[i], std::fabs(g) + o.eps);  // the infinity norm
      p[i] -= o.lr / (1 - std::pow(b1, s->t)) * s->m[i] / s->v[i];
    }
  };
}

ReferenceStep nadam_reference(optim::NAdamOptions o) {
  auto s = std::make_shared<Moments>();
  return [o, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->m.empty()) s->m = s->v = std::vector<double>(p.size(), 0.0);
    ++s->t;
    auto [b1, b2] = o.betas;
    const double mu = b1 * (1 - 0.5 * std::pow(0.96, s->t * o.momentum_decay));
    const double mu_next = b1 * (1 - 0.5 * std::pow(0.96, (s->t + 1) * o.momentum_decay));
    s->mu_product *= mu;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = decayed_grad(grad[i], p[i], o.lr, o.weight_decay, o.decoupled_weight_decay, o.maximize);
      s->m[i] = b1 * s->m[i] + (1 - b1) * g;
      s->v[i] = b2 * s->v[i] + (1 - b2) * g * g;
      const double v_hat = s->v[i] / (1 - std::pow(b2, s->t));
      const double m_hat = mu_next * s->m[i] / (1 - s->mu_product * mu_next) + (1 - mu) * g / (1 - s->mu_product);
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  };
}

ReferenceStep radam_reference(optim::RAdamOptions o) {
  auto s = std::make_shared<Moments>();
  return [o, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->m.empty()) s->m = s->v = std::vector<double>(p.size(), 0.0);
    ++s->t;
    auto [b1, b2] = o.betas;
    const double rho_inf = 2 / (1 - b2) - 1;
    const double rho_t = rho_inf - 2 * s->t * std::pow(b2, s->t) / (1 - std::pow(b2, s->t));
    for (size_t i = 0; i < p.size(); ++i) {
      double g = decayed_grad(grad[i], p[i], o.lr, o.weight_decay, o.decoupled_weight_decay, o.maximize);
      s->m[i] = b1 * s->m[i] + (1 - b1) * g;
      s->v[i] = b2 * s->v[i] + (1 - b2) * g * g;
      const double m_hat = s->m[i] / (1 - std::pow(b1, s->t));
      if (rho_t > 5) {
        const double l = std::sqrt(1 - std::pow(b2, s->t)) / (std::sqrt(s->v[i]) + o.eps);
        const double r = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
        p[i] -= o.lr * m_hat * l * r;
      } else {
        p[i] -= o.lr * m_hat;
      }
    }
  };
}

TEST(Adamax, MatchesReferenceForEachOption) {
  const optim::AdamaxOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.05, .betas = {0.8, 0.9}, .eps = 1e-3},
      {.lr = 0.1, .weight_decay = 0.1},
      {.lr = 0.1, .betas = {0.5, 0.5}, .weight_decay = 0.05, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::Adamax opt({p}, cases[c]);
    expect_matches_reference(opt, p, adamax_reference(cases[c]), 8, "Adamax case " + std::to_string(c));
    EXPECT_EQ(opt.state(p).scalars.at("step"), 8.0);
  }
}

TEST(NAdam, MatchesReferenceForEachOption) {
  const optim::NAdamOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.05, .betas = {0.8, 0.9}, .eps = 1e-3},
      {.lr = 0.1, .momentum_decay = 0.3},  // a fast warm-up: mu moves visibly over 8 steps
      {.lr = 0.1, .weight_decay = 0.1},
      {.lr = 0.1, .weight_decay = 0.1, .decoupled_weight_decay = true, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::NAdam opt({p}, cases[c]);
    expect_matches_reference(opt, p, nadam_reference(cases[c]), 8, "NAdam case " + std::to_string(c), 1e-10);
  }
}

// rho_t passes 5 at step 6 with beta2 = 0.999 and at step 10 with beta2 = 0.7: every case takes both branches.
TEST(RAdam, MatchesReferenceOnBothSidesOfTheRectification) {
  const optim::RAdamOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.05, .betas = {0.8, 0.7}, .eps = 1e-3},
      {.lr = 0.1, .weight_decay = 0.1},
      {.lr = 0.1, .betas = {0.9, 0.7}, .weight_decay = 0.1, .decoupled_weight_decay = true, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::RAdam opt({p}, cases[c]);
    expect_matches_reference(opt, p, radam_reference(cases[c]), 10, "RAdam case " + std::to_string(c), 1e-10);
  }
  // The first steps are plain momentum SGD: one step moves p by exactly lr * g.
  Tensor p = make_param(initial_values());
  optim::RAdam opt({p}, {.lr = 0.5});
  p.set_grad(tensor(fixed_grad(1), {2, 3}));
  opt.step();
  std::vector<double> want = initial_values();
  for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5 * fixed_grad(1)[i];
  expect_tensor_near(p, want, {2, 3}, 1e-15, 1e-15, "RAdam step 1");
}

// A float32 parameter follows the float64 reference within float32 rounding; state keeps the param's dtype.
TEST(AdamVariants, Float32ParamsFollowTheFloat64Reference) {
  auto run = [](auto make, ReferenceStep ref, const std::string& what) {
    Tensor p = make_param(initial_values()).detach().to(kFloat32);
    p.requires_grad_();
    auto opt = make(p);
    std::vector<double> want = values(p);
    for (int t = 0; t < 6; ++t) {
      std::vector<double> g = fixed_grad(t);
      for (double& x : g) x = static_cast<float>(x);
      p.set_grad(tensor(g, {2, 3}).to(kFloat32));
      opt->step();
      ref(want, g);
      expect_tensor_near(p, want, {2, 3}, 1e-5, 1e-6, what + " step " + std::to_string(t + 1));
    }
    EXPECT_EQ(opt->state(p).tensors.at("exp_avg").dtype(), kFloat32) << what;
  };
  const optim::AdamaxOptions ax{.lr = 0.1, .weight_decay = 0.01};
  run([&](Tensor p) { return std::make_unique<optim::Adamax>(std::vector<Tensor>{p}, ax); },
      adamax_reference(ax), "Adamax");
  const optim::NAdamOptions na{.lr = 0.1, .weight_decay = 0.01};
  run([&](Tensor p) { return std::make_unique<optim::NAdam>(std::vector<Tensor>{p}, na); },
      nadam_reference(na), "NAdam");
  const optim::RAdamOptions ra{.lr = 0.1};  // rectified from step 6
  run([&](Tensor p) { return std::make_unique<optim::RAdam>(std::vector<Tensor>{p}, ra); },
      radam_reference(ra), "RAdam");
}

TEST(AdamVariants, BadOptionsAreRefused) {
  Tensor p = make_param(initial_values());
  expect_error([&] { optim::Adamax({p}, {.lr = -1}); }, {"Adamax", "lr", "-1"});
  expect_error([&] { optim::Adamax({p}, {.betas = {0.9, 1.0}}); }, {"Adamax", "beta2", "[0, 1)"});
  expect_error([&] { optim::NAdam({p}, {.momentum_decay = -0.1}); }, {"NAdam", "momentum_decay"});
  expect_error([&] { optim::RAdam({p}, {.eps = -1e-8}); }, {"RAdam", "eps"});
}

}  // namespace
}  // namespace kiln::test
