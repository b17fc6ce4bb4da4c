// The library's JSON layer over nlohmann/json: error positions, key lines, serialisation of what
// JSON cannot express, and the integer and type helpers the config reader's messages use.
#include "core/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace msa {
namespace json {
namespace {

Json parse_ok(const std::string& text, KeyLines* lines = nullptr) {
  Json v;
  const Status s = parse(text, &v, lines);
  EXPECT_TRUE(s.ok()) << text << ": " << s.to_string();
  return v;
}

std::string parse_error(const std::string& text) {
  Json v = "unchanged";
  KeyLines lines = {{"/kept", 7}};
  const Status s = parse(text, &v, &lines);
  EXPECT_EQ(s.code(), StatusCode::kParseError) << text;
  EXPECT_EQ(v, "unchanged") << "output must be left unchanged on error";
  EXPECT_EQ(lines, (KeyLines{{"/kept", 7}})) << "key lines must be left unchanged on error";
  return s.message();
}

TEST(Json, ParsesInDocumentOrder) {
  const Json v = parse_ok(" {\"z\": 1, \"b\": [true, null, -2.5e3, \"x\"], \"a\": {}} ");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.begin().key(), "z");
  EXPECT_EQ(dump(v), "{\"z\":1,\"b\":[true,null,-2500.0,\"x\"],\"a\":{}}");
  EXPECT_EQ(dump(parse_ok("{\"a\": 1, \"b\": 2, \"a\": 3}")), "{\"a\":3,\"b\":2}");
}

TEST(Json, ErrorsNameLineAndColumn) {
  // The column of the character where the text stops being JSON.
  EXPECT_NE(parse_error("{\n  \"a\": 1,\n  \"b\" 2\n}").find("json: line 3, column 7: "),
            std::string::npos);
  EXPECT_NE(parse_error("[1, 2").find("line 1, column 6"), std::string::npos);
  EXPECT_NE(parse_error("").find("line 1, column 1"), std::string::npos);
  EXPECT_NE(parse_error("[1] x").find("line 1, column 5"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\":\n tru}").find("line 2, column 5"), std::string::npos);
  // nlohmann's reason follows, without its own exception id and position.
  const std::string m = parse_error("{\"a\" 1}");
  EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
  EXPECT_NE(m.find("expected ':'"), std::string::npos) << m;
  // A number outside the double range: the position of the literal.
  EXPECT_NE(parse_error("{\n \"x\": 1e400}").find("line 2, column 7: number overflow"),
            std::string::npos);
  for (const char* bad : {"[1,]", "{\"a\":1,}", "01", "1.", "-", "1e", "\"abc", "\"\\x\"",
                          "\"\\ud800\"", "\"a\nb\"", "nul", "{1: 2}", "[1 2]", "+1"}) {
    parse_error(bad);
  }
}

TEST(Json, KeyLinesByPointer) {
  KeyLines lines;
  parse_ok(
      "{\"top\": 1,\n"
      " \"text_config\": {\n"
      "   \"head_dim\": 128, \"rotary_dim\": 64,\n"
      "   \"list\": [0, {\"inner\": [\n"
      "      {\"deep\": true}]}],\n"
      "   \"a/b~c\": null\n"
      " },\n"
      " \"after\": 2}",
      &lines);
  EXPECT_EQ(lines, (KeyLines{{"/top", 1},
                             {"/text_config", 2},
                             {"/text_config/head_dim", 3},
                             {"/text_config/rotary_dim", 3},
                             {"/text_config/list", 4},
                             {"/text_config/list/1/inner", 4},
                             {"/text_config/list/1/inner/0/deep", 5},
                             {"/text_config/a~1b~0c", 6},
                             {"/after", 8}}));
}

TEST(Json, DumpWritesNonFiniteAsNullAndRepairsUtf8) {
  Json o = Json::object();
  o["nan"] = std::numeric_limits<double>::quiet_NaN();
  o["inf"] = std::numeric_limits<double>::infinity();
  o["bad"] = std::string("a\xff") + "b";
  o["e"] = "\xc3\xa9\x01";
  EXPECT_EQ(dump(o),
            "{\"nan\":null,\"inf\":null,\"bad\":\"a\xef\xbf\xbd"
            "b\",\"e\":\"\xc3\xa9\\u0001\"}");
  EXPECT_EQ(dump(parse_ok("{\"k\": [1]}"), 1), "{\n \"k\": [\n  1\n ]\n}");
}

TEST(Json, ExactIntAndTypeNames) {
  int64_t i = 0;
  EXPECT_TRUE(exact_int(parse_ok("9007199254740993"), &i));  // 2^53 + 1: not a double
  EXPECT_EQ(i, 9007199254740993LL);
  EXPECT_TRUE(exact_int(parse_ok("-9223372036854775808"), &i));
  EXPECT_EQ(i, std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(exact_int(parse_ok("128.0"), &i));
  EXPECT_EQ(i, 128);
  EXPECT_FALSE(exact_int(parse_ok("18446744073709551615"), &i));  // beyond int64
  EXPECT_FALSE(exact_int(parse_ok("1e300"), &i));
  EXPECT_FALSE(exact_int(parse_ok("0.5"), &i));
  EXPECT_FALSE(exact_int(parse_ok("\"1\""), &i));
  EXPECT_STREQ(type_name(parse_ok("1")), "an integer");
  EXPECT_STREQ(type_name(parse_ok("1e12")), "an integer");
  EXPECT_STREQ(type_name(parse_ok("1.5")), "a non-integer number");
  EXPECT_STREQ(type_name(parse_ok("\"x\"")), "a string");
  EXPECT_STREQ(type_name(parse_ok("null")), "null");
  EXPECT_STREQ(type_name(parse_ok("[]")), "an array");
  EXPECT_STREQ(type_name(parse_ok("{}")), "an object");
  EXPECT_STREQ(type_name(parse_ok("true")), "a boolean");
}

TEST(Json, FindOnlyInObjects) {
  const Json v = parse_ok("{\"a\": {\"b\": 2}}");
  ASSERT_NE(find(v, "a"), nullptr);
  EXPECT_EQ(*find(*find(v, "a"), "b"), 2);
  EXPECT_EQ(find(v, "missing"), nullptr);
  EXPECT_EQ(find(parse_ok("[1]"), "a"), nullptr);
  EXPECT_EQ(find(parse_ok("3"), "a"), nullptr);
}

}  // namespace
}  // namespace json
}  // namespace msa
