#include "kiln/tools/registry.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

namespace kiln::tools {

namespace yaml = trainer::yaml;

Args::Args(std::string name, yaml::Node mapping) : name_(std::move(name)), mapping_(std::move(mapping)) {
  if (!mapping_.is_null() && !mapping_.is_mapping()) trainer::config_detail::type_error(mapping_, name_, "a mapping");
}

const yaml::Node* Args::find(std::string_view key) const {
  used_.emplace(key);
  return mapping_.is_mapping() ? mapping_.find(key) : nullptr;
}

const yaml::Node& Args::find_required(std::string_view key) const {
  const yaml::Node* value = find(key);
  KILN_CHECK(value != nullptr, name_, ".", key, ": required, and not given (set it under ", name_, " in the config, or ",
             "--set ", name_, ".", key, "=<value>)");
  return *value;
}

const Args& Args::sub(std::string_view key) const {
  if (auto it = subs_.find(key); it != subs_.end()) return *it->second;
  const yaml::Node* value = find(key);
  auto child = std::make_unique<Args>(name_ + "." + std::string(key), value ? *value : yaml::Node::mapping());
  return *subs_.emplace(std::string(key), std::move(child)).first->second;
}

std::vector<std::string> Args::keys() const {
  std::vector<std::string> out;
  if (mapping_.is_mapping()) {
    for (const yaml::Entry& e : mapping_.entries()) out.push_back(e.key);
  }
  return out;
}

void Args::check_all_used(const std::string& owner) const {
  for (const auto& [key, child] : subs_) child->check_all_used(owner);
  if (!mapping_.is_mapping()) return;
  for (const yaml::Entry& e : mapping_.entries()) {
    if (used_.count(e.key)) continue;
    std::string read;
    for (const std::string& k : used_) read += (read.empty() ? "" : ", ") + k;
    detail::throw_error(detail::concat(name_, ".", e.key, trainer::config_detail::where(e.key_mark), ": ", owner,
                                       " has no argument '", e.key, "' (",
                                       read.empty() ? std::string("it takes none") : "it read " + read, ")"));
  }
}

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ModelSpec, std::less<>> models;
  std::map<std::string, DatasetSpec, std::less<>> datasets;
};

Registry& registry() {
  static Registry r;
  return r;
}

void check_new_name(const std::string& what, const std::string& name, const std::vector<std::string>& builtins,
                    bool taken, bool has_build) {
  bool ok = !name.empty();
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
  KILN_CHECK(ok, "register_", what, ": '", name, "' is not a valid name (letters, digits, '-' and '_')");
  KILN_CHECK(std::find(builtins.begin(), builtins.end(), name) == builtins.end(), "register_", what, ": '", name,
             "' is a built-in ", what, "'s name");
  KILN_CHECK(!taken, "register_", what, ": '", name, "' is registered already");
  KILN_CHECK(has_build, "register_", what, ": '", name, "' has no build function");
}

template <typename Map>
std::vector<std::string> names_of(const Map& map) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  std::vector<std::string> out;
  for (const auto& [name, spec] : map) out.push_back(name);
  return out;
}

}  // namespace

const std::vector<std::string>& builtin_models() {
  static const std::vector<std::string> names = {"mlp", "cnn", "resnet-small", "gpt-mini", "lstm-lm"};
  return names;
}

const std::vector<std::string>& builtin_datasets() {
  static const std::vector<std::string> names = {"fashion-mnist", "mnist", "idx", "csv", "synthetic", "text"};
  return names;
}

void register_model(const std::string& name, ModelSpec spec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  check_new_name("model", name, builtin_models(), r.models.count(name) > 0, static_cast<bool>(spec.build));
  r.models.emplace(name, std::move(spec));
}

void register_dataset(const std::string& name, DatasetSpec spec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  check_new_name("dataset", name, builtin_datasets(), r.datasets.count(name) > 0, static_cast<bool>(spec.build));
  r.datasets.emplace(name, std::move(spec));
}

std::vector<std::string> registered_models() { return names_of(registry().models); }
std::vector<std::string> registered_datasets() { return names_of(registry().datasets); }

// NOTE: the pointers stay valid: std::map never moves its elements, and entries are only added (clear_registry
// is for tests, between runs).
const ModelSpec* find_registered_model(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.models.find(name);
  return it == r.models.end() ? nullptr : &it->second;
}

const DatasetSpec* find_registered_dataset(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.datasets.find(name);
  return it == r.datasets.end() ? nullptr : &it->second;
}

bool is_language_model(std::string_view name) {
  if (name == "gpt-mini" || name == "lstm-lm") return true;
  const ModelSpec* spec = find_registered_model(name);
  return spec != nullptr && spec->language_model;
}

void clear_registry() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.models.clear();
  r.datasets.clear();
}

}  // namespace kiln::tools
