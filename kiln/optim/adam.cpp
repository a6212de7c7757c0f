// Adam's and AdamW's update; see adam.h for the formula. The two differ only in where weight decay goes.
#include "kiln/optim/adam.h"

#include <algorithm>
#include <cmath>

#include "kiln/optim/option_util.h"
#include "kiln/tensor/ops/fused_optim.h"

namespace kiln::optim {

std::map<std::string, double> Adam::to_map(const AdamOptions& o) {
  auto m = adam_like_map(o);
  m["amsgrad"] = o.amsgrad ? 1.0 : 0.0;
  return m;
}

AdamOptions Adam::from_map(const std::map<std::string, double>& m, const char* op) {
  auto o = adam_like_options<AdamOptions>(m, op);
  o.amsgrad = option(m, op, "amsgrad") != 0.0;
  return o;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled_weight_decay)
    : decoupled_(decoupled_weight_decay) {
  add_param_group(std::move(params), to_map(options));
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) : Adam(std::move(params), convert(options), true) {}

void Adam::validate_options(const std::map<std::string, double>& m) const {
  check_adam_like(from_map(m, name()), name());
}

namespace {

// The parameters of one fused call: one device and dtype.
struct FusedAdamCall {
  Device device;
  DType dtype;
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<double> steps;
  std::vector<ParamState*> states;
};

}  // namespace

void Adam::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    AdamOptions o = from_map(group.options, name());
    auto [beta1, beta2] = o.betas;
    // The parameters that qualify take the fused update (kiln/tensor/ops/fused_optim.h), one call per device and
    // dtype; the rest run the op chain below, which the fused kernels follow element for element.
    std::vector<FusedAdamCall> fused;
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      if (st.tensors.empty()) {
        st.scalars["step"] = 0;
        st.tensors["exp_avg"] = zeros_like(p);
        st.tensors["exp_avg_sq"] = zeros_like(p);
        if (o.amsgrad) st.tensors["max_exp_avg_sq"] = zeros_like(p);
      }
      const double step = st.scalars["step"] + 1;
      if (!o.amsgrad && ops::fused_step_applies(p, {&p.grad(), &st.tensors["exp_avg"], &st.tensors["exp_avg_sq"]})) {
        auto call = std::find_if(fused.begin(), fused.end(), [&](const FusedAdamCall& c) {
          return c.device == p.device() && c.dtype == p.dtype();
        });
        if (call == fused.end()) call = fused.insert(fused.end(), FusedAdamCall{p.device(), p.dtype(), {}, {}, {}, {}, {}, {}});
        call->params.push_back(p);
        call->grads.push_back(p.grad());
        call->exp_avgs.push_back(st.tensors["exp_avg"]);
        call->exp_avg_sqs.push_back(st.tensors["exp_avg_sq"]);
        call->steps.push_back(step);
        call->states.push_back(&st);  // its count moves on once the call has run
        continue;
      }
      st.scalars["step"] = step;
      Tensor g = o.maximize ? neg(p.grad()) : p.grad();
      if (o.weight_decay != 0) {
        if (decoupled_) p.mul_(1.0 - o.lr * o.weight_decay);
        else g = add(g, p, o.weight_decay);
      }
      Tensor& exp_avg = st.tensors["exp_avg"];
      Tensor& exp_avg_sq = st.tensors["exp_avg_sq"];
      exp_avg.copy_(lerp(exp_avg, g, 1.0 - beta1));
      exp_avg_sq.mul_(beta2).add_(mul(g, g), 1.0 - beta2);

      double bias_correction1 = 1.0 - std::pow(beta1, step);
      double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, step));
      double step_size = o.lr / bias_correction1;
      Tensor second = exp_avg_sq;
      if (o.amsgrad) {
        // Created here too when amsgrad is switched on for a group after its first steps.
        auto it = st.tensors.find("max_exp_avg_sq");
        if (it == st.tensors.end()) it = st.tensors.emplace("max_exp_avg_sq", zeros_like(p)).first;
        it->second.copy_(maximum(it->second, exp_avg_sq));
        second = it->second;
      }
      Tensor denom = add(div(sqrt(second), bias_correction2_sqrt), o.eps);
      p.add_(div(exp_avg, denom), -step_size);
    }
    for (const FusedAdamCall& c : fused) {
      ops::fused_adam_step_(c.params, c.grads, c.exp_avgs, c.exp_avg_sqs, c.steps,
                            {.lr = o.lr, .beta1 = beta1, .beta2 = beta2, .eps = o.eps,
                             .weight_decay = o.weight_decay, .decoupled = decoupled_, .maximize = o.maximize});
      for (size_t i = 0; i < c.states.size(); ++i) c.states[i]->scalars["step"] = c.steps[i];
    }
  }
}

}  // namespace kiln::optim
