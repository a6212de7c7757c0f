// Tests of kiln's YAML subset: every construct it reads, every construct it refuses (with the line and
// column of the error), scalar typing, and the emitter's round trip. The expected trees are written by hand
// from the YAML 1.2 spec's examples; tests/trainer/yaml_pyyaml_check.py compares the same kind of documents
// with PyYAML outside the test suite.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/tensor/error.h"
#include "kiln/trainer/yaml.h"

namespace yaml = kiln::trainer::yaml;
using yaml::Node;

namespace {

Node scalar(const char* text) { return Node::scalar(text); }
Node quoted(const char* text) { return Node::scalar(text, true); }

Node seq(std::initializer_list<Node> items) {
  Node n = Node::sequence();
  for (const Node& item : items) n.push_back(item);
  return n;
}

Node map(std::initializer_list<std::pair<std::string, Node>> entries) {
  Node n = Node::mapping();
  for (const auto& [key, value] : entries) n.add(key, value);
  return n;
}

// The message of the kiln::Error that parsing `text` throws ("" when it parses).
std::string parse_error(const std::string& text, const std::string& source = "") {
  try {
    yaml::parse(text, source);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_PARSE_ERROR(text, expected)                                    \
  do {                                                                        \
    std::string message_ = parse_error(text);                                 \
    EXPECT_NE(message_.find(expected), std::string::npos)                     \
        << "document:\n" << (text) << "\nerror: '" << message_ << "'\nexpected to contain: " << (expected); \
  } while (0)

}  // namespace

TEST(Yaml, BlockMapping) {
  Node doc = yaml::parse("a: 1\nb: hello world\nc:\n");
  EXPECT_EQ(doc, map({{"a", scalar("1")}, {"b", scalar("hello world")}, {"c", Node::null()}}));
  EXPECT_EQ(doc.entries()[1].key_mark.line, 2);
  EXPECT_EQ(doc.entries()[1].value.mark().column, 4);
}

TEST(Yaml, NestedMappingsAndComments) {
  const char* text =
      "# a comment\n"
      "---\n"
      "trainer:   # the loop\n"
      "  max_epochs: 3  # three\n"
      "\n"
      "  nested:\n"
      "      deep: x#y\n"
      "model:\n"
      "  name: cnn\n";
  Node expected = map({{"trainer", map({{"max_epochs", scalar("3")}, {"nested", map({{"deep", scalar("x#y")}})}})},
                       {"model", map({{"name", scalar("cnn")}})}});
  EXPECT_EQ(yaml::parse(text), expected);
}

TEST(Yaml, BlockSequences) {
  EXPECT_EQ(yaml::parse("- 1\n- two\n-\n- - a\n  - b\n"),
            seq({scalar("1"), scalar("two"), Node::null(), seq({scalar("a"), scalar("b")})}));
  // A sequence under a key, indented or at the key's own indent.
  EXPECT_EQ(yaml::parse("a:\n  - 1\n  - 2\nb:\n- 3\nc: 4\n"),
            map({{"a", seq({scalar("1"), scalar("2")})}, {"b", seq({scalar("3")})}, {"c", scalar("4")}}));
  // An item holding a block on the following lines.
  EXPECT_EQ(yaml::parse("-\n  a: 1\n"), seq({map({{"a", scalar("1")}})}));
}

TEST(Yaml, MappingsInsideSequences) {
  const char* text =
      "callbacks:\n"
      "  - name: checkpoint\n"
      "    monitor: val/acc\n"
      "  -   name: lr_monitor\n"
      "      every: [1, 2]\n";
  Node expected = map({{"callbacks", seq({map({{"name", scalar("checkpoint")}, {"monitor", scalar("val/acc")}}),
                                         map({{"name", scalar("lr_monitor")}, {"every", seq({scalar("1"), scalar("2")})}})})}});
  EXPECT_EQ(yaml::parse(text), expected);
}

TEST(Yaml, FlowCollections) {
  EXPECT_EQ(yaml::parse("x: [1, 2, 3]"), map({{"x", seq({scalar("1"), scalar("2"), scalar("3")})}}));
  EXPECT_EQ(yaml::parse("x: []"), map({{"x", Node::sequence()}}));
  EXPECT_EQ(yaml::parse("x: [a b, 'c, d', [e], {f: g},]"),
            map({{"x", seq({scalar("a b"), quoted("c, d"), seq({scalar("e")}), map({{"f", scalar("g")}})})}}));
  EXPECT_EQ(yaml::parse("x: {a: 1, b: [2], c: , \"d e\": ~}  # c"),
            map({{"x", map({{"a", scalar("1")}, {"b", seq({scalar("2")})}, {"c", Node::null()}, {"d e", Node::null()}})}}));
  EXPECT_EQ(yaml::parse("x: {}"), map({{"x", Node::mapping()}}));
  EXPECT_EQ(yaml::parse("{a: http://x.org/a, b: 1}"), map({{"a", scalar("http://x.org/a")}, {"b", scalar("1")}}));
}

TEST(Yaml, QuotedScalars) {
  Node doc = yaml::parse(
      "a: 'it''s # not a comment'\n"
      "b: \"tab\\there \\\"q\\\" \\\\ \\x41\\u00e9\\U0001F600 \\/\"\n"
      "\"quoted key\": \"3\"\n"
      "'k2': ''\n");
  EXPECT_EQ(doc.find("a")->text(), "it's # not a comment");
  EXPECT_TRUE(doc.find("a")->quoted());
  EXPECT_EQ(doc.find("b")->text(), "tab\there \"q\" \\ A\xC3\xA9\xF0\x9F\x98\x80 /");
  EXPECT_EQ(doc.find("quoted key")->text(), "3");
  EXPECT_EQ(doc.find("quoted key")->scalar_type(), yaml::ScalarType::String);
  EXPECT_TRUE(doc.find("k2")->is_scalar());
  EXPECT_EQ(doc.find("k2")->text(), "");
}

TEST(Yaml, Nulls) {
  Node doc = yaml::parse("a: ~\nb: null\nc: Null\nd: NULL\ne:\nf: 'null'\n");
  for (const char* key : {"a", "b", "c", "d", "e"}) EXPECT_TRUE(doc.find(key)->is_null()) << key;
  EXPECT_TRUE(doc.find("f")->is_scalar());
  EXPECT_TRUE(yaml::parse("").is_null());
  EXPECT_TRUE(yaml::parse("# only a comment\n\n").is_null());
  EXPECT_TRUE(yaml::parse("---\n").is_null());
}

TEST(Yaml, TopLevelScalarsIndentAndLineEndings) {
  EXPECT_EQ(yaml::parse("hello"), scalar("hello"));
  EXPECT_EQ(yaml::parse("  a: 1\r\n  b: 2\r\n"), map({{"a", scalar("1")}, {"b", scalar("2")}}));
  // Tabs are white space after the indentation (only the indentation must be spaces).
  EXPECT_EQ(yaml::parse("a:\t1\t# c\nb: x\ty \t\n"), map({{"a", scalar("1")}, {"b", scalar("x\ty")}}));
}

TEST(Yaml, ScalarTyping) {
  using T = yaml::ScalarType;
  for (const char* t : {"true", "True", "TRUE", "false", "False", "FALSE"}) EXPECT_EQ(yaml::plain_scalar_type(t), T::Bool) << t;
  for (const char* t : {"0", "-12", "+7", "0x1F", "0o17"}) EXPECT_EQ(yaml::plain_scalar_type(t), T::Int) << t;
  for (const char* t : {"1.5", "-2e-3", ".5", "1.", "3e5", ".inf", "-.Inf", ".NaN"}) EXPECT_EQ(yaml::plain_scalar_type(t), T::Float) << t;
  for (const char* t : {"yes", "no", "on", "1e", "0x", "1_000", "inf", "nan", "12abc", "-", "."}) EXPECT_EQ(yaml::plain_scalar_type(t), T::String) << t;

  EXPECT_TRUE(scalar("True").as_bool());
  EXPECT_FALSE(scalar("false").as_bool());
  EXPECT_EQ(scalar("-42").as_int(), -42);
  EXPECT_EQ(scalar("0x1f").as_int(), 31);
  EXPECT_EQ(scalar("0o17").as_int(), 15);
  EXPECT_EQ(scalar("9223372036854775807").as_int(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(scalar("-9223372036854775808").as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_DOUBLE_EQ(scalar("1.5e3").as_double(), 1500.0);
  EXPECT_DOUBLE_EQ(scalar("-.5").as_double(), -0.5);
  EXPECT_DOUBLE_EQ(scalar(".5e3").as_double(), 500.0);  // four characters starting with '.', yet not .inf
  EXPECT_DOUBLE_EQ(scalar("-.5e3").as_double(), -500.0);
  EXPECT_DOUBLE_EQ(scalar(".5e1").as_double(), 5.0);
  EXPECT_DOUBLE_EQ(scalar("7").as_double(), 7.0);
  EXPECT_EQ(scalar("-.inf").as_double(), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(scalar(".nan").as_double()));
}

TEST(Yaml, ScalarTypingErrorsNamePosition) {
  Node doc = yaml::parse("a: three\nb: '3'\nc: 9223372036854775808\nd: 1e999\ne: [1]\n", "run.yaml");
  auto error = [](auto f) {
    try {
      f();
    } catch (const kiln::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error([&] { doc.find("a")->as_int(); }), "run.yaml: line 1, column 4: expected an integer, found 'three'");
  EXPECT_EQ(error([&] { doc.find("b")->as_int(); }), "run.yaml: line 2, column 4: expected an integer, found \"3\" (quoted)");
  EXPECT_NE(error([&] { doc.find("c")->as_int(); }).find("run.yaml: line 3, column 4: integer 9223372036854775808 is out of range"), std::string::npos);
  EXPECT_NE(error([&] { doc.find("d")->as_double(); }).find("run.yaml: line 4, column 4: number 1e999 is out of range"), std::string::npos);
  EXPECT_EQ(error([&] { doc.find("a")->as_bool(); }), "run.yaml: line 1, column 4: expected true or false, found 'three'");
  EXPECT_EQ(error([&] { doc.find("a")->as_double(); }), "run.yaml: line 1, column 4: expected a number, found 'three'");
  EXPECT_EQ(error([&] { doc.find("e")->as_int(); }), "run.yaml: line 5, column 4: expected an integer, found a list");
}

TEST(Yaml, UnsupportedConstructsAreRefused) {
  EXPECT_EQ(parse_error("a: &x 1\nb: 2\n"), "line 1, column 4: YAML anchors ('&') are not supported by kiln's config reader");
  EXPECT_EQ(parse_error("a: 1\nb: *x\n"), "line 2, column 4: YAML aliases ('*') are not supported by kiln's config reader");
  EXPECT_PARSE_ERROR("a: !!int 1\n", "line 1, column 4: YAML tags ('!') are not supported");
  EXPECT_PARSE_ERROR("a: |\n  text\n", "line 1, column 4: YAML block scalars ('|', '>') are not supported");
  EXPECT_PARSE_ERROR("a: >-\n  text\n", "line 1, column 4: YAML block scalars");
  EXPECT_PARSE_ERROR("? a\n: b\n", "line 1, column 1: YAML complex keys");
  EXPECT_PARSE_ERROR("a: 1\n---\nb: 2\n", "line 2, column 1: a second document");
  EXPECT_PARSE_ERROR("a: 1\n...\n", "line 2, column 1: document end markers");
  EXPECT_PARSE_ERROR("%YAML 1.2\n---\na: 1\n", "line 1, column 1: YAML directives");
  EXPECT_PARSE_ERROR("- &a x\n", "line 1, column 3: YAML anchors");
  EXPECT_PARSE_ERROR("x: [1, *a]\n", "line 1, column 8: YAML aliases");
}

TEST(Yaml, SyntaxErrorsNamePosition) {
  EXPECT_EQ(parse_error("a: 1\n\tb: 2\n", "run.yaml"), "run.yaml: line 2, column 1: tab in indentation; YAML indents with spaces only");
  EXPECT_PARSE_ERROR("a:\n  \tb: 2\n", "line 2, column 3: tab in indentation");
  EXPECT_EQ(parse_error("a: 1\nb: 2\na: 3\n"), "line 3, column 1: repeated key 'a' (first at line 1)");
  EXPECT_PARSE_ERROR("x: {a: 1, a: 2}\n", "line 1, column 11: repeated key 'a'");
  EXPECT_PARSE_ERROR("a: [1, 2\n", "line 1, column 4: '[' not closed on this line");
  EXPECT_PARSE_ERROR("a: {b: 1\n", "line 1, column 4: '{' not closed on this line");
  EXPECT_PARSE_ERROR("a: [1 2] x\n", "line 1, column 10: unexpected 'x' after the value");
  EXPECT_PARSE_ERROR("a: [1, 2}\n", "line 1, column 9: expected ',' or ']'");
  EXPECT_PARSE_ERROR("a: {b 1}\n", "line 1, column 8: expected ':' after the key 'b 1'");
  EXPECT_PARSE_ERROR("a: \"open\n", "line 1, column 4: double-quoted string not closed on this line");
  EXPECT_PARSE_ERROR("a: 'open\n", "line 1, column 4: single-quoted string not closed");
  EXPECT_PARSE_ERROR("a: \"\\q\"\n", "line 1, column 5: unknown escape '\\q'");
  EXPECT_PARSE_ERROR("a: \"\\x4\"\n", "line 1, column 5: expected 2 hex digits");
  EXPECT_PARSE_ERROR("a: b: c\n", "line 1, column 5: ': ' inside a plain value");
  EXPECT_PARSE_ERROR("a: 1\n  b: 2\n", "line 2, column 3: unexpected indentation");
  EXPECT_PARSE_ERROR("a: multi\n  line\n", "line 2, column 3: unexpected indentation");
  EXPECT_PARSE_ERROR("a:\n    b: 1\n  c: 2\n", "line 3, column 3: unexpected indentation");
  EXPECT_PARSE_ERROR("a: 1\n- 2\n", "line 2, column 1: expected 'key: value' at this indentation, found a list item");
  EXPECT_PARSE_ERROR("- 1\na: 2\n", "line 2, column 1: unexpected content after the document");
  EXPECT_PARSE_ERROR("  a: 1\nb: 2\n", "line 2, column 1: this line is indented less than the document's first line");
  EXPECT_PARSE_ERROR("a: - 1\n", "line 1, column 4: a list item ('- ') cannot start here");
  EXPECT_PARSE_ERROR("a: ]\n", "line 1, column 4: unexpected ']'");
  EXPECT_PARSE_ERROR("a: @x\n", "line 1, column 4: '@' cannot start a plain value");
  EXPECT_PARSE_ERROR(": 1\n", "line 1, column 1: empty key");
  EXPECT_PARSE_ERROR("a: 1\nplain\n", "line 2, column 1: expected 'key: value' at this indentation");
  EXPECT_PARSE_ERROR("--- x\n", "line 1, column 5: content after '---'");
}

TEST(Yaml, ParseFile) {
  std::string path = ::testing::TempDir() + "kiln_yaml_test.yaml";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("a: 1\nb: [2\n", f);
  std::fclose(f);
  try {
    yaml::parse_file(path);
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": line 2, column 4: '[' not closed on this line (kiln's config reader needs a flow list on one line)");
  }
  std::remove(path.c_str());
  EXPECT_THROW(yaml::parse_file(path), kiln::Error);
}

TEST(Yaml, ParseInline) {
  EXPECT_EQ(yaml::parse_inline("[256, 128]"), seq({scalar("256"), scalar("128")}));
  EXPECT_EQ(yaml::parse_inline(" 5 "), scalar("5"));
  EXPECT_EQ(yaml::parse_inline("00:01:00:00"), scalar("00:01:00:00"));
  EXPECT_TRUE(yaml::parse_inline("").is_null());
  EXPECT_TRUE(yaml::parse_inline("null").is_null());
  EXPECT_EQ(yaml::parse_inline("'a: b'"), quoted("a: b"));
  try {
    yaml::parse_inline("[1,", "--set model.hidden");
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), "--set model.hidden: line 1, column 1: '[' not closed on this line (kiln's config reader needs a flow list on one line)");
  }
}

TEST(Yaml, EmitterWritesReadableBlockYaml) {
  Node doc = map({{"trainer", map({{"max_epochs", scalar("3")}, {"seed", Node::null()}})},
                  {"model", map({{"hidden", seq({scalar("512"), scalar("256")})}, {"name", quoted("cnn")}})},
                  {"empty", Node::sequence()},
                  {"items", seq({map({{"a", scalar("1")}, {"b", scalar("2")}}), seq({map({{"c", scalar("3")}})})})}});
  EXPECT_EQ(yaml::emit(doc),
            "trainer:\n"
            "  max_epochs: 3\n"
            "  seed: null\n"
            "model:\n"
            "  hidden: [512, 256]\n"
            "  name: cnn\n"
            "empty: []\n"
            "items:\n"
            "  - a: 1\n"
            "    b: 2\n"
            "  - - c: 3\n");
  EXPECT_EQ(yaml::parse(yaml::emit(doc)), doc);
}

TEST(Yaml, EmitterQuotesWhatWouldReadBackDifferently) {
  // Strings that look like other types, hold YAML syntax, or are YAML 1.1 booleans.
  std::vector<std::string> strings = {"3", "-1.5", "true", "null", "~", "", "yes", "Off", " lead", "trail ", "a: b",
                                      "x #y", "#c", "- x", "[a]", "{a}", "&a", "*a", "!t", "|", ">", "'q'", "\"q\"",
                                      "%p", "@a", "`b", "line\nbreak", "tab\there", "back\\slash", "end:", "a, b",
                                      "0x10", ".inf", "---", "\x01", "caf\xC3\xA9", "010", "1_000", "2024-01-31", "1:30", "<<"};
  for (const std::string& s : strings) {
    Node doc = map({{"k", Node::scalar(s, true)}, {s.empty() ? std::string("e") : s, seq({Node::scalar(s, true)})}});
    std::string text = yaml::emit(doc);
    Node back;
    ASSERT_NO_THROW(back = yaml::parse(text)) << text;
    EXPECT_EQ(back, doc) << text;
    EXPECT_EQ(back.find("k")->text(), s) << text;
  }
  // Plain numbers and booleans stay plain.
  EXPECT_EQ(yaml::emit(map({{"a", scalar("-1.5e3")}, {"b", scalar("true")}, {"c", quoted("plain words")}})),
            "a: -1.5e3\nb: true\nc: plain words\n");
  EXPECT_EQ(yaml::emit(map({{"a", quoted("3")}})), "a: \"3\"\n");
  EXPECT_EQ(yaml::emit_inline(seq({quoted("a, b"), scalar("1"), Node::null()})), "[\"a, b\", 1, null]");
}

TEST(Yaml, EmitterRoundTripsParsedDocuments) {
  const char* docs[] = {
      "a: 1\nb:\n  c: [1, 'two', \"3\"]\n  d: {e: f}\n",
      "- a\n- - b\n  - c\n- d: 1\n  e: ~\n-\n",
      "k: 'it''s'\nq: \"\\t\"\n",
      "[]",
      "{}",
      "just text",
      "",
  };
  for (const char* text : docs) {
    Node doc = yaml::parse(text);
    std::string emitted = yaml::emit(doc);
    EXPECT_EQ(yaml::parse(emitted), doc) << text << "\n--- emitted ---\n" << emitted;
    EXPECT_EQ(yaml::emit(yaml::parse(emitted)), emitted);
  }
}

TEST(Yaml, EqualityIsOfMeaning) {
  EXPECT_EQ(scalar("abc"), quoted("abc"));
  EXPECT_FALSE(scalar("3") == quoted("3"));
  EXPECT_FALSE(scalar("3") == Node::null());
  EXPECT_FALSE(map({{"a", scalar("1")}, {"b", scalar("2")}}) == map({{"b", scalar("2")}, {"a", scalar("1")}}));
  Node m = Node::mapping();
  m.add("a", scalar("1"));
  EXPECT_THROW(m.add("a", scalar("2")), kiln::Error);
  EXPECT_THROW(scalar("x").items(), kiln::Error);
}
