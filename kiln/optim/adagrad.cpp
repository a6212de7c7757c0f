// Adagrad's update; see adagrad.h for the formula.
#include "kiln/optim/adagrad.h"

#include "kiln/optim/option_util.h"

namespace kiln::optim {

std::map<std::string, double> Adagrad::to_map(const AdagradOptions& o) {
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"eps", o.eps},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

AdagradOptions Adagrad::from_map(const std::map<std::string, double>& m) {
  AdagradOptions o;
  o.lr = option(m, "Adagrad", "lr");
  o.lr_decay = option(m, "Adagrad", "lr_decay");
  o.weight_decay = option(m, "Adagrad", "weight_decay");
  o.initial_accumulator_value = option(m, "Adagrad", "initial_accumulator_value");
  o.eps = option(m, "Adagrad", "eps");
  o.maximize = option(m, "Adagrad", "maximize") != 0.0;
  return o;
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options) {
  add_param_group(std::move(params), to_map(options));
}

void Adagrad::validate_options(const std::map<std::string, double>& m) const {
  AdagradOptions o = from_map(m);
  check_non_negative("Adagrad", "lr", o.lr);
  check_non_negative("Adagrad", "lr_decay", o.lr_decay);
  check_non_negative("Adagrad", "weight_decay", o.weight_decay);
  check_non_negative("Adagrad", "initial_accumulator_value", o.initial_accumulator_value);
  check_non_negative("Adagrad", "eps", o.eps);
}

void Adagrad::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    AdagradOptions o = from_map(group.options);
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      ParamState& st = mutable_state(p);
      if (!st.tensors.count("sum")) {
        st.scalars["step"] = 0;
        st.tensors["sum"] = full_like(p, o.initial_accumulator_value);
      }
      double step = ++st.scalars["step"];
      Tensor g = o.maximize ? neg(p.grad()) : p.grad();
      if (o.weight_decay != 0) g = add(g, p, o.weight_decay);
      double clr = o.lr / (1.0 + (step - 1.0) * o.lr_decay);
      Tensor& sum = st.tensors["sum"];
      sum.add_(mul(g, g));
      Tensor std_dev = add(sqrt(sum), o.eps);
      p.add_(div(g, std_dev), -clr);
    }
  }
}

}  // namespace kiln::optim
