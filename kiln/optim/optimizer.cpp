// The Optimizer base: groups, zero_grad, and state_dict / load_state_dict over flat dotted keys.
#include "kiln/optim/optimizer.h"

#include <charconv>
#include <set>

namespace kiln::optim {

double ParamGroup::get(const std::string& name) const {
  auto it = options.find(name);
  KILN_CHECK(it != options.end(), "optimizer: the parameter group has no option '", name, "'");
  return it->second;
}

std::unique_ptr<Optimizer> Optimizer::make_with(const ParamGroup&) const {
  KILN_CHECK(false, name(), " does not override make_with(), so it cannot be made again over other parameters ",
             "(a parameter server's shard needs that)");
  return nullptr;
}

std::unique_ptr<Optimizer> Optimizer::make_like(const std::vector<ParamGroup>& groups) const {
  KILN_CHECK(!groups.empty(), name(), "::make_like: no parameter groups");
  std::unique_ptr<Optimizer> made = make_with(groups[0]);
  for (size_t g = 1; g < groups.size(); ++g) made->add_param_group(groups[g].params, groups[g].options);
  return made;
}

void Optimizer::add_param_group(std::vector<Tensor> params, std::map<std::string, double> options) {
  KILN_CHECK(!params.empty(), name(), ": got an empty parameter list");
  std::set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params) seen.insert(p.impl());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    KILN_CHECK(p.defined(), name(), ": parameter ", i, " of the new group is undefined");
    KILN_CHECK(p.is_floating_point(), name(), ": can only optimize floating-point tensors, but parameter ", i,
               " of the new group has dtype ", p.dtype());
    KILN_CHECK(p.is_leaf(), name(), ": can't optimize a non-leaf tensor (parameter ", i, " of the new group, shape ",
               shape_str(p.sizes()), ")");
    KILN_CHECK(seen.insert(p.impl()).second, name(), ": parameter ", i,
               " of the new group appears in more than one parameter group");
  }
  for (const auto& [key, value] : defaults_) options.try_emplace(key, value);
  validate_options(options);
  if (groups_.empty() && defaults_.empty()) defaults_ = options;  // the constructor's group
  groups_.push_back(ParamGroup{std::move(params), std::move(options)});
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& g : groups_) {
    for (auto& p : g.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor{});
      } else {
        // A grad made with create_graph has history; zeroing it in place must not write into that graph.
        Tensor grad = p.grad().detach();
        grad.zero_();
        p.set_grad(grad);
      }
    }
  }
}

const ParamState& Optimizer::state(const Tensor& param) const {
  static const ParamState empty;
  auto it = state_.find(param.impl());
  return it == state_.end() ? empty : it->second;
}

OptimizerState Optimizer::state_dict() const {
  NoGradGuard no_grad;
  OptimizerState out;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string group_prefix = "param_groups." + std::to_string(g) + ".";
    for (const auto& [key, value] : groups_[g].options) out.scalars[group_prefix + key] = value;
    out.scalars[group_prefix + "num_params"] = static_cast<double>(groups_[g].params.size());
    for (const auto& p : groups_[g].params) {
      auto it = state_.find(p.impl());
      if (it != state_.end()) {
        std::string prefix = "state." + std::to_string(index) + ".";
        for (const auto& [key, t] : it->second.tensors) out.tensors[prefix + key] = t.detach().clone();
        for (const auto& [key, v] : it->second.scalars) out.scalars[prefix + key] = v;
      }
      ++index;
    }
  }
  return out;
}

namespace {

// Splits "state.3.exp_avg" into ("state", 3, "exp_avg"); false when the key has another form.
bool split_key(const std::string& key, std::string& head, int64_t& index, std::string& rest) {
  size_t a = key.find('.');
  if (a == std::string::npos) return false;
  size_t b = key.find('.', a + 1);
  if (b == std::string::npos || b == a + 1 || b + 1 == key.size()) return false;
  head = key.substr(0, a);
  auto [ptr, ec] = std::from_chars(key.data() + a + 1, key.data() + b, index);
  if (ec != std::errc() || ptr != key.data() + b || index < 0) return false;
  rest = key.substr(b + 1);
  return true;
}

}  // namespace

void Optimizer::load_state_dict(const OptimizerState& sd) {
  const std::string op = std::string(name()) + ".load_state_dict";
  // Parse everything first: nothing changes unless the whole snapshot fits this optimizer.
  std::map<int64_t, std::map<std::string, double>> group_options;
  std::map<int64_t, ParamState> param_states;
  std::string head, rest;
  int64_t index = 0;
  for (const auto& [key, value] : sd.scalars) {
    KILN_CHECK(split_key(key, head, index, rest) && (head == "param_groups" || head == "state"), op,
               ": unexpected key '", key, "' (expected param_groups.<g>.<option> or state.<i>.<name>)");
    if (head == "param_groups") group_options[index][rest] = value;
    else param_states[index].scalars[rest] = value;
  }
  for (const auto& [key, t] : sd.tensors) {
    KILN_CHECK(split_key(key, head, index, rest) && head == "state", op, ": unexpected tensor key '", key,
               "' (expected state.<i>.<name>)");
    KILN_CHECK(t.defined(), op, ": tensor '", key, "' is undefined");
    param_states[index].tensors[rest] = t;
  }

  KILN_CHECK(group_options.size() == groups_.size() &&
                 (group_options.empty() || group_options.rbegin()->first == static_cast<int64_t>(groups_.size()) - 1),
             op, ": the state has ", group_options.size(), " parameter groups, the optimizer has ", groups_.size());
  std::vector<const Tensor*> params;
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& opts = group_options[static_cast<int64_t>(g)];
    auto n = opts.find("num_params");
    KILN_CHECK(n != opts.end(), op, ": param_groups.", g, ".num_params is missing");
    KILN_CHECK(n->second == static_cast<double>(groups_[g].params.size()), op, ": parameter group ", g, " has ",
               n->second, " parameters in the state, ", groups_[g].params.size(), " in the optimizer");
    opts.erase(n);
    for (const auto& [key, v] : groups_[g].options)
      KILN_CHECK(opts.count(key), op, ": param_groups.", g, ".", key, " is missing");
    validate_options(opts);
    for (const auto& p : groups_[g].params) params.push_back(&p);
  }
  for (const auto& [i, ps] : param_states) {
    KILN_CHECK(i < static_cast<int64_t>(params.size()), op, ": state for parameter ", i, ", but the optimizer has ",
               params.size(), " parameters");
    for (const auto& [key, t] : ps.tensors) {
      const Shape want = state_shape(key, *params[i]);
      KILN_CHECK(t.sizes() == want, op, ": state.", i, ".", key, " has shape ", shape_str(t.sizes()), " but ",
                 name(), " expects ", shape_str(want), " (parameter ", i, " has shape ",
                 shape_str(params[i]->sizes()), ")");
    }
  }

  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = group_options[static_cast<int64_t>(g)];
  state_.clear();
  for (auto& [i, ps] : param_states) {
    const Tensor& p = *params[i];
    ParamState& dst = state_[p.impl()];
    dst.scalars = ps.scalars;
    for (auto& [key, t] : ps.tensors) {
      DType dtype = t.is_floating_point() ? p.dtype() : t.dtype();
      // A copy, so the loaded optimizer and the snapshot never share memory.
      Tensor copy = empty(t.sizes(), TensorOptions(dtype).device(p.device()));
      copy.copy_(t);
      dst.tensors[key] = copy;
    }
  }
}

}  // namespace kiln::optim
