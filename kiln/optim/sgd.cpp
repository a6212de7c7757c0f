// SGD's update; see sgd.h for the formula.
#include "kiln/optim/sgd.h"

#include "kiln/optim/fused_cpu.h"
#include "kiln/optim/option_util.h"

namespace kiln::optim {

std::map<std::string, double> SGD::to_map(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

SGDOptions SGD::from_map(const std::map<std::string, double>& m) {
  SGDOptions o;
  o.lr = option(m, "SGD", "lr");
  o.momentum = option(m, "SGD", "momentum");
  o.dampening = option(m, "SGD", "dampening");
  o.weight_decay = option(m, "SGD", "weight_decay");
  o.nesterov = option(m, "SGD", "nesterov") != 0.0;
  o.maximize = option(m, "SGD", "maximize") != 0.0;
  return o;
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) { add_param_group(std::move(params), to_map(options)); }

void SGD::validate_options(const std::map<std::string, double>& m) const {
  SGDOptions o = from_map(m);
  check_non_negative("SGD", "lr", o.lr);
  check_non_negative("SGD", "momentum", o.momentum);
  check_non_negative("SGD", "weight_decay", o.weight_decay);
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov momentum needs momentum > 0 and ",
             "dampening = 0, got momentum = ", o.momentum, ", dampening = ", o.dampening);
}

void SGD::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    SGDOptions o = from_map(group.options);
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      if (fused::applies(p, {&p.grad()})) {  // one pass over what the ops below compute; see fused_cpu.h
        Tensor buf;                             // the momentum buffer; undefined without momentum
        bool first = false;
        if (o.momentum != 0) {
          auto& state = mutable_state(p).tensors;
          auto it = state.find("momentum_buffer");
          if ((first = it == state.end())) it = state.emplace("momentum_buffer", empty_like(p)).first;
          buf = it->second;
        }
        if (!buf.defined() || fused::applies(p, {&buf})) {  // a loaded buffer may be laid out otherwise
          fused::sgd(p, p.grad(), buf,
                     {.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening, .weight_decay = o.weight_decay,
                      .nesterov = o.nesterov, .maximize = o.maximize, .first = first});
          continue;
        }
      }
      Tensor g = o.maximize ? neg(p.grad()) : p.grad();
      if (o.weight_decay != 0) g = add(g, p, o.weight_decay);
      if (o.momentum != 0) {
        ParamState& st = mutable_state(p);
        auto it = st.tensors.find("momentum_buffer");
        if (it == st.tensors.end()) {
          it = st.tensors.emplace("momentum_buffer", g.clone()).first;
        } else {
          it->second.mul_(o.momentum).add_(g, 1.0 - o.dampening);
        }
        const Tensor& buf = it->second;
        g = o.nesterov ? add(g, buf, o.momentum) : buf;
      }
      p.add_(g, -o.lr);
    }
  }
}

}  // namespace kiln::optim
