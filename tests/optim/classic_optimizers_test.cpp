// Adadelta, Rprop and ASGD against float64 scalar code written out from torch.optim's formulas (adadelta.h,
// rprop.h, asgd.h), for each option, and through a state-dict round trip.
#include <algorithm>
#include <cmath>
#include <memory>

#include "optim/optim_test_util.h"

namespace kiln::test {
namespace {

ReferenceStep adadelta_reference(optim::AdadeltaOptions o) {
  struct State {
    std::vector<double> v, u;
  };
  auto s = std::make_shared<State>();
  return [o, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->v.empty()) s->v.assign(p.size(), 0.0), s->u.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = (o.maximize ? -grad[i] : grad[i]) + o.weight_decay * p[i];
      s->v[i] = o.rho * s->v[i] + (1 - o.rho) * g * g;
      const double d = std::sqrt(s->u[i] + o.eps) / std::sqrt(s->v[i] + o.eps) * g;
      s->u[i] = o.rho * s->u[i] + (1 - o.rho) * d * d;
      p[i] -= o.lr * d;
    }
  };
}

TEST(Adadelta, MatchesReferenceForEachOption) {
  const optim::AdadeltaOptions cases[] = {
      {},
      {.lr = 0.5, .rho = 0.5, .eps = 1e-3},
      {.lr = 1.0, .weight_decay = 0.1},
      {.lr = 0.3, .rho = 0.95, .weight_decay = 0.05, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::Adadelta opt({p}, cases[c]);
    expect_matches_reference(opt, p, adadelta_reference(cases[c]), 8, "Adadelta case " + std::to_string(c), 1e-10);
  }
}

ReferenceStep rprop_reference(optim::RpropOptions o) {
  struct State {
    std::vector<double> prev, step;
  };
  auto s = std::make_shared<State>();
  return [o, s](std::vector<double>& p, const std::vector<double>& grad) {
    if (s->prev.empty()) s->prev.assign(p.size(), 0.0), s->step.assign(p.size(), o.lr);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -grad[i] : grad[i];
      const double prod = g * s->prev[i];
      const double factor = prod > 0 ? o.etaplus : prod < 0 ? o.etaminus : 1.0;
      s->step[i] = std::clamp(s->step[i] * factor, o.step_size_min, o.step_size_max);
      if (prod < 0) g = 0;
      p[i] -= (g > 0 ? 1.0 : g < 0 ? -1.0 : 0.0) * s->step[i];
      s->prev[i] = g;
    }
  };
}

TEST(Rprop, MatchesReferenceForEachOption) {
  const optim::RpropOptions cases[] = {
      {},
      {.lr = 0.1, .etaminus = 0.3, .etaplus = 1.5},
      {.lr = 0.05, .step_size_min = 0.04, .step_size_max = 0.08},  // both clamps reached
      {.lr = 0.02, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::Rprop opt({p}, cases[c]);
    expect_matches_reference(opt, p, rprop_reference(cases[c]), 12, "Rprop case " + std::to_string(c), 1e-12);
  }
  Tensor p = make_param(initial_values());
  expect_error([&] { optim::Rprop({p}, {.etaminus = 1.5}); }, {"Rprop: invalid etas"});
  expect_error([&] { optim::Rprop({p}, {.step_size_min = 2, .step_size_max = 1}); }, {"Rprop: invalid step sizes"});
}

ReferenceStep asgd_reference(optim::ASGDOptions o, std::shared_ptr<std::vector<double>> ax) {
  struct State {
    double eta, mu = 1;
    int t = 0;
  };
  auto s = std::make_shared<State>(State{.eta = o.lr});
  return [o, s, ax](std::vector<double>& p, const std::vector<double>& grad) {
    if (ax->empty()) ax->assign(p.size(), 0.0);
    ++s->t;
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = (o.maximize ? -grad[i] : grad[i]) + o.weight_decay * p[i];
      p[i] = p[i] * (1 - o.lambd * s->eta) - s->eta * g;
      (*ax)[i] = s->mu == 1 ? p[i] : (*ax)[i] + s->mu * (p[i] - (*ax)[i]);
    }
    s->eta = o.lr / std::pow(1 + o.lambd * o.lr * s->t, o.alpha);
    s->mu = 1 / std::max(1.0, s->t - o.t0);
  };
}

// With t0 = 3 the average starts moving away from the iterate after step 4; ax checked too.
TEST(ASGD, MatchesReferenceForEachOptionAndAverages) {
  const optim::ASGDOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.1, .lambd = 0.05, .alpha = 0.5, .t0 = 3},
      {.lr = 0.05, .lambd = 0.01, .t0 = 2, .weight_decay = 0.1, .maximize = true},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    Tensor p = make_param(initial_values());
    optim::ASGD opt({p}, cases[c]);
    auto ax = std::make_shared<std::vector<double>>();
    expect_matches_reference(opt, p, asgd_reference(cases[c], ax), 10, "ASGD case " + std::to_string(c), 1e-11);
    expect_tensor_near(opt.state(p).tensors.at("ax"), *ax, p.sizes(), 1e-11, 1e-14, "ASGD ax, case " + std::to_string(c));
  }
}

// Each optimizer's state through state_dict / load_state_dict: a copy stepped after loading goes on exactly
// like the original.
TEST(ClassicOptimizers, StateDictRoundTripContinuesExactly) {
  auto check = [](auto make, const std::string& what) {
    Tensor a = make_param(initial_values()), b = make_param(initial_values());
    auto first = make(a);
    for (int t = 0; t < 4; ++t) {
      a.set_grad(tensor(fixed_grad(t), a.sizes()));
      first->step();
    }
    b.detach().copy_(a.detach());
    auto second = make(b);
    second->load_state_dict(first->state_dict());
    for (int t = 4; t < 8; ++t) {
      a.set_grad(tensor(fixed_grad(t), a.sizes()));
      b.set_grad(tensor(fixed_grad(t), b.sizes()));
      first->step();
      second->step();
    }
    EXPECT_TRUE(a.equal(b)) << what;
  };
  check([](const Tensor& p) { return std::make_unique<optim::Adadelta>(std::vector<Tensor>{p}); }, "Adadelta");
  check([](const Tensor& p) { return std::make_unique<optim::Rprop>(std::vector<Tensor>{p}); }, "Rprop");
  check([](const Tensor& p) { return std::make_unique<optim::ASGD>(std::vector<Tensor>{p}, optim::ASGDOptions{.t0 = 2}); },
        "ASGD");
}

}  // namespace
}  // namespace kiln::test
