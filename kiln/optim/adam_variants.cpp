// The updates of Adamax, NAdam and RAdam (see adamax.h, nadam.h and radam.h for the formulas), and what the
// three share with each other: the weight decay applied to the gradient or to the parameter, and Adam's first
// (and second) moment. Their options are Adam's (option_util.h) plus their own.
#include <cmath>

#include "kiln/optim/adamax.h"
#include "kiln/optim/nadam.h"
#include "kiln/optim/option_util.h"
#include "kiln/optim/radam.h"

namespace kiln::optim {

namespace {

// p's state, made on its first step: a step count and zero tensors under `keys`. Returns the new step count.
double next_step(ParamState& st, const Tensor& p, std::initializer_list<const char*> keys) {
  if (st.tensors.empty()) {
    st.scalars["step"] = 0;
    for (const char* key : keys) st.tensors[key] = zeros_like(p);
  }
  return st.scalars["step"] += 1;
}

// The gradient to use: negated when maximizing, plus weight_decay * p; or, with decoupled decay, p shrunk by
// lr * weight_decay and the gradient as it is.
Tensor decayed_gradient(const Tensor& p, double lr, double weight_decay, bool decoupled, bool maximize) {
  Tensor g = maximize ? neg(p.grad()) : p.grad();
  if (weight_decay == 0) return g;
  if (decoupled) {
    p.mul_(1.0 - lr * weight_decay);
    return g;
  }
  return add(g, p, weight_decay);
}

// Adam's moments: m = lerp(m, g, 1 - beta1) and v = beta2 * v + (1 - beta2) * g * g.
void update_moments(ParamState& st, const Tensor& g, double beta1, double beta2) {
  Tensor& exp_avg = st.tensors.at("exp_avg");
  Tensor& exp_avg_sq = st.tensors.at("exp_avg_sq");
  exp_avg.copy_(lerp(exp_avg, g, 1.0 - beta1));
  exp_avg_sq.mul_(beta2).add_(mul(g, g), 1.0 - beta2);
}

}  // namespace

// ---- Adamax ----

std::map<std::string, double> Adamax::to_map(const AdamaxOptions& o) { return adam_like_map(o); }

AdamaxOptions Adamax::from_map(const std::map<std::string, double>& m) {
  return adam_like_options<AdamaxOptions>(m, "Adamax");
}

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions options) {
  add_param_group(std::move(params), to_map(options));
}

void Adamax::validate_options(const std::map<std::string, double>& m) const { check_adam_like(from_map(m), name()); }

void Adamax::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const AdamaxOptions o = from_map(group.options);
    const auto [beta1, beta2] = o.betas;
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      const double step = next_step(st, p, {"exp_avg", "exp_inf"});
      const Tensor g = decayed_gradient(p, o.lr, o.weight_decay, false, o.maximize);
      Tensor& exp_avg = st.tensors.at("exp_avg");
      Tensor& exp_inf = st.tensors.at("exp_inf");
      exp_avg.copy_(lerp(exp_avg, g, 1.0 - beta1));
      exp_inf.copy_(maximum(mul(exp_inf, beta2), add(abs(g), o.eps)));
      p.add_(div(exp_avg, exp_inf), -o.lr / (1.0 - std::pow(beta1, step)));
    }
  }
}

// ---- NAdam ----

std::map<std::string, double> NAdam::to_map(const NAdamOptions& o) {
  auto m = adam_like_map(o);
  m["momentum_decay"] = o.momentum_decay;
  m["decoupled_weight_decay"] = o.decoupled_weight_decay ? 1.0 : 0.0;
  return m;
}

NAdamOptions NAdam::from_map(const std::map<std::string, double>& m) {
  auto o = adam_like_options<NAdamOptions>(m, "NAdam");
  o.momentum_decay = option(m, "NAdam", "momentum_decay");
  o.decoupled_weight_decay = option(m, "NAdam", "decoupled_weight_decay") != 0.0;
  return o;
}

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options) {
  add_param_group(std::move(params), to_map(options));
}

void NAdam::validate_options(const std::map<std::string, double>& m) const {
  const NAdamOptions o = from_map(m);
  check_adam_like(o, name());
  check_non_negative(name(), "momentum_decay", o.momentum_decay);
}

void NAdam::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const NAdamOptions o = from_map(group.options);
    const auto [beta1, beta2] = o.betas;
    // The momentum coefficient of step t.
    auto mu = [&](double t) { return beta1 * (1.0 - 0.5 * std::pow(0.96, t * o.momentum_decay)); };
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      if (st.tensors.empty()) st.scalars["mu_product"] = 1.0;
      const double step = next_step(st, p, {"exp_avg", "exp_avg_sq"});
      const double mu_t = mu(step), mu_next = mu(step + 1);
      const double mu_product = st.scalars["mu_product"] *= mu_t;
      const Tensor g = decayed_gradient(p, o.lr, o.weight_decay, o.decoupled_weight_decay, o.maximize);
      update_moments(st, g, beta1, beta2);
      const Tensor denom = add(sqrt(div(st.tensors.at("exp_avg_sq"), 1.0 - std::pow(beta2, step))), o.eps);
      p.add_(div(g, denom), -o.lr * (1.0 - mu_t) / (1.0 - mu_product));
      p.add_(div(st.tensors.at("exp_avg"), denom), -o.lr * mu_next / (1.0 - mu_product * mu_next));
    }
  }
}

// ---- RAdam ----

std::map<std::string, double> RAdam::to_map(const RAdamOptions& o) {
  auto m = adam_like_map(o);
  m["decoupled_weight_decay"] = o.decoupled_weight_decay ? 1.0 : 0.0;
  return m;
}

RAdamOptions RAdam::from_map(const std::map<std::string, double>& m) {
  auto o = adam_like_options<RAdamOptions>(m, "RAdam");
  o.decoupled_weight_decay = option(m, "RAdam", "decoupled_weight_decay") != 0.0;
  return o;
}

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options) {
  add_param_group(std::move(params), to_map(options));
}

void RAdam::validate_options(const std::map<std::string, double>& m) const { check_adam_like(from_map(m), name()); }

void RAdam::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const RAdamOptions o = from_map(group.options);
    const auto [beta1, beta2] = o.betas;
    const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      const double step = next_step(st, p, {"exp_avg", "exp_avg_sq"});
      const Tensor g = decayed_gradient(p, o.lr, o.weight_decay, o.decoupled_weight_decay, o.maximize);
      update_moments(st, g, beta1, beta2);
      const double bias_correction1 = 1.0 - std::pow(beta1, step);
      const double bias_correction2 = 1.0 - std::pow(beta2, step);
      const double rho_t = rho_inf - 2.0 * step * std::pow(beta2, step) / bias_correction2;
      const Tensor corrected = div(st.tensors.at("exp_avg"), bias_correction1);
      if (rho_t > 5.0) {
        const double rect = std::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf /
                                      ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t));
        const Tensor adaptive = std::sqrt(bias_correction2) / add(sqrt(st.tensors.at("exp_avg_sq")), o.eps);
        p.add_(mul(corrected, adaptive), -o.lr * rect);
      } else {
        p.add_(corrected, -o.lr);
      }
    }
  }
}

}  // namespace kiln::optim
