#include "kiln/nn/container.h"

namespace kiln::nn {

namespace {
std::shared_ptr<Module> child_at(const Module& m, size_t i) {
  auto children = m.named_children();
  KILN_CHECK(i < children.size(), m.type_name(), ": index ", i, " is out of range for ", children.size(), " modules");
  return children[i].second;
}
}  // namespace

std::shared_ptr<Module> SequentialImpl::operator[](size_t i) const { return child_at(*this, i); }

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& [name, child] : named_children()) {
    if (autograd::AnomalyMode::is_enabled()) {
      autograd::ForwardScope scope(name);
      y = (*child)(y);
    } else {
      y = (*child)(y);
    }
  }
  return y;
}

std::shared_ptr<Module> ModuleListImpl::operator[](size_t i) const { return child_at(*this, i); }

bool ModuleDictImpl::contains(const std::string& key) const {
  for (auto& [name, m] : named_children())
    if (name == key) return true;
  return false;
}

std::shared_ptr<Module> ModuleDictImpl::operator[](const std::string& key) const {
  for (auto& [name, m] : named_children())
    if (name == key) return m;
  detail::throw_error(detail::concat("ModuleDict: no module named \"", key, "\""));
}

std::vector<std::string> ModuleDictImpl::keys() const {
  std::vector<std::string> out;
  for (auto& [name, m] : named_children()) out.push_back(name);
  return out;
}

}  // namespace kiln::nn
