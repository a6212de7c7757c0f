// A small JSON reader and the string escaping the writer needs: just enough for safetensors headers.
//
// Parsing is strict because the bytes come from outside: UTF-8 is checked, nesting is capped (no stack
// overflow on "[[[[..."), a key repeated in one object is an error (a header must not name a tensor twice),
// and numbers keep their text so that callers can ask for an exact unsigned integer rather than a double
// that silently rounds 2^53 + 1. Errors throw kiln::Error with the byte position.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::serialize::json {

struct Value {
  enum class Kind : uint8_t { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // String: the decoded string; Number: the literal as written
  std::vector<Value> items;  // Array
  std::vector<std::pair<std::string, Value>> members;  // Object, in file order

  // The number as an exact unsigned integer: nullopt for a fraction, exponent, sign or a value over 2^64 - 1.
  std::optional<uint64_t> as_uint() const;
  const char* kind_name() const;
};

// Parses one JSON value filling all of `text` (whitespace around it is allowed).
Value parse(std::string_view text, int max_depth = 64);

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Appends code point `cp` (at most U+10FFFF, not a surrogate) to `out` as UTF-8. Shared by the JSON and YAML
// readers' \u escapes.
void append_utf8(std::string& out, uint32_t cp);

// `s` as a JSON string literal, quotes included (UTF-8 passes through; quotes, backslashes and control
// characters are escaped).
std::string quote(std::string_view s);

}  // namespace kiln::serialize::json
