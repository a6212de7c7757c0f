// Optimizer: the base of SGD, Adam, AdamW, Adamax, NAdam, RAdam, RMSprop, Adagrad and LBFGS, shaped like
// torch.optim.Optimizer.
//
// Parameters live in groups, each with its own options (lr, weight_decay, ...). Options are kept in a flat
// name -> double map (booleans as 0/1, Adam's betas as "beta1"/"beta2") rather than in a typed struct, so the
// base class, the LR schedulers and state_dict() can read and write every optimizer's options the same way;
// each optimizer turns its typed options struct into that map on the way in and reads it back in step().
//
// Per-parameter state (momentum buffers, exp_avg, step counts, ...) is made on the first step() that sees the
// parameter's grad, as in PyTorch. state_dict() flattens groups and state into an OptimizerState: tensors and
// doubles under dotted keys ("state.3.exp_avg", "param_groups.0.lr"), which a safetensors file can hold as
// tensors plus metadata. Parameters are numbered in order across groups, as PyTorch does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/autograd/autograd.h"

namespace kiln::optim {

// A group of parameters that share options. `options` holds every option of the optimizer, by name.
struct ParamGroup {
  std::vector<Tensor> params;
  std::map<std::string, double> options;

  // The option `name`; a kiln::Error naming it when the group has none.
  double get(const std::string& name) const;
  double lr() const { return get("lr"); }
  void set_lr(double lr) { options["lr"] = lr; }
};

// One parameter's state: tensors of the parameter's shape ("exp_avg") and numbers ("step").
struct ParamState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
};

// A flat snapshot of an optimizer, for checkpoints:
//   "param_groups.<g>.<option>"  every option of group g, and "param_groups.<g>.num_params"
//   "state.<i>.<name>"           parameter i's state (i counts parameters in order across groups)
struct OptimizerState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a grad (those without one are skipped), under NoGradGuard.
  virtual void step() = 0;
  // The optimizer's name as errors print it ("SGD").
  virtual const char* name() const = 0;

  // Clears every parameter's grad: drops it (set_to_none, the default, as in PyTorch), or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  // Appends a group with the given options. An option left out takes the optimizer's default: its value in
  // the options the optimizer was made with, as PyTorch's add_param_group fills a group from `defaults`.
  // (Each optimizer's typed overload, add_param_group(params, SGDOptions{...}), passes every option.)
  void add_param_group(std::vector<Tensor> params, std::map<std::string, double> options);
  // The options the optimizer was made with (its first group's, before anything changed them).
  const std::map<std::string, double>& defaults() const { return defaults_; }

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // The state of `param` (empty before its first step).
  const ParamState& state(const Tensor& param) const;

  // A snapshot (tensors are copies): later steps do not change it.
  OptimizerState state_dict() const;
  // Restores a snapshot taken from an optimizer with the same groups and parameter shapes. Checks group and
  // parameter counts, state tensor shapes and that every option is present, before changing anything.
  // State tensors are copied to the parameter's device; floating ones also to its dtype, as PyTorch does.
  void load_state_dict(const OptimizerState& state);

  // A new optimizer of this kind over `groups` (each with its own parameters and options), with fresh state:
  // what a parameter server makes for its shard of the parameters from the workers' optimizer.
  std::unique_ptr<Optimizer> make_like(const std::vector<ParamGroup>& groups) const;

 protected:
  Optimizer() = default;
  // A new optimizer of this kind over the one group `first` (make_like adds the others). An optimizer
  // defined outside kiln that does not override it cannot run on a parameter server (a kiln::Error says so).
  virtual std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const;
  // Checks one group's options (negative lr, betas out of range, ...): a kiln::Error naming the option.
  virtual void validate_options(const std::map<std::string, double>& options) const = 0;
  // The shape load_state_dict expects of the state tensor `key` of `param`: the parameter's own, unless the
  // optimizer keeps state of another shape (LBFGS's flat vectors over every parameter).
  virtual Shape state_shape(const std::string& key, const Tensor& param) const { return param.sizes(); }
  ParamState& mutable_state(const Tensor& param) { return state_[param.impl()]; }

  std::vector<ParamGroup> groups_;

 private:
  std::unordered_map<const TensorImpl*, ParamState> state_;
  std::map<std::string, double> defaults_;
};

}  // namespace kiln::optim
