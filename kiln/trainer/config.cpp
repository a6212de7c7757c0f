// The untyped half of config.h: reading values with messages that name key, value, expectation and place;
// walking a YAML document against the schema's keys; `--set` overrides; the dump and the help text.
#include "kiln/trainer/config.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>

#include "kiln/tensor/error.h"

namespace kiln::trainer {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

namespace {

std::string_view leaf_name(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

// The candidate nearest to `wrong`, or "" when none is close enough to be a plausible typo. A candidate with
// the same last component wins outright: `trainer.lr` was meant as `optimizer.lr`, not `trainer.fc`.
std::string nearest(std::string_view wrong, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, wrong.size() / 3) + 1;
  bool best_same_leaf = false;
  for (const std::string& c : candidates) {
    bool same_leaf = leaf_name(c) == leaf_name(wrong) && wrong.find('.') != std::string_view::npos;
    size_t d = edit_distance(wrong, c);
    if ((same_leaf && !best_same_leaf) || (same_leaf == best_same_leaf && d < best_distance)) {
      best = c;
      best_distance = d;
      best_same_leaf = same_leaf;
    }
  }
  return best;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Reading one value

namespace config_detail {

std::string where(const yaml::Mark& mark) {
  const std::string& source = mark.source_name();
  if (source.rfind("--set ", 0) == 0) return " (" + source + ")";
  if (mark.line == 0) return source.empty() ? "" : " (" + source + ")";
  return " (" + (source.empty() ? std::string() : source + " ") + "line " + std::to_string(mark.line) + ")";
}

void type_error(const yaml::Node& value, const std::string& name, const std::string& expected) {
  detail::throw_error(detail::concat(name, ": expected ", expected, ", found ", value.describe(), where(value.mark())));
}

static void check_minimum(double v, const yaml::Node& value, const ConfigKey& key, const std::string& name) {
  if (key.minimum && !(v >= *key.minimum)) {
    double m = *key.minimum;
    std::string bound = m == std::floor(m) && std::fabs(m) < 1e15 ? std::to_string(static_cast<int64_t>(m)) : format_double(m);
    detail::throw_error(detail::concat(name, ": expected a value >= ", bound, ", found ",
                                       value.describe(), where(value.mark())));
  }
}

int64_t read_int(const yaml::Node& value, const ConfigKey& key, const std::string& name, int64_t lo, int64_t hi) {
  if (!value.is_scalar() || value.quoted()) type_error(value, name, key.bool_as_int ? "an integer or a boolean" : "an integer");
  yaml::ScalarType type = value.scalar_type();
  if (key.bool_as_int && type == yaml::ScalarType::Bool) return value.as_bool() ? 1 : 0;
  if (type != yaml::ScalarType::Int) type_error(value, name, key.bool_as_int ? "an integer or a boolean" : "an integer");
  int64_t v;
  try {
    v = value.as_int();
  } catch (const Error&) {
    type_error(value, name, "an integer that fits in 64 bits");
  }
  if (v < lo || v > hi) {
    type_error(value, name, detail::concat("an integer between ", lo, " and ", hi));
  }
  check_minimum(static_cast<double>(v), value, key, name);
  return v;
}

double read_double(const yaml::Node& value, const ConfigKey& key, const std::string& name) {
  if (!value.is_scalar() || value.quoted() || value.scalar_type() == yaml::ScalarType::String ||
      value.scalar_type() == yaml::ScalarType::Bool) {
    type_error(value, name, "a number");
  }
  double v;
  try {
    v = value.as_double();
  } catch (const Error&) {
    type_error(value, name, "a number within the range of a double");
  }
  check_minimum(v, value, key, name);
  return v;
}

bool read_bool(const yaml::Node& value, const ConfigKey& key, const std::string& name) {
  if (!value.is_scalar() || value.scalar_type() != yaml::ScalarType::Bool) type_error(value, name, "true or false");
  return value.as_bool();
}

std::string read_string(const yaml::Node& value, const ConfigKey& key, const std::string& name) {
  if (!value.is_scalar()) {
    type_error(value, name, key.choices.empty() ? std::string("a string") : "one of " + key.type.substr(7));
  }
  const std::string& text = value.text();
  if (key.choices.empty()) return text;
  std::vector<std::string> choices = key.choices;
  std::vector<std::string> more = key.more_choices ? key.more_choices() : std::vector<std::string>{};
  choices.insert(choices.end(), more.begin(), more.end());
  if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
    std::string allowed;
    for (const std::string& c : key.choices) allowed += (allowed.empty() ? "" : ", ") + c;
    if (key.more_choices) {
      std::string names;
      for (const std::string& c : more) names += (names.empty() ? "" : ", ") + c;
      allowed += " (or " + key.more_what + ": " + (names.empty() ? "none in this program" : names) + ")";
    }
    // No "did you mean" here: the list is short and complete, and the nearest spelling can mislead
    // ("gpu" is one letter from "cpu" but means "cuda").
    detail::throw_error(detail::concat(name, ": expected one of ", allowed, "; found ", value.describe(), where(value.mark())));
  }
  return text;
}

// Keys inside an open mapping are single names: `--set a.b.c=1` reaches nested mappings by dots, so a key
// holding a dot could never be set from the command line (and would read as two levels there).
static void check_open_keys(const yaml::Node& map, const std::string& name) {
  for (const yaml::Entry& e : map.entries()) {
    KILN_CHECK(!e.key.empty() && e.key.find('.') == std::string::npos, name, ": key '", e.key, "'", where(e.key_mark),
               " is empty or holds a dot; nest mappings instead (", name, ".a.b is `a: {b: ...}`)");
    if (e.value.is_mapping()) check_open_keys(e.value, name + "." + e.key);
  }
}

yaml::Node read_mapping(const yaml::Node& value, const std::string& name) {
  if (value.is_null()) return yaml::Node::mapping(value.mark());
  if (!value.is_mapping()) type_error(value, name, "a mapping");
  check_open_keys(value, name);
  return value;
}

BatchLimit read_count_or_fraction(const yaml::Node& value, const ConfigKey& key, const std::string& name) {
  const char* expected = "a number of batches (an integer >= 0) or a fraction (a float in [0.0, 1.0])";
  if (!value.is_scalar() || value.quoted()) type_error(value, name, expected);
  if (value.scalar_type() == yaml::ScalarType::Int) {
    int64_t n = value.as_int();
    if (n < 0) type_error(value, name, expected);
    return BatchLimit::of_count(n);
  }
  if (value.scalar_type() != yaml::ScalarType::Float) type_error(value, name, expected);
  double f = value.as_double();
  if (!(f >= 0.0 && f <= 1.0)) type_error(value, name, expected);
  return BatchLimit::of_fraction(f);
}

std::optional<double> read_duration(const yaml::Node& value, const ConfigKey& key, const std::string& name) {
  const char* expected = "a duration: a number of seconds or \"DD:HH:MM:SS\"";
  if (value.is_null()) return std::nullopt;
  if (!value.is_scalar()) type_error(value, name, expected);
  yaml::ScalarType type = value.scalar_type();
  if (type == yaml::ScalarType::Int || type == yaml::ScalarType::Float) {
    double seconds = value.as_double();
    if (!(seconds >= 0.0) || std::isinf(seconds)) type_error(value, name, expected);
    return seconds;
  }
  // DD:HH:MM:SS, each field a non-negative integer; hours, minutes and seconds below 24, 60 and 60.
  const std::string& text = value.text();
  int64_t fields[4];
  size_t start = 0;
  for (int i = 0; i < 4; ++i) {
    size_t end = i < 3 ? text.find(':', start) : text.size();
    if (end == std::string::npos || end == start) type_error(value, name, expected);
    auto [ptr, ec] = std::from_chars(text.data() + start, text.data() + end, fields[i]);
    if (ec != std::errc() || ptr != text.data() + end || fields[i] < 0) type_error(value, name, expected);
    start = end + 1;
  }
  if (fields[1] >= 24 || fields[2] >= 60 || fields[3] >= 60) type_error(value, name, expected);
  return static_cast<double>(((fields[0] * 24 + fields[1]) * 60 + fields[2]) * 60 + fields[3]);
}

const std::vector<yaml::Node>& read_list(const yaml::Node& value, const std::string& name, const std::string& expected) {
  if (!value.is_sequence()) type_error(value, name, expected);
  return value.items();
}

yaml::Node write_int(int64_t value) { return yaml::Node::scalar(std::to_string(value)); }
yaml::Node write_double(double value) { return yaml::Node::scalar(format_double(value)); }
yaml::Node write_bool(bool value) { return yaml::Node::scalar(value ? "true" : "false"); }
yaml::Node write_string(const std::string& value) { return yaml::Node::scalar(value, true); }

yaml::Node write_count_or_fraction(const BatchLimit& value) {
  return value.is_count ? write_int(value.count) : write_double(value.fraction);
}

std::string format_double(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, end);
  // A float must read back as a float: "1" would be an integer, and a count where a fraction was meant.
  if (text.find_first_of(".e") == std::string::npos) return text + ".0";
  size_t e = text.find('e');
  if (e != std::string::npos && text.find('.') == std::string::npos) text.insert(e, ".0");
  return text;
}

}  // namespace config_detail

// ---------------------------------------------------------------------------------------------------------
// Walking the schema

const ConfigKey* SchemaBase::find_key(std::string_view path) const {
  for (const auto& k : keys_) {
    if (k->path == path) return k.get();
  }
  return nullptr;
}

bool SchemaBase::is_section(std::string_view path) const {
  for (const auto& [p, doc] : sections_) {
    if (p == path) return true;
  }
  return false;
}

// Key and section names are identifiers: the help text and the dump write them unquoted.
static void check_name(const std::string& path) {
  bool ok = !path.empty() && path.front() != '.' && path.back() != '.' && path.find("..") == std::string::npos;
  for (char c : path) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  KILN_CHECK(ok, "config schema: '", path, "' is not a valid key (letters, digits, '_' and '-', sections joined by '.')");
}

ConfigKey& SchemaBase::add_key(ConfigKey key) {
  check_name(key.path);
  KILN_CHECK(!find_key(key.path) && !is_section(key.path), "config schema: key '", key.path, "' declared twice");
  keys_.push_back(std::make_unique<ConfigKey>(std::move(key)));
  return *keys_.back();
}

void SchemaBase::add_section(std::string path, std::string doc) {
  check_name(path);
  KILN_CHECK(!find_key(path) && !is_section(path), "config schema: section '", path, "' declared twice");
  sections_.emplace_back(std::move(path), std::move(doc));
}

void SchemaBase::unknown_key(const std::string& path, const std::string& where) const {
  std::vector<std::string> candidates;
  for (const auto& k : keys_) candidates.push_back(k->path);
  for (const auto& [p, doc] : sections_) candidates.push_back(p);
  std::string suggestion = nearest(path, candidates);
  detail::throw_error(detail::concat("unknown key '", path, "'", where,
                                     suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?"));
}

void SchemaBase::read_mapping(void* config, const yaml::Node& map, const std::string& prefix) const {
  for (const yaml::Entry& e : map.entries()) {
    std::string path = prefix + e.key;
    std::string at = config_detail::where(e.key_mark);
    // Dotted keys are for --set; in a file one spelling per key keeps "given twice" detectable.
    KILN_CHECK(e.key.find('.') == std::string::npos, "key '", path, "'", at,
               ": write dotted keys as nested sections in a config file");
    if (const ConfigKey* key = find_key(path)) {
      key->read(config, e.value, *key);
    } else if (is_section(path)) {
      if (e.value.is_null()) continue;  // a section with every key commented out
      if (!e.value.is_mapping()) config_detail::type_error(e.value, path, "a section (a mapping of keys)");
      read_mapping(config, e.value, path + ".");
    } else {
      unknown_key(path, at);
    }
  }
}

// `map` with the entry at `keys` (a path into nested mappings) set to `value`, added at the end where new (its
// key marked as coming from the --set, for later messages).
static yaml::Node with_entry(const yaml::Node& map, const std::vector<std::string>& keys, size_t depth,
                             const yaml::Node& value, const std::string& name, const std::string& override_text) {
  if (!map.is_null() && !map.is_mapping()) {
    detail::throw_error(detail::concat("--set ", override_text, ": ", name, " is ", map.describe(),
                                       config_detail::where(map.mark()), ", not a mapping to set '", keys[depth],
                                       "' in (set ", name, " itself to replace it: --set ", name, "={...})"));
  }
  yaml::Node out = yaml::Node::mapping(map.mark());
  bool found = false;
  auto value_at = [&](const yaml::Node& old) {
    return depth + 1 == keys.size()
               ? value
               : with_entry(old, keys, depth + 1, value, name + "." + keys[depth], override_text);
  };
  if (map.is_mapping()) {
    for (const yaml::Entry& e : map.entries()) {
      if (e.key == keys[depth]) {
        found = true;
        out.add(e.key, value_at(e.value), e.key_mark);
      } else {
        out.add(e.key, e.value, e.key_mark);
      }
    }
  }
  if (!found) out.add(keys[depth], value_at(yaml::Node::null()), value.mark());
  return out;
}

bool SchemaBase::set_in_open_mapping(void* config, const std::string& path, std::string_view text,
                                     const std::string& override_text) const {
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
    const ConfigKey* key = find_key(path.substr(0, dot));
    if (!key || !key->open_mapping) continue;
    std::vector<std::string> keys;
    for (size_t begin = dot + 1;;) {
      size_t end = path.find('.', begin);
      keys.push_back(path.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
      KILN_CHECK(!keys.back().empty(), "--set ", override_text, ": '", path, "' has an empty key");
      if (end == std::string::npos) break;
      begin = end + 1;
    }
    yaml::Node value = yaml::parse_inline(text, "--set " + override_text);
    key->read(config, with_entry(key->write(config), keys, 0, value, key->path, override_text), *key);
    return true;
  }
  return false;
}

void SchemaBase::read_into(void* config, const yaml::Node& doc, const std::vector<std::string>& overrides) const {
  if (!doc.is_null()) {
    if (!doc.is_mapping()) config_detail::type_error(doc, "config", "a mapping of sections and keys");
    read_mapping(config, doc, "");
  }
  for (const std::string& o : overrides) {
    size_t eq = o.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, "--set expects key=value (like trainer.max_epochs=5), got '", o, "'");
    std::string path = o.substr(0, eq);
    while (!path.empty() && path.back() == ' ') path.pop_back();
    std::string at = " (--set " + o + ")";
    const ConfigKey* key = find_key(path);
    if (!key && set_in_open_mapping(config, path, std::string_view(o).substr(eq + 1), o)) continue;
    if (!key && is_section(path)) {
      detail::throw_error(detail::concat("'", path, "' is a section", at, "; set its keys one by one (--set ", path,
                                         ".<key>=<value>)"));
    }
    if (!key) unknown_key(path, at);
    key->read(config, yaml::parse_inline(std::string_view(o).substr(eq + 1), "--set " + o), *key);
  }
}

yaml::Node SchemaBase::to_node(const void* config) const {
  // Built recursively by prefix: a section appears where its first key was declared.
  std::function<yaml::Node(const std::string&)> build = [&](const std::string& prefix) {
    yaml::Node map = yaml::Node::mapping();
    std::vector<std::string> done;
    for (const auto& k : keys_) {
      if (k->path.rfind(prefix, 0) != 0) continue;
      std::string rest = k->path.substr(prefix.size());
      size_t dot = rest.find('.');
      if (dot == std::string::npos) {
        map.add(rest, k->write(config));
        continue;
      }
      std::string child = rest.substr(0, dot);
      if (std::find(done.begin(), done.end(), child) != done.end()) continue;
      done.push_back(child);
      map.add(child, build(prefix + child + "."));
    }
    return map;
  };
  return build("");
}

std::string SchemaBase::help_text(const void* defaults) const {
  // The help is itself a config: every key at its default, nested as in a file, each followed by a comment
  // with its type and doc. So it reads like the YAML a user writes, and can be copied as a starting point.
  struct Line {
    std::string text, comment;
  };
  std::vector<Line> lines;
  std::function<void(const std::string&, size_t)> walk = [&](const std::string& prefix, size_t depth) {
    std::string pad(2 * depth, ' ');
    std::vector<std::string> done;
    for (const auto& k : keys_) {
      if (k->path.rfind(prefix, 0) != 0) continue;
      std::string rest = k->path.substr(prefix.size());
      size_t dot = rest.find('.');
      if (dot == std::string::npos) {
        lines.push_back({pad + rest + ": " + yaml::emit_inline(k->write(defaults)), k->type + ": " + k->doc});
        continue;
      }
      std::string child = rest.substr(0, dot);
      if (std::find(done.begin(), done.end(), child) != done.end()) continue;
      done.push_back(child);
      std::string doc;
      for (const auto& [p, d] : sections_) {
        if (p == prefix + child) doc = d;
      }
      if (depth == 0 && !lines.empty()) lines.push_back({"", ""});
      lines.push_back({pad + child + ":", doc});
      walk(prefix + child + ".", depth + 1);
    }
  };
  walk("", 0);
  size_t width = 0;
  for (const Line& l : lines) {
    if (!l.comment.empty()) width = std::max(width, std::min<size_t>(l.text.size(), 40));
  }
  std::string out;
  for (const Line& l : lines) {
    out += l.text;
    if (!l.comment.empty()) out += std::string(l.text.size() < width ? width - l.text.size() : 0, ' ') + "  # " + l.comment;
    out += '\n';
  }
  return out;
}

}  // namespace kiln::trainer
