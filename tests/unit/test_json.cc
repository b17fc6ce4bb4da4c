// The internal JSON library: parsing, serialisation round trips, escapes and error positions.
#include "core/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace msa {
namespace json {
namespace {

Value parse_ok(const std::string& text) {
  Value v;
  const Status s = parse(text, &v);
  EXPECT_TRUE(s.ok()) << text << ": " << s.to_string();
  return v;
}

std::string parse_error(const std::string& text) {
  Value v = Value("unchanged");
  const Status s = parse(text, &v);
  EXPECT_EQ(s.code(), StatusCode::kParseError) << text;
  EXPECT_EQ(v.as_string(), "unchanged") << "output must be left unchanged on error";
  return s.message();
}

TEST(Json, ParsesScalarsAndContainers) {
  const Value v =
      parse_ok(" {\"a\": 1, \"b\": [true, false, null, -2.5e3, \"x\"], \"c\": {}, \"d\": []} ");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v.members()[0].first, "a");
  EXPECT_EQ(v.members()[3].first, "d");
  ASSERT_NE(v.find("a"), nullptr);
  EXPECT_TRUE(v.find("a")->is_integer());
  EXPECT_EQ(v.find("a")->as_int(), 1);
  const Value& b = *v.find("b");
  ASSERT_EQ(b.size(), 5u);
  EXPECT_TRUE(b[0].as_bool());
  EXPECT_TRUE(b[1].is_bool());
  EXPECT_FALSE(b[1].as_bool());
  EXPECT_TRUE(b[2].is_null());
  EXPECT_EQ(b[3].as_number(), -2500.0);
  EXPECT_TRUE(b[3].is_integer());  // an integral double counts as an integer
  EXPECT_EQ(b[4].as_string(), "x");
  EXPECT_TRUE(v.find("c")->is_object());
  EXPECT_TRUE(v.find("d")->is_array());
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, NumbersKeepIntegersExact) {
  const Value big = parse_ok("9007199254740993");  // 2^53 + 1: not a double
  EXPECT_TRUE(big.is_integer());
  EXPECT_EQ(big.as_int(), 9007199254740993LL);
  EXPECT_EQ(dump(big), "9007199254740993");
  EXPECT_EQ(parse_ok("-9223372036854775808").as_int(), std::numeric_limits<int64_t>::min());
  const Value huge = parse_ok("1e300");
  EXPECT_FALSE(huge.is_integer());
  EXPECT_EQ(huge.as_number(), 1e300);
  EXPECT_FALSE(parse_ok("0.5").is_integer());
  EXPECT_FALSE(parse_ok("99999999999999999999").is_integer());  // beyond int64
  const Value neg_zero = parse_ok("-0");
  EXPECT_TRUE(std::signbit(neg_zero.as_number()));
  EXPECT_EQ(dump(neg_zero), "-0");
  EXPECT_EQ(dump(Value(6144)), "6144");
  EXPECT_EQ(dump(Value(1e17)), "100000000000000000");
  EXPECT_EQ(dump(Value(0.1)), "0.1");
  EXPECT_EQ(dump(Value(std::numeric_limits<double>::quiet_NaN())), "null");
  EXPECT_EQ(dump(Value(std::numeric_limits<double>::infinity())), "null");
}

TEST(Json, DoublesRoundTrip) {
  for (double d : {0.1, 1.0 / 3.0, 5e6, 1e-6, -2.2250738585072014e-308, 1.7976931348623157e308,
                   4.9e-324, 123456.789, 0.08838834764831845}) {
    const Value back = parse_ok(dump(Value(d)));
    EXPECT_EQ(back.as_number(), d) << dump(Value(d));
  }
}

TEST(Json, StringEscapes) {
  const std::string raw = std::string("q\"b\\s/\b\f\n\r\t") + '\x01' + "\x1f" + "\xc3\xa9";
  const std::string text = dump(Value(raw));
  EXPECT_EQ(text, "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\xc3\xa9\"");
  EXPECT_EQ(parse_ok(text).as_string(), raw);
  // \u escapes decode to UTF-8, surrogate pairs included.
  EXPECT_EQ(parse_ok("\"\\u00e9\\u20AC\\ud83d\\ude00\\/\"").as_string(),
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80/");
}

TEST(Json, DumpRoundTripsAndKeepsOrder) {
  Value root = Value::object();
  root.set("zeta", 1);
  root.set("alpha", "two");
  Value list = Value::array();
  list.push_back(Value());
  list.push_back(true);
  list.push_back(2.5);
  Value inner = Value::object();
  inner.set("k", int64_t{-7});
  list.push_back(inner);
  root.set("list", list);
  root.set("zeta", 3);  // replaced in place, keeps its position
  const std::string compact = dump(root);
  EXPECT_EQ(compact, "{\"zeta\":3,\"alpha\":\"two\",\"list\":[null,true,2.5,{\"k\":-7}]}");
  EXPECT_EQ(dump(root, 2),
            "{\n  \"zeta\": 3,\n  \"alpha\": \"two\",\n  \"list\": [\n    null,\n    true,\n"
            "    2.5,\n    {\n      \"k\": -7\n    }\n  ]\n}");
  EXPECT_EQ(dump(parse_ok(compact)), compact);
  EXPECT_EQ(dump(parse_ok(dump(root, 4))), compact);
  EXPECT_EQ(dump(Value::array(), 2), "[]");
  EXPECT_EQ(dump(Value::object(), 2), "{}");
}

TEST(Json, DuplicateKeysLastWins) {
  const Value v = parse_ok("{\"a\": 1, \"b\": 2, \"a\": 3}");
  EXPECT_EQ(dump(v), "{\"a\":3,\"b\":2}");
}

TEST(Json, WrongTypeAccessorsAreNeutral) {
  const Value s("text");
  EXPECT_EQ(s.as_int(), 0);
  EXPECT_FALSE(s.as_bool());
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.find("x"), nullptr);
  EXPECT_EQ(Value(3).as_string(), "");
}

TEST(Json, ErrorsNameLineAndColumn) {
  EXPECT_NE(parse_error("{\n  \"a\": 1,\n  \"b\" 2\n}").find("line 3, column 7"),
            std::string::npos);
  EXPECT_NE(parse_error("[1, 2").find("line 1, column 6"), std::string::npos);
  EXPECT_NE(parse_error("").find("line 1, column 1"), std::string::npos);
  EXPECT_NE(parse_error("[1] x").find("line 1, column 5"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\":\n tru}").find("line 2, column 2"), std::string::npos);
  for (const char* bad : {"[1,]", "{\"a\":1,}", "01", "1.", "-", "1e", "\"abc", "\"\\x\"",
                          "\"\\ud800\"", "\"a\nb\"", "nul", "{1: 2}", "[1 2]", "+1"}) {
    parse_error(bad);
  }
  EXPECT_NE(parse_error(std::string(600, '[') + std::string(600, ']')).find("nesting"),
            std::string::npos);
}

}  // namespace
}  // namespace json
}  // namespace msa
