// The writer half of yaml.h: emit() and emit_inline(), kept apart from the parser in yaml.cpp because the two
// share nothing but the scalar typing rules (plain_scalar_type, is_null_word). What it guarantees is that
// parse() reads its output back to an equal node, and that a YAML 1.1 reader such as PyYAML reads strings as
// strings: anything that would type as something else is double-quoted.
#include "kiln/trainer/yaml.h"

#include <cctype>
#include <string>
#include <string_view>

namespace kiln::trainer::yaml {

namespace {

// The flow indicators, as the parser's cursor stops on them: inside `[...]` or `{...}` a plain scalar holding
// one would end early, so such strings are quoted there.
bool is_flow_indicator(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }

// Strings that YAML 1.1 readers (PyYAML, many tools that open a saved config) would read as something else:
// yes/no/on/off booleans, numbers with '_' or a leading 0 (octal), dates, sexagesimal 1:30, and the merge and
// value keys. Quoting them costs nothing and keeps the dump portable.
bool is_yaml11_special(std::string_view t) {
  std::string lower;
  for (char c : t) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "yes" || lower == "no" || lower == "on" || lower == "off" || lower == "y" || lower == "n") return true;
  if (t == "=" || t == "<<") return true;
  std::string_view body = t;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.remove_prefix(1);
  if (body.empty() || !(std::isdigit(static_cast<unsigned char>(body[0])) || body[0] == '.')) return false;
  return body.find_first_not_of("0123456789_.:-+eE") == std::string_view::npos;
}

// Whether `text` must be double-quoted to read back as the same scalar. `is_string`: the scalar is meant
// as a string (quoted, or plain text that types as a string anyway).
bool needs_quotes(std::string_view t, bool is_string, bool flow) {
  if (is_null_word(t)) return true;
  if (is_string && (plain_scalar_type(t) != ScalarType::String || is_yaml11_special(t))) return true;
  if (!is_string) return false;  // a plain number or boolean: its text is safe as it is
  if (t.front() == ' ' || t.back() == ' ' || t.back() == ':') return true;
  if (std::string_view("-?:,[]{}#&*!|>'\"%@`").find(t.front()) != std::string_view::npos) return true;
  if (t.find(": ") != std::string_view::npos || t.find(" #") != std::string_view::npos) return true;
  for (char c : t) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
    if (flow && is_flow_indicator(c)) return true;
  }
  return false;
}

std::string double_quoted(std::string_view t) {
  std::string out = "\"";
  for (char c : t) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\0': out += "\\0"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[(c >> 4) & 0xF];
          out += hex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string scalar_text(const Node& n, bool flow) {
  if (n.is_null()) return "null";
  bool is_string = n.scalar_type() == ScalarType::String;
  return needs_quotes(n.text(), is_string, flow) ? double_quoted(n.text()) : n.text();
}

std::string key_text(const std::string& key) { return needs_quotes(key, true, false) ? double_quoted(key) : key; }

bool is_leaf(const Node& n) { return n.is_null() || n.is_scalar(); }

bool is_flat_sequence(const Node& n) {
  if (!n.is_sequence()) return false;
  for (const Node& item : n.items()) {
    if (!is_leaf(item)) return false;
  }
  return true;
}

void emit_flow(const Node& n, std::string& out) {
  if (is_leaf(n)) {
    out += scalar_text(n, true);
  } else if (n.is_sequence()) {
    out += '[';
    for (size_t i = 0; i < n.items().size(); ++i) {
      if (i) out += ", ";
      emit_flow(n.items()[i], out);
    }
    out += ']';
  } else {
    out += '{';
    for (size_t i = 0; i < n.entries().size(); ++i) {
      if (i) out += ", ";
      out += needs_quotes(n.entries()[i].key, true, true) ? double_quoted(n.entries()[i].key) : n.entries()[i].key;
      out += ": ";
      emit_flow(n.entries()[i].value, out);
    }
    out += '}';
  }
}

// Values that fit after `key: ` or `- ` on the same line.
bool is_inline(const Node& n) { return is_leaf(n) || n.size() == 0 || is_flat_sequence(n); }

void emit_block(const Node& n, int indent, std::string& out);

// A block collection as a list item: written one indent deeper, then its first line's indent becomes "- ".
void emit_item(const Node& item, int indent, std::string& out) {
  std::string pad(indent, ' ');
  if (is_inline(item)) {
    out += pad + "- ";
    emit_flow(item, out);
    out += '\n';
    return;
  }
  std::string nested;
  emit_block(item, indent + 2, nested);
  out += pad + "- " + nested.substr(indent + 2);
}

void emit_block(const Node& n, int indent, std::string& out) {
  std::string pad(indent, ' ');
  if (n.is_sequence()) {
    for (const Node& item : n.items()) emit_item(item, indent, out);
    return;
  }
  for (const Entry& e : n.entries()) {
    out += pad + key_text(e.key) + ":";
    if (is_inline(e.value)) {
      out += ' ';
      emit_flow(e.value, out);
      out += '\n';
    } else {
      out += '\n';
      emit_block(e.value, indent + 2, out);
    }
  }
}

}  // namespace

std::string emit(const Node& node) {
  std::string out;
  if (is_inline(node)) {
    emit_flow(node, out);
    out += '\n';
  } else {
    emit_block(node, 0, out);
  }
  return out;
}

std::string emit_inline(const Node& node) {
  std::string out;
  emit_flow(node, out);
  return out;
}

}  // namespace kiln::trainer::yaml
