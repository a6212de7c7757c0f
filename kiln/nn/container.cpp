#include "kiln/nn/container.h"

#include <algorithm>

namespace kiln::nn {

namespace {
std::shared_ptr<Module> child_at(const Module& m, size_t i) {
  auto children = m.named_children();
  KILN_CHECK(i < children.size(), m.type_name(), ": index ", i, " is out of range for ", children.size(), " modules");
  return children[i].second;
}
}  // namespace

std::shared_ptr<Module> SequentialImpl::operator[](size_t i) const { return child_at(*this, i); }

Tensor SequentialImpl::forward(const Tensor& x) { return forward_range(x, 0, size()); }

Tensor SequentialImpl::forward_range(const Tensor& x, size_t begin, size_t end) {
  const auto children = named_children();
  KILN_CHECK(begin <= end && end <= children.size(), "Sequential: modules [", begin, ", ", end,
             ") are out of range for ", children.size(), " modules");
  Tensor y = x;
  for (size_t i = begin; i < end; ++i) {
    const auto& [name, child] = children[i];
    if (autograd::AnomalyMode::is_enabled()) {
      autograd::ForwardScope scope(name);
      y = (*child)(y);
    } else {
      y = (*child)(y);
    }
  }
  return y;
}

Tensor checkpoint_sequential(const Sequential& sequential, size_t segments, const Tensor& input,
                             autograd::CheckpointOptions options) {
  std::shared_ptr<SequentialImpl> seq = sequential.ptr();
  const size_t n = seq->size();
  KILN_CHECK(segments >= 1, "checkpoint_sequential: segments must be at least 1, got 0");
  KILN_CHECK(segments <= std::max<size_t>(n, 1), "checkpoint_sequential: ", segments, " segments for ", n,
             " modules; at most one segment per module");
  Tensor y = input;
  for (size_t s = 0; s + 1 < segments; ++s) {
    const size_t begin = s * n / segments, end = (s + 1) * n / segments;
    y = autograd::checkpoint([seq, begin, end](const Tensor& x) { return seq->forward_range(x, begin, end); }, y,
                             options);
  }
  return seq->forward_range(y, (segments - 1) * n / segments, n);
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

Tensor ParameterListImpl::append(Tensor value, bool requires_grad) {
  return register_parameter(std::to_string(size()), std::move(value), requires_grad);
}

Tensor ParameterListImpl::operator[](size_t i) const {
  auto params = named_parameters(false);
  KILN_CHECK(i < params.size(), "ParameterList: index ", i, " is out of range for ", params.size(), " parameters");
  return params[i].second;
}

Tensor ParameterDictImpl::insert(const std::string& key, Tensor value, bool requires_grad) {
  return register_parameter(key, std::move(value), requires_grad);
}

bool ParameterDictImpl::contains(const std::string& key) const {
  for (auto& [name, p] : named_parameters(false))
    if (name == key) return true;
  return false;
}

Tensor ParameterDictImpl::operator[](const std::string& key) const {
  for (auto& [name, p] : named_parameters(false))
    if (name == key) return p;
  detail::throw_error(detail::concat("ParameterDict: no parameter named \"", key, "\""));
}

std::vector<std::string> ParameterDictImpl::keys() const {
  std::vector<std::string> out;
  for (auto& [name, p] : named_parameters(false)) out.push_back(name);
  return out;
}

FunctionalImpl::FunctionalImpl(std::function<Tensor(const Tensor&)> fn, std::string name)
    : Module(std::move(name)), fn_(std::move(fn)) {
  KILN_CHECK(fn_ != nullptr, "Functional: the function is empty");
}

}  // namespace kiln::nn
