// Containers: Sequential (a chain), ModuleList (an indexed list), ModuleDict (a named map). Their children are
// named as PyTorch names them ("0", "1", ... or the keys), so state_dict keys match ("layers.0.weight").
#pragma once

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
};
using Sequential = ModuleHolder<SequentialImpl>;

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

}  // namespace kiln::nn
