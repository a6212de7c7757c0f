// SGD's update; see sgd.h for the formula.
#include "kiln/optim/sgd.h"

#include <algorithm>

#include "kiln/optim/option_util.h"
#include "kiln/tensor/ops/fused_optim.h"

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

namespace {

// The parameters of one fused call: one device and dtype, and momentum buffers either all new or all not.
// New buffers enter the state only once the call has filled them (first: params[i]'s is bufs[i]).
struct FusedSgdCall {
  Device device;
  DType dtype;
  bool first;
  std::vector<Tensor> params, grads, bufs;
};

}  // namespace

void SGD::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    SGDOptions o = from_map(group.options);
    // The parameters that qualify take the fused update (kiln/tensor/ops/fused_optim.h), one call per device,
    // dtype and buffer state; the rest run the op chain below, which the fused kernels follow element for element.
    std::vector<FusedSgdCall> fused;
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      if (ops::fused_step_applies(p, {&p.grad()})) {
        Tensor buf;  // the momentum buffer; undefined without momentum
        bool first = false;
        if (o.momentum != 0) {
          auto& state = mutable_state(p).tensors;
          auto it = state.find("momentum_buffer");
          first = it == state.end();
          buf = first ? empty_like(p) : it->second;
        }
        if (!buf.defined() || ops::fused_step_applies(p, {&buf})) {  // a loaded buffer may be laid out otherwise
          auto call = std::find_if(fused.begin(), fused.end(), [&](const FusedSgdCall& c) {
            return c.device == p.device() && c.dtype == p.dtype() && c.first == first;
          });
          if (call == fused.end()) call = fused.insert(fused.end(), FusedSgdCall{p.device(), p.dtype(), first, {}, {}, {}});
          call->params.push_back(p);
          call->grads.push_back(p.grad());
          if (buf.defined()) call->bufs.push_back(buf);
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
    for (const FusedSgdCall& c : fused) {
      ops::fused_sgd_step_(c.params, c.grads, c.bufs,
                           {.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening,
                            .weight_decay = o.weight_decay, .nesterov = o.nesterov, .maximize = o.maximize,
                            .first = c.first});
      if (c.first)
        for (size_t i = 0; i < c.params.size(); ++i) mutable_state(c.params[i]).tensors["momentum_buffer"] = c.bufs[i];
    }
  }
}

}  // namespace kiln::optim
