// Containers: Sequential (a chain), ModuleList (an indexed list), ModuleDict (a named map), and their
// parameter twins ParameterList and ParameterDict. Their children and parameters are named as PyTorch names
// them ("0", "1", ... or the keys), so state_dict keys match ("layers.0.weight", "scales.2"). Functional wraps
// a function as a module, for a Sequential.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

class SequentialImpl : public Module {
 public:
  SequentialImpl() : Module("Sequential") {}
  template <typename... Ms>
    requires(sizeof...(Ms) > 0)
  explicit SequentialImpl(Ms&&... modules) : Module("Sequential") {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  void push_back(std::shared_ptr<Module> module) { add_child(std::to_string(size()), std::move(module)); }
  template <class M>
  void push_back(const ModuleHolder<M>& holder) { push_back(std::shared_ptr<Module>(holder.ptr())); }
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  // Each module's output is the next one's input.
  Tensor forward(const Tensor& x) override;
  // Modules [begin, end) only.
  Tensor forward_range(const Tensor& x, size_t begin, size_t end);
};
using Sequential = ModuleHolder<SequentialImpl>;

// Runs a Sequential in `segments` runs of consecutive modules (as even as the count allows), each but the last
// under activation checkpointing (autograd::checkpoint): only the runs' inputs are kept for backward, and each run
// computes again when backward reaches it. PyTorch's torch.utils.checkpoint.checkpoint_sequential.
Tensor checkpoint_sequential(const Sequential& sequential, size_t segments, const Tensor& input,
                             autograd::CheckpointOptions options = {});

// An indexed list of modules, for a model's own forward to loop over; it has no forward of its own.
class ModuleListImpl : public Module {
 public:
  ModuleListImpl() : Module("ModuleList") {}
  void push_back(std::shared_ptr<Module> module) { add_child(std::to_string(size()), std::move(module)); }
  template <class M>
  void push_back(const ModuleHolder<M>& holder) { push_back(std::shared_ptr<Module>(holder.ptr())); }
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  // The i-th module as its own type (an error if it is not one).
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    KILN_CHECK(m != nullptr, "ModuleList: module ", i, " is a ", (*this)[i]->type_name(), ", not the type asked for");
    return m;
  }
};
using ModuleList = ModuleHolder<ModuleListImpl>;

// Modules by name, in insertion order.
class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() : Module("ModuleDict") {}
  void insert(const std::string& key, std::shared_ptr<Module> module) { add_child(key, std::move(module)); }
  template <class M>
  void insert(const std::string& key, const ModuleHolder<M>& holder) {
    insert(key, std::shared_ptr<Module>(holder.ptr()));
  }
  bool contains(const std::string& key) const;
  std::shared_ptr<Module> operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  size_t size() const { return named_children().size(); }
};
using ModuleDict = ModuleHolder<ModuleDictImpl>;

// Parameters in an indexed list, named "0", "1", ... (a scale per layer, a variable number of tables), as
// PyTorch's ParameterList: the module holding the list trains, saves and moves them with its own.
class ParameterListImpl : public Module {
 public:
  ParameterListImpl() : Module("ParameterList") {}
  // Registers `value` as the next parameter (requiring grad unless told not to) and returns its handle.
  Tensor append(Tensor value, bool requires_grad = true);
  size_t size() const { return named_parameters(false).size(); }
  // The registered handle: in-place changes reach the parameter.
  Tensor operator[](size_t i) const;
};
using ParameterList = ModuleHolder<ParameterListImpl>;

// Parameters by name, in insertion order, as PyTorch's ParameterDict. Keys may not contain '.', and a key is
// inserted once (PyTorch replaces the parameter of a key inserted again; here that is an error).
class ParameterDictImpl : public Module {
 public:
  ParameterDictImpl() : Module("ParameterDict") {}
  Tensor insert(const std::string& key, Tensor value, bool requires_grad = true);
  bool contains(const std::string& key) const;
  Tensor operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  size_t size() const { return named_parameters(false).size(); }
};
using ParameterDict = ModuleHolder<ParameterDictImpl>;

// A function as a module, for a step of a Sequential that has no layer of its own (a reshape, an
// activation with arguments), as LibTorch's nn::Functional: Sequential(Linear(4, 8), Functional(relu)).
// It has no parameters; `name` is what str() prints.
class FunctionalImpl : public Module {
 public:
  explicit FunctionalImpl(std::function<Tensor(const Tensor&)> fn, std::string name = "Functional");
  Tensor forward(const Tensor& x) override { return fn_(x); }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};
using Functional = ModuleHolder<FunctionalImpl>;

}  // namespace kiln::nn
