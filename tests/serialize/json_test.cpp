// The header JSON reader on its own: what it accepts and decodes, against hand-worked expectations.
#include <gtest/gtest.h>
#include <kiln/serialize/json.h>
#include <kiln/tensor/error.h>

namespace kiln::test {
namespace {

namespace json = serialize::json;

TEST(SerializeJson, DecodesStringsAndEscapes) {
  json::Value v = json::parse(R"( {"a\"b": "\\ \/ \b\f\n\r\t \u00e9 \u20ac \ud83d\ude00 caf\u00C9"} )");
  ASSERT_EQ(v.kind, json::Value::Kind::Object);
  ASSERT_EQ(v.members.size(), 1u);
  EXPECT_EQ(v.members[0].first, "a\"b");
  EXPECT_EQ(v.members[0].second.text, "\\ / \b\f\n\r\t \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 caf\xc3\x89");
  // Raw UTF-8 passes through; quote() writes what parse() reads back.
  std::string s = "tab\t nl\n nul-ish\x01 quote\" back\\ \xe2\x82\xac";
  EXPECT_EQ(json::quote(s), "\"tab\\t nl\\n nul-ish\\u0001 quote\\\" back\\\\ \xe2\x82\xac\"");
  EXPECT_EQ(json::parse(json::quote(s)).text, s);
}

TEST(SerializeJson, NumbersAreExactUnsignedIntegersOrNothing) {
  auto num = [](const char* t) { return json::parse(t).as_uint(); };
  EXPECT_EQ(num("0"), 0u);
  EXPECT_EQ(num("9007199254740993"), 9007199254740993u);  // 2^53 + 1: a double would round it
  EXPECT_EQ(num("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(num("18446744073709551616").has_value());
  EXPECT_FALSE(num("-1").has_value());
  EXPECT_FALSE(num("1.0").has_value());
  EXPECT_FALSE(num("1e3").has_value());
  EXPECT_FALSE(json::parse("\"1\"").as_uint().has_value());
  for (const char* bad : {"01", "1.", ".5", "-", "1e", "+1", "0x10", "NaN", "Infinity"})
    EXPECT_THROW(json::parse(bad), Error) << bad;
}

TEST(SerializeJson, StructureAndLimits) {
  json::Value v = json::parse("[true, false, null, [], {}, [1, [2]]]");
  ASSERT_EQ(v.items.size(), 6u);
  EXPECT_TRUE(v.items[0].boolean);
  EXPECT_EQ(v.items[2].kind, json::Value::Kind::Null);
  EXPECT_EQ(v.items[5].items[1].items[0].text, "2");
  EXPECT_NO_THROW(json::parse(std::string(64, '[') + std::string(64, ']')));
  EXPECT_THROW(json::parse(std::string(65, '[') + std::string(65, ']')), Error);
  for (const char* bad : {"[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "[1 2]", "{\"a\":1}}", "'a'", "\"a"})
    EXPECT_THROW(json::parse(bad), Error) << bad;
  EXPECT_TRUE(json::is_valid_utf8("\xf4\x8f\xbf\xbf"));    // U+10FFFF
  EXPECT_FALSE(json::is_valid_utf8("\xf4\x90\x80\x80"));   // above U+10FFFF
  EXPECT_FALSE(json::is_valid_utf8("\xed\xa0\x80"));       // a surrogate
  EXPECT_FALSE(json::is_valid_utf8("\xe0\x80\xaf"));       // overlong '/'
  EXPECT_FALSE(json::is_valid_utf8("\xc3"));               // truncated
}

}  // namespace
}  // namespace kiln::test
