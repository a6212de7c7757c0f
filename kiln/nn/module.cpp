#include "kiln/nn/module.h"

#include "kiln/autograd/meta.h"

#include <algorithm>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

namespace kiln::nn {

Tensor Module::forward(const Tensor&) {
  detail::throw_error(detail::concat(type_name_, ": forward(Tensor) is not defined for this module; call the "
                                                 "forward it defines"));
}

Tensor Module::operator()(const Tensor& x) {
  refresh_parametrizations();
  Tensor input = x;
  for (auto& [id, hook] : pre_hooks_) {
    Tensor replaced = hook(*this, input);
    if (replaced.defined()) input = std::move(replaced);
  }
  Tensor output;
  if (autograd::AnomalyMode::is_enabled()) {
    autograd::ForwardScope scope(type_name_);
    output = forward(input);
  } else {
    output = forward(input);
  }
  for (auto& [id, hook] : hooks_) {
    Tensor replaced = hook(*this, input, output);
    if (replaced.defined()) output = std::move(replaced);
  }
  return output;
}

void Module::check_name(const std::string& name, const char* what) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, ": ", what, " name \"", name,
             "\" is invalid: it must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  KILN_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name_, ": cannot register ", what,
             " \"", name, "\": the name is already taken");
}

Tensor& Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_name(name, "parameter");
  KILN_CHECK(value.defined(), type_name_, ": parameter \"", name, "\" is undefined");
  if (requires_grad) value.requires_grad_();
  parameters_.emplace_back(name, std::move(value));
  // A parameter registered again under a bound name (remove_weight_norm) is again what the member holds.
  if (Tensor* member = bound_member(name)) *member = parameters_.back().second;
  return parameters_.back().second;
}

Tensor& Module::register_parameter(const std::string& name, Tensor& member, Tensor value, bool requires_grad) {
  KILN_CHECK(!bound_member(name), type_name_, ": parameter \"", name, "\" is bound to a member already");
  Tensor& registered = register_parameter(name, std::move(value), requires_grad);
  members_.emplace_back(name, &member);
  member = registered;
  return registered;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
  check_name(name, "buffer");
  buffers_.emplace_back(name, Buffer{std::move(value), persistent});
  return buffers_.back().second.value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name, "submodule");
  KILN_CHECK(module != nullptr, type_name_, ": submodule \"", name, "\" is null");
  children_.emplace_back(name, std::move(module));
}

Tensor& Module::parameter(const std::string& name) {
  for (auto& [n, t] : parameters_)
    if (n == name) return t;
  detail::throw_error(detail::concat(type_name_, ": no parameter \"", name, "\""));
}

Tensor& Module::buffer(const std::string& name) {
  for (auto& [n, b] : buffers_)
    if (n == name) return b.value;
  detail::throw_error(detail::concat(type_name_, ": no buffer \"", name, "\""));
}

Module& Module::requires_grad_(bool requires_grad) {
  for (auto& [name, p] : named_parameters()) p.requires_grad_(requires_grad);
  return *this;
}

Module& Module::get_submodule(const std::string& path) {
  KILN_CHECK(path.empty() || path.back() != '.', type_name_, ": no submodule \"", path, "\": a path does not end in "
             "'.'");
  Module* m = this;
  std::string walked;  // the part of the path found so far
  for (size_t begin = 0; begin < path.size();) {
    const size_t dot = std::min(path.find('.', begin), path.size());
    const std::string name = path.substr(begin, dot - begin);
    Module* next = nullptr;
    std::string there;
    for (const auto& [n, child] : m->children_) {
      if (n == name) next = child.get();
      there += (there.empty() ? "" : ", ") + n;
    }
    KILN_CHECK(next != nullptr, type_name_, ": no submodule \"", path, "\": ", walked.empty() ? type_name_ : walked,
               " (", m->type_name_, ") has no child \"", name, "\" (its children: ",
               there.empty() ? "none" : there, ")");
    walked += (walked.empty() ? "" : ".") + name;
    m = next;
    begin = dot + 1;
  }
  return *m;
}

namespace {
// Splits "a.b.c" into the owner's path "a.b" and the tensor's name "c".
std::pair<std::string, std::string> owner_and_name(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}
}  // namespace

Tensor Module::get_parameter(const std::string& path) {
  const auto [owner, name] = owner_and_name(path);
  Module& m = get_submodule(owner);
  for (const auto& [n, t] : m.parameters_)
    if (n == name) return t;
  std::string there;
  for (const auto& [n, t] : m.parameters_) there += (there.empty() ? "" : ", ") + n;
  detail::throw_error(detail::concat(type_name_, ": no parameter \"", path, "\" (", m.type_name_, "'s parameters: ",
                                     there.empty() ? "none" : there, ")"));
}

Tensor Module::get_buffer(const std::string& path) {
  const auto [owner, name] = owner_and_name(path);
  Module& m = get_submodule(owner);
  for (const auto& [n, b] : m.buffers_)
    if (n == name) return b.value;
  std::string there;
  for (const auto& [n, b] : m.buffers_) there += (there.empty() ? "" : ", ") + n;
  detail::throw_error(detail::concat(type_name_, ": no buffer \"", path, "\" (", m.type_name_, "'s buffers: ",
                                     there.empty() ? "none" : there, ")"));
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out(parameters_.begin(), parameters_.end());
  if (recurse)
    for (const auto& [name, child] : children_)
      for (auto& [n, t] : child->named_parameters(true)) out.emplace_back(name + "." + n, t);
  // A tensor shared by two modules (tied weights) is listed once, under its first name.
  std::vector<std::pair<std::string, Tensor>> unique;
  std::set<const TensorImpl*> seen;
  for (auto& e : out)
    if (seen.insert(e.second.impl()).second) unique.push_back(std::move(e));
  return unique;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, b] : buffers_) out.emplace_back(name, b.value);
  if (recurse)
    for (const auto& [name, child] : children_)
      for (auto& [n, t] : child->named_buffers(true)) out.emplace_back(name + "." + n, t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, m] : children_) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  out.emplace_back("", shared_from_this());
  for (const auto& [name, child] : children_)
    for (auto& [n, m] : child->named_modules()) out.emplace_back(n.empty() ? name : name + "." + n, m);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, child] : children_) child->apply(fn);
  fn(*this);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

namespace {
// Gives t new data (the same values on another device or in another dtype) while keeping its identity: the
// TensorImpl every handle shares is overwritten, its autograd state kept. Optimizers built before to() hold
// handles to the same tensors, so they follow the move, as with PyTorch's param.data = ...
void convert_in_place(const Tensor& t, Device device, std::optional<DType> dtype) {
  DType target = dtype && t.is_floating_point() ? *dtype : t.dtype();
  if (t.device() == device && t.dtype() == target) return;
  Tensor moved = ops::to(t, device, target);
  t.impl()->set_data(*moved.impl());
  if (const Tensor& g = t.grad(); g.defined()) t.set_grad(ops::to(g, device, target));
}
}  // namespace

void Module::to(Device device, DType dtype) {
  apply([&](Module& m) {
    for (auto& [n, t] : m.parameters_) convert_in_place(t, device, dtype);
    for (auto& [n, b] : m.buffers_) convert_in_place(b.value, device, dtype);
  });
}

void Module::to(Device device) {
  apply([&](Module& m) {
    for (auto& [n, t] : m.parameters_) convert_in_place(t, device, std::nullopt);
    for (auto& [n, b] : m.buffers_) convert_in_place(b.value, device, std::nullopt);
  });
}

void Module::to(DType dtype) {
  apply([&](Module& m) {
    for (auto& [n, t] : m.parameters_) convert_in_place(t, t.device(), dtype);
    for (auto& [n, b] : m.buffers_) convert_in_place(b.value, b.value.device(), dtype);
  });
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      autograd::NoGradGuard no_grad;
      p.grad().zero_();
    }
  }
}

// ---- state ----

void Module::collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [n, t] : parameters_) out.emplace_back(prefix + n, &t);
  for (auto& [n, b] : buffers_)
    if (b.persistent) out.emplace_back(prefix + n, &b.value);
  for (auto& [n, child] : children_) child->collect_state(prefix + n + ".", out);
}

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor*>> entries;
  const_cast<Module*>(this)->collect_state("", entries);
  StateDict out;
  for (auto& [name, t] : entries) out.emplace(name, t->detach());
  return out;
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> entries;
  collect_state("", entries);
  LoadResult result;
  std::set<std::string> known;
  for (auto& [name, t] : entries) {
    known.insert(name);
    if (!state.count(name)) result.missing_keys.push_back(name);
  }
  for (const auto& [name, t] : state)
    if (!known.count(name)) result.unexpected_keys.push_back(name);
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    std::ostringstream msg;
    msg << "load_state_dict: the state dict does not match " << type_name_ << ":";
    if (!result.missing_keys.empty()) {
      msg << " missing keys";
      for (const auto& k : result.missing_keys) msg << " \"" << k << "\"";
      msg << ";";
    }
    if (!result.unexpected_keys.empty()) {
      msg << " unexpected keys";
      for (const auto& k : result.unexpected_keys) msg << " \"" << k << "\"";
      msg << ";";
    }
    msg << " (pass strict=false to load the keys that match)";
    detail::throw_error(msg.str());
  }
  // Check every shape before changing anything: a failed load leaves the module as it was.
  for (auto& [name, t] : entries) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    KILN_CHECK(it->second.defined(), "load_state_dict: \"", name, "\" is undefined in the state dict");
    KILN_CHECK(it->second.sizes() == t->sizes(), "load_state_dict: \"", name, "\" has shape ",
               shape_str(it->second.sizes()), " in the state dict but ", shape_str(t->sizes()), " in ", type_name_);
  }
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : entries) {
    auto it = state.find(name);
    if (it != state.end()) ops::copy_(*t, it->second);
  }
  return result;
}

// ---- hooks ----

unsigned Module::register_forward_pre_hook(ForwardPreHook hook) {
  unsigned id = autograd::next_hook_id();
  pre_hooks_.emplace_back(id, std::move(hook));
  return id;
}

unsigned Module::register_forward_hook(ForwardHook hook) {
  unsigned id = autograd::next_hook_id();
  hooks_.emplace_back(id, std::move(hook));
  return id;
}

void Module::remove_hook(unsigned handle) {
  std::erase_if(pre_hooks_, [&](const auto& h) { return h.first == handle; });
  std::erase_if(hooks_, [&](const auto& h) { return h.first == handle; });
}

// ---- reparametrization ----

Tensor* Module::bound_member(const std::string& name) const {
  for (const auto& [n, member] : members_)
    if (n == name) return member;
  return nullptr;
}

Tensor Module::remove_parameter(const std::string& name) {
  auto it = std::find_if(parameters_.begin(), parameters_.end(), [&](const auto& p) { return p.first == name; });
  KILN_CHECK(it != parameters_.end(), type_name_, ": cannot remove parameter \"", name, "\": there is none");
  Tensor removed = std::move(it->second);
  parameters_.erase(it);
  return removed;
}

Tensor Module::remove_buffer(const std::string& name) {
  auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.first == name; });
  KILN_CHECK(it != buffers_.end(), type_name_, ": cannot remove buffer \"", name, "\": there is none");
  Tensor removed = std::move(it->second.value);
  buffers_.erase(it);
  return removed;
}

void Module::register_parametrization(const std::string& name, std::shared_ptr<Parametrization> p) {
  KILN_CHECK(bound_member(name), type_name_, " has no member bound to \"", name,
             "\", so it cannot be reparametrized: its forward does not read that name through a bound field");
  KILN_CHECK(!parametrization(name), type_name_, ": \"", name, "\" is parametrized already");
  KILN_CHECK(p, type_name_, ": the parametrization of \"", name, "\" is null");
  parametrizations_.emplace_back(name, std::move(p));
}

std::shared_ptr<Module::Parametrization> Module::remove_parametrization(const std::string& name) {
  auto it = std::find_if(parametrizations_.begin(), parametrizations_.end(),
                         [&](const auto& p) { return p.first == name; });
  KILN_CHECK(it != parametrizations_.end(), type_name_, ": \"", name, "\" is not parametrized");
  std::shared_ptr<Parametrization> removed = std::move(it->second);
  parametrizations_.erase(it);
  return removed;
}

Module::Parametrization* Module::parametrization(const std::string& name) const {
  for (const auto& [n, p] : parametrizations_)
    if (n == name) return p.get();
  return nullptr;
}

void Module::refresh_parametrizations() {
  for (auto& [name, p] : parametrizations_) *bound_member(name) = p->compute(*this);
}

// ---- printing ----

void Module::print(std::ostream& out, int indent) const {
  out << type_name_ << "(" << extra_repr();
  if (!children_.empty()) {
    out << "\n";
    for (const auto& [name, child] : children_) {
      out << std::string(indent + 2, ' ') << "(" << name << "): ";
      child->print(out, indent + 2);
      out << "\n";
    }
    out << std::string(indent, ' ');
  }
  out << ")";
}

std::string Module::str() const {
  std::ostringstream out;
  print(out, 0);
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Module& m) { return out << m.str(); }

}  // namespace kiln::nn
