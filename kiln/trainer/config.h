// Typed configs declared once: a schema binds each dotted key ("trainer.max_epochs") to a member of a plain
// struct, with a one-line doc, and from that one declaration comes loading (a YAML file plus `--set key=value`
// overrides), validation, the resolved config as YAML, and a help text.
//
//   struct Trainer { int max_epochs = 3; std::optional<int64_t> seed; };
//   struct Run { Trainer trainer; };
//   Schema<Run> schema;
//   auto trainer = schema.section("trainer", &Run::trainer, "the training loop");
//   trainer.add("max_epochs", &Trainer::max_epochs, "stop after this many epochs").at_least(-1);
//   trainer.add("seed", &Trainer::seed, "the random seed; null: not seeded");
//   Run run = schema.load_file("run.yaml", {"trainer.max_epochs=5"});  // then run.trainer.max_epochs
//
// Why members and not a map of values: code that uses the config reads `cfg.trainer.max_epochs`, typed and
// checked by the compiler, and defaults live in the struct where a reader looks for them. The schema only
// adds names, docs and (de)serialization.
//
// Value types and what they accept (YAML 1.2 core typing, see yaml.h): bool (true/false); int and int64_t
// (integers, range-checked); double (any number, .inf, .nan); std::string (any scalar's text: `precision: 32`
// is the string "32"); an enum of strings (add_enum: a std::string that must be one of a list);
// std::vector<T> of those (a YAML list, block or flow); std::optional<T> (null allowed); BatchLimit (an
// integer is a count, a float a fraction in [0, 1]); a duration (add_duration: seconds, or "DD:HH:MM:SS");
// an open mapping (add_mapping: a yaml::Node holding a mapping of any keys, which the schema does not check:
// the arguments of a model a program registered, read by that model's own code). `--set` reaches into an open
// mapping by dotted key: `--set model.args.width=64` sets (or adds) its entry `width`.
// Errors name the key, what was found, what was expected and where: "trainer.max_epochs: expected an integer,
// found 'three' (run.yaml line 3)". An unknown key or section anywhere is an error that suggests the nearest
// valid key. A value given twice in one file is an error; several `--set` for one key apply in order. In a
// file, keys nest as sections (`trainer:` then `  max_epochs: 5`); dotted keys are for `--set` only.
//
// The dump writes every key, so a saved config still means the same run after a default changes. The help
// text is itself YAML: every key at its default, each with a `# type: doc` comment, loadable as a config.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/trainer/batch_limit.h"
#include "kiln/trainer/yaml.h"

namespace kiln::trainer {

// One key of a schema, type-erased. Built by SchemaSection::add*; the setters refine it.
struct ConfigKey {
  std::string path;  // "trainer.max_epochs"
  std::string type;  // for help and messages: "int", "list of float", "one of auto|cpu|cuda", "int or null"
  std::string doc;
  std::vector<std::string> choices;  // the allowed strings of an enum
  // An enum's further choices, asked for at each read rather than fixed when the schema was built (the models
  // and datasets a program registered before loading its config).
  std::function<std::vector<std::string>()> more_choices;
  std::string more_what;  // what more_choices are, for messages ("a registered model")
  bool open_mapping = false;  // add_mapping: a mapping of any keys, which --set can reach into
  std::optional<double> minimum;  // numbers (and each number of a list) must be at least this
  bool bool_as_int = false;  // an int key that also takes true (1) and false (0), like fast_dev_run
  std::function<void(void* config, const yaml::Node& value, const ConfigKey& key)> read;
  std::function<yaml::Node(const void* config)> write;

  ConfigKey& at_least(double value) { minimum = value; return *this; }
  ConfigKey& accept_bool() {
    bool_as_int = true;
    type += " or bool";
    return *this;
  }
  // `what` names the further choices in help texts and errors ("a registered model").
  ConfigKey& allow_more(std::function<std::vector<std::string>()> choices_now, const std::string& what) {
    more_choices = std::move(choices_now);
    more_what = what;
    type += " or " + what;
    return *this;
  }
};

namespace config_detail {

// " (run.yaml line 3)", " (--set trainer.max_epochs=three)": where a value came from, for messages.
std::string where(const yaml::Mark& mark);
[[noreturn]] void type_error(const yaml::Node& value, const std::string& name, const std::string& expected);
int64_t read_int(const yaml::Node& value, const ConfigKey& key, const std::string& name, int64_t lo, int64_t hi);
double read_double(const yaml::Node& value, const ConfigKey& key, const std::string& name);
bool read_bool(const yaml::Node& value, const ConfigKey& key, const std::string& name);
std::string read_string(const yaml::Node& value, const ConfigKey& key, const std::string& name);
BatchLimit read_count_or_fraction(const yaml::Node& value, const ConfigKey& key, const std::string& name);
std::optional<double> read_duration(const yaml::Node& value, const ConfigKey& key, const std::string& name);
const std::vector<yaml::Node>& read_list(const yaml::Node& value, const std::string& name, const std::string& expected);
yaml::Node write_int(int64_t value);
yaml::Node write_double(double value);
yaml::Node write_bool(bool value);
yaml::Node write_string(const std::string& value);
yaml::Node write_count_or_fraction(const BatchLimit& value);
// Shortest text that reads back as the same double, always with a '.' or an exponent ("1.0", "1.0e-08").
std::string format_double(double value);

// How each member type reads, writes and names itself.
template <typename T>
struct Codec;

template <>
struct Codec<bool> {
  static std::string name() { return "bool"; }
  static bool read(const yaml::Node& v, const ConfigKey& k, const std::string& n) { return read_bool(v, k, n); }
  static yaml::Node write(bool v) { return write_bool(v); }
};

template <>
struct Codec<int> {
  static std::string name() { return "int"; }
  static int read(const yaml::Node& v, const ConfigKey& k, const std::string& n) {
    return static_cast<int>(read_int(v, k, n, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  }
  static yaml::Node write(int v) { return write_int(v); }
};

template <>
struct Codec<int64_t> {
  static std::string name() { return "int"; }
  static int64_t read(const yaml::Node& v, const ConfigKey& k, const std::string& n) {
    return read_int(v, k, n, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  }
  static yaml::Node write(int64_t v) { return write_int(v); }
};

template <>
struct Codec<double> {
  static std::string name() { return "float"; }
  static double read(const yaml::Node& v, const ConfigKey& k, const std::string& n) { return read_double(v, k, n); }
  static yaml::Node write(double v) { return write_double(v); }
};

template <>
struct Codec<std::string> {
  static std::string name() { return "string"; }
  static std::string read(const yaml::Node& v, const ConfigKey& k, const std::string& n) { return read_string(v, k, n); }
  static yaml::Node write(const std::string& v) { return write_string(v); }
};

template <>
struct Codec<BatchLimit> {
  static std::string name() { return "int (batches) or float (fraction)"; }
  static BatchLimit read(const yaml::Node& v, const ConfigKey& k, const std::string& n) {
    return read_count_or_fraction(v, k, n);
  }
  static yaml::Node write(const BatchLimit& v) { return write_count_or_fraction(v); }
};

template <typename T>
struct Codec<std::vector<T>> {
  static std::string name() { return "list of " + Codec<T>::name(); }
  static std::vector<T> read(const yaml::Node& v, const ConfigKey& k, const std::string& n) {
    std::vector<T> out;
    const std::vector<yaml::Node>& items = read_list(v, n, "a " + name());
    for (size_t i = 0; i < items.size(); ++i) out.push_back(Codec<T>::read(items[i], k, n + "[" + std::to_string(i) + "]"));
    return out;
  }
  static yaml::Node write(const std::vector<T>& v) {
    yaml::Node list = yaml::Node::sequence();
    for (const T& item : v) list.push_back(Codec<T>::write(item));
    return list;
  }
};

// An open mapping (add_mapping).
yaml::Node read_mapping(const yaml::Node& value, const std::string& name);

template <>
struct Codec<yaml::Node> {
  static std::string name() { return "mapping"; }
  static yaml::Node read(const yaml::Node& v, const ConfigKey&, const std::string& n) { return read_mapping(v, n); }
  static yaml::Node write(const yaml::Node& v) { return v; }
};

template <typename T>
struct Codec<std::optional<T>> {
  static std::string name() { return Codec<T>::name() + " or null"; }
  static std::optional<T> read(const yaml::Node& v, const ConfigKey& k, const std::string& n) {
    if (v.is_null()) return std::nullopt;
    return Codec<T>::read(v, k, n);
  }
  static yaml::Node write(const std::optional<T>& v) { return v ? Codec<T>::write(*v) : yaml::Node::null(); }
};

}  // namespace config_detail

// The untyped half of a schema: the keys in declaration order, and everything done by walking them.
class SchemaBase {
 public:
  const std::vector<std::unique_ptr<ConfigKey>>& keys() const { return keys_; }
  const ConfigKey* find_key(std::string_view path) const;
  // Every key at its default, nested by section in declaration order, each with a comment giving its type
  // and doc: YAML that loads back to the defaults.
  std::string help_text(const void* defaults) const;

  // For SchemaSection: declare a key or a section (a section's doc is shown in the help text).
  ConfigKey& add_key(ConfigKey key);
  void add_section(std::string path, std::string doc);

 protected:
  // Reads `doc` (a mapping, or null for an empty file) into `config`, then applies `overrides`
  // ("key=value" strings, the value parsed as one line of YAML).
  void read_into(void* config, const yaml::Node& doc, const std::vector<std::string>& overrides) const;
  // The config as a YAML tree: every key, sections in declaration order.
  yaml::Node to_node(const void* config) const;

 private:
  void read_mapping(void* config, const yaml::Node& map, const std::string& prefix) const;
  // --set into an open mapping: `path` is such a key followed by keys inside it. False when it is not.
  bool set_in_open_mapping(void* config, const std::string& path, std::string_view text,
                           const std::string& override_text) const;
  [[noreturn]] void unknown_key(const std::string& path, const std::string& where) const;
  bool is_section(std::string_view path) const;

  std::vector<std::unique_ptr<ConfigKey>> keys_;  // unique_ptr: add_key hands out references that must stay valid
  std::vector<std::pair<std::string, std::string>> sections_;  // path, doc
};

template <typename Config>
class Schema;

// Declares the keys of one section (a struct reached from Config through `get`).
template <typename Config, typename Section>
class SchemaSection {
 public:
  SchemaSection(SchemaBase* schema, std::string prefix, std::function<Section&(Config&)> get)
      : schema_(schema), prefix_(std::move(prefix)), get_(std::move(get)) {}

  // A key of any type Codec knows (see the header comment).
  template <typename T>
  ConfigKey& add(std::string_view name, T Section::*member, std::string doc) {
    ConfigKey key = make_key<T>(name, member, std::move(doc));
    key.type = config_detail::Codec<T>::name();
    return schema_->add_key(std::move(key));
  }

  // A string that must be one of `choices`.
  ConfigKey& add_enum(std::string_view name, std::string Section::*member, std::vector<std::string> choices, std::string doc) {
    ConfigKey key = make_key<std::string>(name, member, std::move(doc));
    key.type = "one of ";
    for (size_t i = 0; i < choices.size(); ++i) key.type += (i ? "|" : "") + choices[i];
    key.choices = std::move(choices);
    return schema_->add_key(std::move(key));
  }

  // Seconds, given as a number of seconds or as "DD:HH:MM:SS"; null for none (Lightning's max_time).
  ConfigKey& add_duration(std::string_view name, std::optional<double> Section::*member, std::string doc) {
    ConfigKey key = make_key<std::optional<double>>(name, member, std::move(doc));
    auto get = get_;
    key.read = [get, member](void* config, const yaml::Node& value, const ConfigKey& k) {
      get(*static_cast<Config*>(config)).*member = config_detail::read_duration(value, k, k.path);
    };
    key.type = "duration (seconds or DD:HH:MM:SS) or null";
    return schema_->add_key(std::move(key));
  }

  // A mapping of any keys, kept as written (null reads as an empty mapping); see the header comment.
  ConfigKey& add_mapping(std::string_view name, yaml::Node Section::*member, std::string doc) {
    ConfigKey key = make_key<yaml::Node>(name, member, std::move(doc));
    key.type = "mapping";
    key.open_mapping = true;
    return schema_->add_key(std::move(key));
  }

  // A nested section: `callbacks.section("checkpoint", &Callbacks::checkpoint)`.
  template <typename Sub>
  SchemaSection<Config, Sub> section(std::string_view name, Sub Section::*member, std::string doc = "") {
    std::string path = prefix_ + std::string(name);
    schema_->add_section(path, std::move(doc));
    auto get = get_;
    return SchemaSection<Config, Sub>(schema_, path + ".", [get, member](Config& c) -> Sub& { return get(c).*member; });
  }

 private:
  template <typename T>
  ConfigKey make_key(std::string_view name, T Section::*member, std::string doc) {
    ConfigKey key;
    key.path = prefix_ + std::string(name);
    key.doc = std::move(doc);
    auto get = get_;
    key.read = [get, member](void* config, const yaml::Node& value, const ConfigKey& k) {
      get(*static_cast<Config*>(config)).*member = config_detail::Codec<T>::read(value, k, k.path);
    };
    // NOTE: write only reads the member; the const_cast lets one accessor serve both directions.
    key.write = [get, member](const void* config) {
      return config_detail::Codec<T>::write(get(*const_cast<Config*>(static_cast<const Config*>(config))).*member);
    };
    return key;
  }

  SchemaBase* schema_;
  std::string prefix_;  // "trainer." ("" at the top)
  std::function<Section&(Config&)> get_;
};

// The schema of one config struct. Declare keys through section() and add() once (a function-local static is
// the usual home), then load, dump and describe configs with it. Defaults are those of `Config{}`.
template <typename Config>
class Schema : public SchemaBase {
 public:
  SchemaSection<Config, Config> root() {
    return SchemaSection<Config, Config>(this, "", [](Config& c) -> Config& { return c; });
  }
  template <typename Sub>
  SchemaSection<Config, Sub> section(std::string_view name, Sub Config::*member, std::string doc = "") {
    return root().section(name, member, std::move(doc));
  }
  template <typename T>
  ConfigKey& add(std::string_view name, T Config::*member, std::string doc) {
    return root().add(name, member, std::move(doc));
  }
  // A check across keys, run after every load: throws kiln::Error naming the keys and values at fault.
  void add_check(std::function<void(const Config&)> check) { checks_.push_back(std::move(check)); }

  // The defaults, then `doc`, then `overrides` ("trainer.max_epochs=5"), then the checks.
  Config load(const yaml::Node& doc, const std::vector<std::string>& overrides = {}) const {
    Config config{};
    read_into(&config, doc, overrides);
    check(config);
    return config;
  }
  Config load_text(std::string_view text, std::string source, const std::vector<std::string>& overrides = {}) const {
    return load(yaml::parse(text, std::move(source)), overrides);
  }
  Config load_file(const std::string& path, const std::vector<std::string>& overrides = {}) const {
    return load(yaml::parse_file(path), overrides);
  }
  void check(const Config& config) const {
    for (const auto& c : checks_) c(config);
  }

  // The resolved config as YAML: every key, in declaration order; load_text reads it back to an equal config.
  std::string dump(const Config& config) const { return yaml::emit(to_node(&config)); }
  yaml::Node to_yaml(const Config& config) const { return to_node(&config); }
  std::string help() const {
    Config defaults{};
    return help_text(&defaults);
  }

 private:
  std::vector<std::function<void(const Config&)>> checks_;
};

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace kiln::trainer
