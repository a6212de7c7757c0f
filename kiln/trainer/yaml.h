// A small, strict YAML reader and writer for kiln's config files.
//
// kiln reads configs, not arbitrary YAML, so it implements a documented subset and refuses everything else
// with an error that names the line and column: a reader that silently misread an anchor or a block scalar
// would train the wrong model without a word. Supported:
//   - block mappings and sequences by indentation (spaces only), `- ` items, `- key: value` items;
//   - flow sequences `[1, 2]` and flow mappings `{a: 1}`, each on one line;
//   - plain, 'single' and "double" quoted scalars (escapes \\ \" \/ \0 \a \b \t \n \v \f \r \e \xHH \uHHHH
//     \UHHHHHHHH and an escaped space), each on one line;
//   - `#` comments, one `---` before the document, `~` / `null` / an empty value as null.
// Not supported (a kiln::Error naming the line and column): anchors and aliases, tags, block scalars `|` `>`,
// multi-line plain or quoted scalars, complex keys `? `, directives, several documents.
//
// Scalars keep their text and whether they were quoted; typing is left to as_bool / as_int / as_double,
// which follow the YAML 1.2 core schema (true/True/TRUE, 0x1F, 1.5e3, .inf, .nan). A quoted scalar is always
// a string. Every node keeps the source name, line and column it came from, for error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::trainer::yaml {

// Where a node came from. `source` is the file name (or whatever the caller named the text); may be empty.
struct Mark {
  std::shared_ptr<const std::string> source;
  int line = 0;  // 1-based; 0 for nodes built in code
  int column = 0;  // 1-based
  const std::string& source_name() const;
  // "run.yaml: line 3, column 5", or "line 3, column 5" without a source name, or the source name alone
  // for nodes built in code.
  std::string str() const;
};

enum class Kind { Null, Scalar, Sequence, Mapping };

// What a plain scalar means under the YAML 1.2 core schema; a quoted scalar is always String.
enum class ScalarType { String, Bool, Int, Float };

struct Entry;

class Node {
 public:
  Node() = default;  // null
  static Node null(Mark mark = {});
  static Node scalar(std::string text, bool quoted = false, Mark mark = {});
  static Node sequence(Mark mark = {});
  static Node mapping(Mark mark = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_scalar() const { return kind_ == Kind::Scalar; }
  bool is_sequence() const { return kind_ == Kind::Sequence; }
  bool is_mapping() const { return kind_ == Kind::Mapping; }
  const Mark& mark() const { return mark_; }

  // Scalars.
  const std::string& text() const;
  bool quoted() const { return quoted_; }
  ScalarType scalar_type() const;
  bool as_bool() const;  // true/True/TRUE/false/False/FALSE, unquoted
  int64_t as_int() const;  // decimal with optional sign, 0x hex, 0o octal; overflow is an error
  double as_double() const;  // any integer, 1.5, -2e-3, .5, .inf, -.inf, .nan
  // For error messages: "'three'", "\"3\" (quoted)", "null", "a list", "a mapping".
  std::string describe() const;

  // Sequences.
  const std::vector<Node>& items() const;
  void push_back(Node item);

  // Mappings, in the order the keys were written. add() throws on a repeated key.
  const std::vector<Entry>& entries() const;
  const Node* find(std::string_view key) const;
  void add(std::string key, Node value, Mark key_mark = {});

  size_t size() const;

  // Equality of meaning, not of spelling: marks are ignored, and two scalars are equal when their text is
  // equal and both are strings or both are not (plain `abc` equals quoted "abc"; plain `3` differs from "3").
  friend bool operator==(const Node& a, const Node& b);

 private:
  [[noreturn]] void type_error(const char* expected) const;

  Kind kind_ = Kind::Null;
  Mark mark_;
  std::string text_;
  bool quoted_ = false;
  std::vector<Node> items_;
  std::vector<Entry> entries_;
};

struct Entry {
  std::string key;
  Mark key_mark;
  Node value;
};

// The YAML 1.2 core meaning of plain text ("true" -> Bool, "0x10" -> Int, ".inf" -> Float, else String).
// Null words (~, null, Null, NULL, empty) are not scalars: the parser turns them into null nodes.
ScalarType plain_scalar_type(std::string_view text);
bool is_null_word(std::string_view text);

// Parses one document; `source` names the text in errors. An empty document is null.
Node parse(std::string_view text, std::string source = "");
Node parse_file(const std::string& path);
// Parses one value written on one line: a scalar or a flow collection (what `--set key=value` carries).
Node parse_inline(std::string_view text, std::string source = "");

// Writes `node` as block YAML that parse() reads back to an equal node. Sequences whose items are all
// scalars are written in flow style (`hidden: [512, 256]`), everything else in block style. Strings that
// would read back as another type (here, or in a YAML 1.1 reader such as PyYAML: `yes`, `010`, `2024-01-31`),
// or that hold characters with a meaning in YAML, are double-quoted.
std::string emit(const Node& node);
// The same on one line, in flow style (for help texts and messages).
std::string emit_inline(const Node& node);

}  // namespace kiln::trainer::yaml
