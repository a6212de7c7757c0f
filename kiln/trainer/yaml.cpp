// The YAML reader of yaml.h: scalar typing, nodes, and a line-based block parser with a one-line flow
// parser inside. The emitter lives in yaml_emit.cpp.
//
// The parser first cuts the text into content lines (indent, text, line number), skipping blank and comment
// lines, then reads block structure from the indents. A `- ` item rewrites its own line in place into a
// "virtual" line that starts after the dash, one indent deeper, so `- key: value` followed by more keys at
// that column parses as an ordinary mapping. Everything after `key:` or `- ` on a line (a scalar or a flow
// collection) is read by a cursor over that line alone: nothing in the subset spans lines except blocks.
#include "kiln/trainer/yaml.h"

#include <charconv>
#include <cctype>
#include <fstream>
#include <limits>
#include <sstream>

#include "kiln/serialize/json.h"
#include "kiln/tensor/error.h"

namespace kiln::trainer::yaml {

// ---------------------------------------------------------------------------------------------------------
// Marks, scalar typing and nodes

const std::string& Mark::source_name() const {
  static const std::string empty;
  return source ? *source : empty;
}

std::string Mark::str() const {
  const std::string& name = source_name();
  if (line == 0) return name.empty() ? "(built in code)" : name;
  std::string where = "line " + std::to_string(line) + ", column " + std::to_string(column);
  return name.empty() ? where : name + ": " + where;
}

bool is_null_word(std::string_view t) { return t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL"; }

static bool is_bool_word(std::string_view t, bool& value) {
  if (t == "true" || t == "True" || t == "TRUE") return value = true, true;
  if (t == "false" || t == "False" || t == "FALSE") return value = false, true;
  return false;
}

static bool all_digits(std::string_view t, int base) {
  if (t.empty()) return false;
  for (char c : t) {
    bool ok = base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) : (c >= '0' && c < '0' + base);
    if (!ok) return false;
  }
  return true;
}

// Splits an integer's text into sign, digits and base; false when the text is not a core-schema integer.
static bool split_int(std::string_view t, bool& negative, std::string_view& digits, int& base) {
  negative = false;
  base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'o')) {
    base = t[1] == 'x' ? 16 : 8;
    digits = t.substr(2);
    return all_digits(digits, base);
  }
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) negative = t[0] == '-', t.remove_prefix(1);
  digits = t;
  return all_digits(digits, 10);
}

static bool is_float_text(std::string_view t) {
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) t.remove_prefix(1);
  if (t == ".inf" || t == ".Inf" || t == ".INF") return true;
  size_t i = 0, int_digits = 0, frac_digits = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++int_digits;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == t.size();
}

ScalarType plain_scalar_type(std::string_view t) {
  bool b, negative;
  std::string_view digits;
  int base;
  if (is_bool_word(t, b)) return ScalarType::Bool;
  if (split_int(t, negative, digits, base)) return ScalarType::Int;
  if (is_float_text(t) || t == ".nan" || t == ".NaN" || t == ".NAN") return ScalarType::Float;
  return ScalarType::String;
}

Node Node::null(Mark mark) {
  Node n;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::scalar(std::string text, bool quoted, Mark mark) {
  Node n;
  n.kind_ = Kind::Scalar;
  n.text_ = std::move(text);
  n.quoted_ = quoted;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::sequence(Mark mark) {
  Node n;
  n.kind_ = Kind::Sequence;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::mapping(Mark mark) {
  Node n;
  n.kind_ = Kind::Mapping;
  n.mark_ = std::move(mark);
  return n;
}

void Node::type_error(const char* expected) const {
  detail::throw_error(detail::concat(mark_.str(), ": expected ", expected, ", found ", describe()));
}

const std::string& Node::text() const {
  if (kind_ != Kind::Scalar) type_error("a scalar");
  return text_;
}

ScalarType Node::scalar_type() const {
  if (kind_ != Kind::Scalar) type_error("a scalar");
  return quoted_ ? ScalarType::String : plain_scalar_type(text_);
}

bool Node::as_bool() const {
  bool value;
  if (kind_ != Kind::Scalar || quoted_ || !is_bool_word(text_, value)) type_error("true or false");
  return value;
}

int64_t Node::as_int() const {
  bool negative;
  std::string_view digits;
  int base;
  if (kind_ != Kind::Scalar || quoted_ || !split_int(text_, negative, digits, base)) type_error("an integer");
  // Parse the magnitude unsigned, so that INT64_MIN's magnitude (one more than INT64_MAX) still fits.
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  uint64_t limit = negative ? uint64_t(std::numeric_limits<int64_t>::max()) + 1 : std::numeric_limits<int64_t>::max();
  KILN_CHECK(ec == std::errc() && magnitude <= limit, mark_.str(), ": integer ", text_,
             " is out of range (a 64-bit integer holds -9223372036854775808 to 9223372036854775807)");
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

double Node::as_double() const {
  if (kind_ != Kind::Scalar || quoted_) type_error("a number");
  ScalarType type = plain_scalar_type(text_);
  if (type == ScalarType::Int) return static_cast<double>(as_int());
  if (type != ScalarType::Float) type_error("a number");
  std::string_view t = text_;
  bool negative = !t.empty() && t[0] == '-';
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) t.remove_prefix(1);
  if (t == ".nan" || t == ".NaN" || t == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  double value;
  if (t == ".inf" || t == ".Inf" || t == ".INF") {
    value = std::numeric_limits<double>::infinity();
  } else {
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    KILN_CHECK(ec == std::errc(), mark_.str(), ": number ", text_, " is out of range for a double");
  }
  return negative ? -value : value;
}

std::string Node::describe() const {
  switch (kind_) {
    case Kind::Null: return "null";
    case Kind::Sequence: return "a list";
    case Kind::Mapping: return "a mapping";
    case Kind::Scalar: break;
  }
  return quoted_ ? "\"" + text_ + "\" (quoted)" : "'" + text_ + "'";
}

const std::vector<Node>& Node::items() const {
  if (kind_ != Kind::Sequence) type_error("a list");
  return items_;
}

void Node::push_back(Node item) {
  if (kind_ != Kind::Sequence) type_error("a list");
  items_.push_back(std::move(item));
}

const std::vector<Entry>& Node::entries() const {
  if (kind_ != Kind::Mapping) type_error("a mapping");
  return entries_;
}

const Node* Node::find(std::string_view key) const {
  for (const Entry& e : entries()) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

void Node::add(std::string key, Node value, Mark key_mark) {
  for (const Entry& e : entries()) {
    // Nodes built in code have no position to name.
    KILN_CHECK(e.key != key, key_mark.line ? key_mark.str() + ": " : "", "repeated key '", key, "'",
               e.key_mark.line ? " (first at " + e.key_mark.str() + ")" : "");
  }
  entries_.push_back(Entry{std::move(key), std::move(key_mark), std::move(value)});
}

size_t Node::size() const {
  return kind_ == Kind::Sequence ? items_.size() : kind_ == Kind::Mapping ? entries_.size() : 0;
}

bool operator==(const Node& a, const Node& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Kind::Null: return true;
    case Kind::Scalar:
      return a.text_ == b.text_ && (a.scalar_type() == ScalarType::String) == (b.scalar_type() == ScalarType::String);
    case Kind::Sequence: return a.items_ == b.items_;
    case Kind::Mapping:
      if (a.entries_.size() != b.entries_.size()) return false;
      for (size_t i = 0; i < a.entries_.size(); ++i) {
        if (a.entries_[i].key != b.entries_[i].key || !(a.entries_[i].value == b.entries_[i].value)) return false;
      }
      return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------------
// Parser

namespace {

struct Line {
  int number;
  int indent;  // spaces before `text`; for a virtual line (after `- `), the column of `text` minus one
  std::string_view text;  // from the first non-space character to the end of the line
};

// A cursor over the rest of one line, for scalars and flow collections.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  int line;
  int column0;  // the column of s[0]
  bool at_end() const { return i >= s.size(); }
  char peek(size_t ahead = 0) const { return i + ahead < s.size() ? s[i + ahead] : '\0'; }
  int column() const { return column0 + static_cast<int>(i); }
  void skip_spaces() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
  // A '#' starts a comment at the start of the text or after white space.
  bool at_comment() const { return peek() == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t'); }
};

bool is_blank_char(char c) { return c == ' ' || c == '\t' || c == '\0'; }
bool is_flow_indicator(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }
bool is_sequence_entry(std::string_view t) { return !t.empty() && t[0] == '-' && (t.size() == 1 || t[1] == ' '); }

class Parser {
 public:
  Parser(std::string_view text, std::string source) : source_(std::make_shared<const std::string>(std::move(source))) {
    split_lines(text);
  }

  Node parse_document() {
    if (lines_.empty()) return Node::null(mark(1, 1));
    int top = lines_[0].indent;
    Node root = parse_block(top);
    if (pos_ < lines_.size()) {
      const Line& l = lines_[pos_];
      fail(l.number, l.indent + 1, l.indent < top ? "this line is indented less than the document's first line"
                                                  : "unexpected content after the document");
    }
    return root;
  }

  // One value on one line (for --set): a scalar or a flow collection.
  Node parse_inline(std::string_view text) {
    KILN_CHECK(text.find('\n') == std::string_view::npos, source_name(), ": expected a value on one line");
    Cursor c{text, 0, 1, 1};
    c.skip_spaces();
    if (c.at_end()) return Node::null(mark(1, 1));
    Node value = parse_value(c, false);
    expect_line_end(c);
    return value;
  }

 private:
  std::string source_name() const { return source_->empty() ? "YAML" : *source_; }
  Mark mark(int line, int column) const { return Mark{source_, line, column}; }

  [[noreturn]] void fail(int line, int column, const std::string& message) const {
    detail::throw_error(mark(line, column).str() + ": " + message);
  }
  [[noreturn]] void fail(const Cursor& c, const std::string& message) const { fail(c.line, c.column(), message); }

  void split_lines(std::string_view text) {
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 byte order mark
    int number = 0;
    bool seen_content = false;
    while (!text.empty() || number == 0) {
      size_t end = text.find('\n');
      std::string_view line = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
      ++number;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      size_t indent = 0;
      while (indent < line.size() && line[indent] == ' ') ++indent;
      size_t first = indent;
      while (first < line.size() && (line[first] == ' ' || line[first] == '\t')) ++first;
      if (first == line.size() || line[first] == '#') continue;  // blank or comment: tabs there are harmless
      if (first != indent) {
        fail(number, static_cast<int>(indent) + 1, "tab in indentation; YAML indents with spaces only");
      }
      std::string_view content = line.substr(indent);
      if (indent == 0 && (content == "---" || content.substr(0, 4) == "--- ")) {
        std::string_view rest = content.substr(3);
        while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
        if (seen_content) fail(number, 1, "a second document ('---'): kiln's config reader reads one document per file");
        if (!rest.empty() && rest[0] != '#') fail(number, 5, "content after '---': start the document on the next line");
        continue;
      }
      if (indent == 0 && (content == "..." || content.substr(0, 4) == "... ")) {
        fail(number, 1, "document end markers ('...') are not supported by kiln's config reader");
      }
      if (indent == 0 && content[0] == '%') fail(number, 1, "YAML directives ('%') are not supported by kiln's config reader");
      seen_content = true;
      lines_.push_back(Line{number, static_cast<int>(indent), content});
      if (end == std::string_view::npos) break;
    }
  }

  Cursor cursor(const Line& l) const { return Cursor{l.text, 0, l.number, l.indent + 1}; }

  // The block node whose first line is lines_[pos_], indented by `indent`.
  Node parse_block(int indent) {
    const Line& l = lines_[pos_];
    if (is_sequence_entry(l.text)) return parse_sequence(indent);
    Cursor c = cursor(l);
    if (find_key(c)) return parse_mapping(indent);
    c = cursor(l);
    Node value = parse_value(c, false);
    expect_line_end(c);
    ++pos_;
    return value;
  }

  Node parse_sequence(int indent) {
    Node seq = Node::sequence(mark(lines_[pos_].number, indent + 1));
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && is_sequence_entry(lines_[pos_].text)) {
      Line& l = lines_[pos_];
      size_t skip = 1;
      while (skip < l.text.size() && l.text[skip] == ' ') ++skip;
      if (skip == l.text.size() || l.text[skip] == '#') {  // `-` alone: the item is on the following lines
        Mark item_mark = mark(l.number, indent + 2);
        ++pos_;
        seq.push_back(pos_ < lines_.size() && lines_[pos_].indent > indent ? parse_block(lines_[pos_].indent)
                                                                            : Node::null(item_mark));
      } else {
        l.indent += static_cast<int>(skip);  // the virtual line: the item's text, at its own column
        l.text.remove_prefix(skip);
        seq.push_back(parse_block(l.indent));
      }
      check_not_deeper(indent);
    }
    return seq;
  }

  Node parse_mapping(int indent) {
    Node map = Node::mapping(mark(lines_[pos_].number, indent + 1));
    while (pos_ < lines_.size() && lines_[pos_].indent == indent) {
      const Line& l = lines_[pos_];
      Cursor c = cursor(l);
      if (is_sequence_entry(l.text)) fail(c, "expected 'key: value' at this indentation, found a list item");
      Mark key_mark = mark(l.number, c.column());
      std::string key;
      if (!find_key(c, &key)) fail(c, "expected 'key: value' at this indentation");
      for (const Entry& e : map.entries()) {
        if (e.key == key) {
          fail(key_mark.line, key_mark.column,
               "repeated key '" + key + "' (first at line " + std::to_string(e.key_mark.line) + ")");
        }
      }
      c.skip_spaces();
      Node value;
      if (c.at_end() || c.at_comment()) {
        Mark value_mark = mark(l.number, c.column());
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          value = parse_block(lines_[pos_].indent);
        } else if (pos_ < lines_.size() && lines_[pos_].indent == indent && is_sequence_entry(lines_[pos_].text)) {
          value = parse_sequence(indent);  // `key:` followed by `- item` lines at the key's own indent
        } else {
          value = Node::null(value_mark);
        }
      } else {
        value = parse_value(c, false);
        expect_line_end(c);
        ++pos_;
      }
      map.add(std::move(key), std::move(value), key_mark);
      check_not_deeper(indent);
    }
    return map;
  }

  void check_not_deeper(int indent) const {
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      const Line& l = lines_[pos_];
      fail(l.number, l.indent + 1, "unexpected indentation (kiln's config reader has no multi-line scalars; "
                                   "check that this line lines up with the keys or items above it)");
    }
  }

  // If the line at `c` starts with `key:` (followed by a space or the end), stores the key, leaves `c` after
  // the colon and returns true. Otherwise returns false (the line holds a value), or throws for constructs
  // that cannot start either.
  bool find_key(Cursor& c, std::string* key = nullptr) {
    check_indicator(c, true);
    if (c.peek() == '"' || c.peek() == '\'') {
      Cursor probe = c;
      std::string text = parse_quoted(probe);
      probe.skip_spaces();
      if (probe.peek() != ':' || !is_blank_char(probe.peek(1))) return false;
      probe.i += 1;
      if (key) *key = std::move(text);
      c = probe;
      return true;
    }
    if (c.peek() == '[' || c.peek() == '{') return false;
    for (size_t j = c.i; j < c.s.size(); ++j) {
      if (c.s[j] == '#' && j > 0 && (c.s[j - 1] == ' ' || c.s[j - 1] == '\t')) return false;
      if (c.s[j] == ':' && is_blank_char(j + 1 < c.s.size() ? c.s[j + 1] : '\0')) {
        std::string_view text = c.s.substr(c.i, j - c.i);
        while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
        if (text.empty()) fail(c, "empty key before ':'");
        if (key) *key = std::string(text);
        c.i = j + 1;
        return true;
      }
    }
    return false;
  }

  // Refuses, with a clear message, the constructs that kiln's subset leaves out.
  void check_indicator(const Cursor& c, bool block) const {
    char ch = c.peek();
    if (ch == '&') fail(c, "YAML anchors ('&') are not supported by kiln's config reader");
    if (ch == '*') fail(c, "YAML aliases ('*') are not supported by kiln's config reader");
    if (ch == '!') fail(c, "YAML tags ('!') are not supported by kiln's config reader");
    if (ch == '|' || ch == '>') {
      fail(c, "YAML block scalars ('|', '>') are not supported by kiln's config reader; write the value on one line");
    }
    if (ch == '%' || ch == '@' || ch == '`') fail(c, std::string("'") + ch + "' cannot start a plain value; quote it");
    if (ch == '?' && is_blank_char(c.peek(1))) fail(c, "YAML complex keys ('? ') are not supported by kiln's config reader");
    if (!block && ch == '-' && is_blank_char(c.peek(1))) {
      fail(c, "a list item ('- ') cannot start here; put it on its own line");
    }
    if (ch == ']' || ch == '}' || ch == ',') fail(c, std::string("unexpected '") + ch + "'");
  }

  // A value at `c`: a quoted or plain scalar, or a flow collection. `flow` is true inside [...] or {...}.
  Node parse_value(Cursor& c, bool flow) {
    check_indicator(c, false);
    Mark m = mark(c.line, c.column());
    if (c.peek() == '[') return parse_flow_sequence(c);
    if (c.peek() == '{') return parse_flow_mapping(c);
    if (c.peek() == '"' || c.peek() == '\'') return Node::scalar(parse_quoted(c), true, m);
    std::string text = parse_plain(c, flow);
    return is_null_word(text) ? Node::null(m) : Node::scalar(std::move(text), false, m);
  }

  std::string parse_plain(Cursor& c, bool flow) {
    size_t start = c.i;
    while (!c.at_end()) {
      char ch = c.peek();
      if (c.at_comment() && c.i > start) break;
      if (ch == ':' && (is_blank_char(c.peek(1)) || (flow && is_flow_indicator(c.peek(1))))) {
        if (flow) break;
        fail(c, "': ' inside a plain value (a mapping cannot start here); quote the value if it holds ': '");
      }
      if (flow && is_flow_indicator(ch)) break;
      ++c.i;
    }
    std::string_view text = c.s.substr(start, c.i - start);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    return std::string(text);
  }

  std::string parse_quoted(Cursor& c) {
    char quote = c.peek();
    Cursor open = c;
    ++c.i;
    std::string out;
    while (true) {
      if (c.at_end()) {
        fail(open, std::string(quote == '"' ? "double" : "single") +
                       "-quoted string not closed on this line (kiln's config reader has no multi-line strings)");
      }
      char ch = c.s[c.i++];
      if (quote == '\'') {
        if (ch != '\'') {
          out += ch;
        } else if (c.peek() == '\'') {
          out += '\'';
          ++c.i;
        } else {
          return out;
        }
        continue;
      }
      if (ch == '"') return out;
      if (ch != '\\') {
        out += ch;
        continue;
      }
      Cursor at = c;
      --at.i;
      char e = c.peek();
      ++c.i;
      switch (e) {
        case '0': out += '\0'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 't': case '\t': out += '\t'; break;
        case 'n': out += '\n'; break;
        case 'v': out += '\v'; break;
        case 'f': out += '\f'; break;
        case 'r': out += '\r'; break;
        case 'e': out += '\x1b'; break;
        case ' ': out += ' '; break;
        case '"': out += '"'; break;
        case '/': out += '/'; break;
        case '\\': out += '\\'; break;
        case 'x': case 'u': case 'U': {
          size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          std::string_view hex = c.s.substr(c.i, digits);
          uint32_t cp = 0;
          auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), cp, 16);
          if (hex.size() != digits || !all_digits(hex, 16) || ec != std::errc() || cp > 0x10FFFF) {
            fail(at, std::string("expected ") + std::to_string(digits) + " hex digits after '\\" + e + "'");
          }
          c.i += digits;
          serialize::json::append_utf8(out, cp);
          break;
        }
        default:
          fail(at, e == '\0' ? std::string("a '\\' at the end of the line (multi-line strings are not supported)")
                             : std::string("unknown escape '\\") + e + "' in a double-quoted string");
      }
    }
  }

  Node parse_flow_sequence(Cursor& c) {
    Cursor open = c;
    Node seq = Node::sequence(mark(c.line, c.column()));
    ++c.i;
    auto not_closed = [&] { fail(open, "'[' not closed on this line (kiln's config reader needs a flow list on one line)"); };
    while (true) {
      c.skip_spaces();
      if (c.peek() == ']') break;
      if (c.at_end() || c.at_comment()) not_closed();
      seq.push_back(parse_value(c, true));
      c.skip_spaces();
      if (c.peek() == ',') {
        ++c.i;
        continue;
      }
      if (c.peek() == ']') break;
      if (c.at_end() || c.at_comment()) not_closed();
      fail(c, "expected ',' or ']' in a flow list");
    }
    ++c.i;
    return seq;
  }

  Node parse_flow_mapping(Cursor& c) {
    Cursor open = c;
    Node map = Node::mapping(mark(c.line, c.column()));
    ++c.i;
    auto not_closed = [&] {
      fail(open, "'{' not closed on this line (kiln's config reader needs a flow mapping on one line)");
    };
    while (true) {
      c.skip_spaces();
      if (c.peek() == '}') break;
      if (c.at_end() || c.at_comment()) not_closed();
      check_indicator(c, false);
      Mark key_mark = mark(c.line, c.column());
      if (c.peek() == '[' || c.peek() == '{') fail(c, "flow collections as keys are not supported");
      std::string key = c.peek() == '"' || c.peek() == '\'' ? parse_quoted(c) : parse_plain(c, true);
      c.skip_spaces();
      if (c.peek() != ':') {
        if (c.at_end() || c.at_comment()) not_closed();
        fail(c, "expected ':' after the key '" + key + "' in a flow mapping");
      }
      ++c.i;
      c.skip_spaces();
      Node value = c.peek() == ',' || c.peek() == '}' ? Node::null(mark(c.line, c.column())) : parse_value(c, true);
      for (const Entry& e : map.entries()) {
        if (e.key == key) {
          fail(key_mark.line, key_mark.column,
               "repeated key '" + key + "' (first at column " + std::to_string(e.key_mark.column) + ")");
        }
      }
      map.add(std::move(key), std::move(value), key_mark);
      c.skip_spaces();
      if (c.peek() == ',') {
        ++c.i;
        continue;
      }
      if (c.peek() == '}') break;
      if (c.at_end() || c.at_comment()) not_closed();
      fail(c, "expected ',' or '}' in a flow mapping");
    }
    ++c.i;
    return map;
  }

  void expect_line_end(Cursor& c) const {
    c.skip_spaces();
    if (c.at_end() || c.at_comment()) return;
    // Built with append, not +: GCC 12 warned of a bound (-Warray-bounds) in the inlined operator+ chain.
    std::string message = "unexpected '";
    message += c.peek();
    message += "' after the value";
    fail(c, message);
  }

  std::shared_ptr<const std::string> source_;
  std::vector<Line> lines_;
  size_t pos_ = 0;
};

}  // namespace

Node parse(std::string_view text, std::string source) { return Parser(text, std::move(source)).parse_document(); }

Node parse_inline(std::string_view text, std::string source) {
  return Parser(std::string_view(), std::move(source)).parse_inline(text);
}

Node parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in, "cannot open config file '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

}  // namespace kiln::trainer::yaml
