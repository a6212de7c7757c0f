// RMSprop's update; see rmsprop.h for the formula.
#include "kiln/optim/rmsprop.h"

#include "kiln/optim/option_util.h"

namespace kiln::optim {

std::map<std::string, double> RMSprop::to_map(const RMSpropOptions& o) {
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", o.centered ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

RMSpropOptions RMSprop::from_map(const std::map<std::string, double>& m) {
  RMSpropOptions o;
  o.lr = option(m, "RMSprop", "lr");
  o.alpha = option(m, "RMSprop", "alpha");
  o.eps = option(m, "RMSprop", "eps");
  o.weight_decay = option(m, "RMSprop", "weight_decay");
  o.momentum = option(m, "RMSprop", "momentum");
  o.centered = option(m, "RMSprop", "centered") != 0.0;
  o.maximize = option(m, "RMSprop", "maximize") != 0.0;
  return o;
}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options) {
  add_param_group(std::move(params), to_map(options));
}

void RMSprop::validate_options(const std::map<std::string, double>& m) const {
  RMSpropOptions o = from_map(m);
  check_non_negative("RMSprop", "lr", o.lr);
  check_non_negative("RMSprop", "eps", o.eps);
  check_non_negative("RMSprop", "momentum", o.momentum);
  check_non_negative("RMSprop", "weight_decay", o.weight_decay);
  // alpha >= 1 would weigh the new square by 1 - alpha <= 0: an average that stays 0 or goes negative.
  check_unit_interval("RMSprop", "alpha", o.alpha);
}

namespace {
// The state tensor `key`, made as zeros like p the first time it is asked for.
Tensor& state_tensor(ParamState& st, const char* key, const Tensor& p) {
  auto it = st.tensors.find(key);
  if (it == st.tensors.end()) it = st.tensors.emplace(key, zeros_like(p)).first;
  return it->second;
}
}  // namespace

void RMSprop::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    RMSpropOptions o = from_map(group.options);
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      Tensor g = o.maximize ? neg(p.grad()) : p.grad();
      ParamState& st = mutable_state(p);
      st.scalars["step"] += 1;
      if (o.weight_decay != 0) g = add(g, p, o.weight_decay);
      Tensor& square_avg = state_tensor(st, "square_avg", p);
      square_avg.mul_(o.alpha).add_(mul(g, g), 1.0 - o.alpha);
      Tensor avg;
      if (o.centered) {
        Tensor& grad_avg = state_tensor(st, "grad_avg", p);
        grad_avg.copy_(lerp(grad_avg, g, 1.0 - o.alpha));
        avg = sqrt(sub(square_avg, mul(grad_avg, grad_avg)));
      } else {
        avg = sqrt(square_avg);
      }
      avg = add(avg, o.eps);
      if (o.momentum > 0) {
        Tensor& buf = state_tensor(st, "momentum_buffer", p);
        buf.mul_(o.momentum).add_(div(g, avg));
        p.add_(buf, -o.lr);
      } else {
        p.add_(div(g, avg), -o.lr);
      }
    }
  }
}

}  // namespace kiln::optim
