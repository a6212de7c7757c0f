// The JSON reader: a recursive-descent parser over RFC 8259, with a depth cap and duplicate-key check.
#include "kiln/serialize/json.h"

#include <unordered_set>

#include "kiln/tensor/error.h"

namespace kiln::serialize::json {

std::optional<uint64_t> Value::as_uint() const {
  if (kind != Kind::Number || text.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;  // '-', '.', 'e': not an unsigned integer
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

const char* Value::kind_name() const {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Bool: return "a boolean";
    case Kind::Number: return "a number";
    case Kind::String: return "a string";
    case Kind::Array: return "an array";
    default: return "an object";
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return false;
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : s_(text), max_depth_(max_depth) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected '", printable(s_[pos_]), "' after the end of the value");
    return v;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    ::kiln::detail::throw_error(::kiln::detail::concat("at byte ", pos_, ": ", std::forward<Args>(args)...));
  }
  static std::string printable(char c) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    return ::kiln::detail::concat("\\x", "0123456789abcdef"[u >> 4], "0123456789abcdef"[u & 15]);
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool at_end() const { return pos_ >= s_.size(); }
  void expect(char c) {
    if (at_end()) fail("expected '", c, "', found the end of the header");
    if (s_[pos_] != c) fail("expected '", c, "', found '", printable(s_[pos_]), "'");
    ++pos_;
  }

  Value parse_value(int depth) {
    if (at_end()) fail("expected a value, found the end of the header");
    char c = s_[pos_];
    if (c == '{' || c == '[') {
      if (depth >= max_depth_) fail("nesting deeper than ", max_depth_, " levels");
      return c == '{' ? parse_object(depth + 1) : parse_array(depth + 1);
    }
    if (c == '"') {
      Value v;
      v.kind = Value::Kind::String;
      v.text = parse_string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    Value v;
    if (s_.substr(pos_, 4) == "true") {
      v.kind = Value::Kind::Bool, v.boolean = true, pos_ += 4;
    } else if (s_.substr(pos_, 5) == "false") {
      v.kind = Value::Kind::Bool, pos_ += 5;
    } else if (s_.substr(pos_, 4) == "null") {
      pos_ += 4;
    } else {
      fail("unexpected '", printable(c), "'");
    }
    return v;
  }

  Value parse_object(int depth) {
    Value v;
    v.kind = Value::Kind::Object;
    expect('{');
    skip_ws();
    if (!at_end() && s_[pos_] == '}') {
      ++pos_;
      return v;
    }
    std::unordered_set<std::string> seen;
    while (true) {
      skip_ws();
      if (at_end() || s_[pos_] != '"') fail("expected a string key");
      size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        fail("duplicate key ", quote(key));
      }
      skip_ws();
      expect(':');
      skip_ws();
      Value member = parse_value(depth);
      v.members.emplace_back(std::move(key), std::move(member));
      skip_ws();
      if (!at_end() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  Value parse_array(int depth) {
    Value v;
    v.kind = Value::Kind::Array;
    expect('[');
    skip_ws();
    if (!at_end() && s_[pos_] == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_ws();
      v.items.push_back(parse_value(depth));
      skip_ws();
      if (!at_end() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  Value parse_number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == d) fail("malformed number");
    };
    if (s_[pos_] == '-') ++pos_;
    if (!at_end() && s_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (!at_end() && s_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (!at_end() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (!at_end() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    Value v;
    v.kind = Value::Kind::Number;
    v.text = std::string(s_.substr(start, pos_ - start));
    return v;
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;  // the whole text was checked to be UTF-8 before parsing
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") fail("high surrogate without a low one in \\u escape");
            pos_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate without a low one in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("unknown escape '\\", printable(e), "'");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  int max_depth_;
};

}  // namespace

Value parse(std::string_view text, int max_depth) {
  if (!is_valid_utf8(text)) ::kiln::detail::throw_error("not valid UTF-8");
  return Parser(text, max_depth).parse_document();
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace kiln::serialize::json
