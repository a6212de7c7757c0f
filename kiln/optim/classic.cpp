// The classic first-order optimizers torch.optim keeps beside the Adam family: Adadelta, Rprop and averaged
// SGD (formulas in adadelta.h, rprop.h and asgd.h). Each is a few element-wise tensor ops per parameter, so
// they run on every device those ops run on.
#include <algorithm>
#include <cmath>

#include "kiln/optim/adadelta.h"
#include "kiln/optim/asgd.h"
#include "kiln/optim/option_util.h"
#include "kiln/optim/rprop.h"

namespace kiln::optim {

namespace {
// The gradient the update uses: negated when maximizing, plus weight_decay * p.
Tensor update_gradient(const Tensor& p, bool maximize, double weight_decay) {
  Tensor g = maximize ? neg(p.grad()) : p.grad();
  if (weight_decay != 0) g = add(g, p, weight_decay);
  return g;
}
}  // namespace

// ---- Adadelta ----

std::map<std::string, double> Adadelta::to_map(const AdadeltaOptions& o) {
  return {{"lr", o.lr}, {"rho", o.rho}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

AdadeltaOptions Adadelta::from_map(const std::map<std::string, double>& m) {
  return {.lr = option(m, "Adadelta", "lr"),
          .rho = option(m, "Adadelta", "rho"),
          .eps = option(m, "Adadelta", "eps"),
          .weight_decay = option(m, "Adadelta", "weight_decay"),
          .maximize = option(m, "Adadelta", "maximize") != 0.0};
}

Adadelta::Adadelta(std::vector<Tensor> params, AdadeltaOptions options) {
  add_param_group(std::move(params), to_map(options));
}

void Adadelta::validate_options(const std::map<std::string, double>& m) const {
  const AdadeltaOptions o = from_map(m);
  check_non_negative("Adadelta", "lr", o.lr);
  KILN_CHECK(o.rho >= 0.0 && o.rho <= 1.0, "Adadelta: invalid rho ", o.rho, " (must be in [0, 1])");
  check_non_negative("Adadelta", "eps", o.eps);
  check_non_negative("Adadelta", "weight_decay", o.weight_decay);
}

void Adadelta::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const AdadeltaOptions o = from_map(group.options);
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      if (!st.tensors.count("square_avg")) {
        st.scalars["step"] = 0;
        st.tensors["square_avg"] = zeros_like(p);
        st.tensors["acc_delta"] = zeros_like(p);
      }
      ++st.scalars["step"];
      const Tensor g = update_gradient(p, o.maximize, o.weight_decay);
      Tensor& v = st.tensors["square_avg"];
      Tensor& u = st.tensors["acc_delta"];
      v.mul_(o.rho).add_(mul(g, g), 1 - o.rho);
      const Tensor delta = mul(div(sqrt(add(u, o.eps)), sqrt(add(v, o.eps))), g);
      u.mul_(o.rho).add_(mul(delta, delta), 1 - o.rho);
      p.add_(delta, -o.lr);
    }
  }
}

// ---- Rprop ----

std::map<std::string, double> Rprop::to_map(const RpropOptions& o) {
  return {{"lr", o.lr},
          {"etaminus", o.etaminus},
          {"etaplus", o.etaplus},
          {"step_size_min", o.step_size_min},
          {"step_size_max", o.step_size_max},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

RpropOptions Rprop::from_map(const std::map<std::string, double>& m) {
  return {.lr = option(m, "Rprop", "lr"),
          .etaminus = option(m, "Rprop", "etaminus"),
          .etaplus = option(m, "Rprop", "etaplus"),
          .step_size_min = option(m, "Rprop", "step_size_min"),
          .step_size_max = option(m, "Rprop", "step_size_max"),
          .maximize = option(m, "Rprop", "maximize") != 0.0};
}

Rprop::Rprop(std::vector<Tensor> params, RpropOptions options) { add_param_group(std::move(params), to_map(options)); }

void Rprop::validate_options(const std::map<std::string, double>& m) const {
  const RpropOptions o = from_map(m);
  check_non_negative("Rprop", "lr", o.lr);
  KILN_CHECK(0.0 < o.etaminus && o.etaminus < 1.0 && o.etaplus > 1.0, "Rprop: invalid etas (", o.etaminus, ", ",
             o.etaplus, "): expected 0 < etaminus < 1 < etaplus");
  KILN_CHECK(0.0 <= o.step_size_min && o.step_size_min <= o.step_size_max, "Rprop: invalid step sizes (",
             o.step_size_min, ", ", o.step_size_max, "): expected 0 <= step_size_min <= step_size_max");
}

void Rprop::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const RpropOptions o = from_map(group.options);
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      if (!st.tensors.count("prev")) {
        st.scalars["step"] = 0;
        st.tensors["prev"] = zeros_like(p);
        st.tensors["step_size"] = full_like(p, o.lr);
      }
      ++st.scalars["step"];
      Tensor g = o.maximize ? neg(p.grad()) : p.grad();
      Tensor& prev = st.tensors["prev"];
      Tensor& step_size = st.tensors["step_size"];
      const Tensor s = mul(g, prev).sign();
      const Tensor flipped = s < 0.0;
      const Tensor factor = where(s > 0.0, o.etaplus, where(flipped, o.etaminus, full_like(g, 1.0)));
      step_size.copy_(clamp(mul(step_size, factor), o.step_size_min, o.step_size_max));
      g = where(flipped, 0.0, g);
      p.add_(mul(g.sign(), step_size), -1.0);
      prev.copy_(g);
    }
  }
}

// ---- ASGD ----

std::map<std::string, double> ASGD::to_map(const ASGDOptions& o) {
  return {{"lr", o.lr},       {"lambd", o.lambd},
          {"alpha", o.alpha}, {"t0", o.t0},
          {"weight_decay", o.weight_decay}, {"maximize", o.maximize ? 1.0 : 0.0}};
}

ASGDOptions ASGD::from_map(const std::map<std::string, double>& m) {
  return {.lr = option(m, "ASGD", "lr"),
          .lambd = option(m, "ASGD", "lambd"),
          .alpha = option(m, "ASGD", "alpha"),
          .t0 = option(m, "ASGD", "t0"),
          .weight_decay = option(m, "ASGD", "weight_decay"),
          .maximize = option(m, "ASGD", "maximize") != 0.0};
}

ASGD::ASGD(std::vector<Tensor> params, ASGDOptions options) { add_param_group(std::move(params), to_map(options)); }

void ASGD::validate_options(const std::map<std::string, double>& m) const {
  const ASGDOptions o = from_map(m);
  check_non_negative("ASGD", "lr", o.lr);
  check_non_negative("ASGD", "lambd", o.lambd);
  check_non_negative("ASGD", "alpha", o.alpha);
  check_non_negative("ASGD", "t0", o.t0);
  check_non_negative("ASGD", "weight_decay", o.weight_decay);
}

void ASGD::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const ASGDOptions o = from_map(group.options);
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      if (!st.tensors.count("ax")) {
        st.scalars["step"] = 0;
        st.scalars["eta"] = o.lr;
        st.scalars["mu"] = 1;
        st.tensors["ax"] = zeros_like(p);
      }
      const double step = ++st.scalars["step"];
      const double eta = st.scalars["eta"], mu = st.scalars["mu"];
      const Tensor g = update_gradient(p, o.maximize, o.weight_decay);
      p.mul_(1 - o.lambd * eta);
      p.add_(g, -eta);
      Tensor& ax = st.tensors["ax"];
      if (mu != 1) ax.add_(mul(p - ax, mu));
      else ax.copy_(p);
      st.scalars["eta"] = o.lr / std::pow(1 + o.lambd * o.lr * step, o.alpha);
      st.scalars["mu"] = 1 / std::max(1.0, step - o.t0);
    }
  }
}

}  // namespace kiln::optim
