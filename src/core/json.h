// A small JSON library for the library's own needs: reading Hugging Face config.json files and
// writing reports and JSONL traces. Internal (not part of the public API).
//
//   json::Value report = json::Value::object();
//   report.set("layers", 60);
//   report.set("name", "minimax-m3");
//   json::Value times = json::Value::array();
//   times.push_back(1.25);
//   report.set("times_ms", std::move(times));
//   std::string line = json::dump(report);      // {"layers":60,"name":"minimax-m3",...}
//
//   json::Value cfg;
//   Status s = json::parse(text, &cfg);          // kParseError "line 3, column 7: ..."
//   if (const json::Value* v = cfg.find("hidden_size"); v && v->is_integer()) v->as_int();
//
// No exceptions: accessors of the wrong type return a neutral value (false, 0, empty) and the
// typed is_*() predicates say which accessor applies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "msa/types.h"

namespace msa {
namespace json {

enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

class Value {
 public:
  using Member = std::pair<std::string, Value>;

  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : type_(Type::kBool), bool_(b) {}
  // Any integer type: stored exactly as int64 (and as the nearest double).
  template <typename T,
            typename std::enable_if<std::is_integral<T>::value && !std::is_same<T, bool>::value,
                                    int>::type = 0>
  Value(T i) {
    set_int(static_cast<int64_t>(i));
  }
  // A double that is integral and within int64 range (and not -0) also counts as an integer.
  Value(double d);
  Value(float f) : Value(static_cast<double>(f)) {}
  Value(const char* s) : type_(Type::kString), str_(s) {}
  Value(std::string s) : type_(Type::kString), str_(std::move(s)) {}

  static Value array() { return Value(Type::kArray); }
  static Value object() { return Value(Type::kObject); }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  // A number with an exact int64 value (literal without fraction/exponent that fits int64, or an
  // integral double within range).
  bool is_integer() const { return type_ == Type::kNumber && is_int_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return type_ == Type::kBool && bool_; }
  double as_number() const { return type_ == Type::kNumber ? num_ : 0.0; }
  // The exact integer when is_integer(), else 0.
  int64_t as_int() const { return is_integer() ? int_ : 0; }
  // The string when is_string(), else an empty string.
  const std::string& as_string() const;

  // Arrays: elements in order. size() is the element count of an array, the member count of an
  // object, 0 otherwise.
  size_t size() const;
  const std::vector<Value>& items() const { return items_; }
  // Appends to an array (a null value becomes an empty array first; other types ignore it).
  void push_back(Value v);
  // Element i of an array (i < size() required).
  const Value& operator[](size_t i) const { return items_[i]; }

  // Objects: members in insertion (or document) order.
  const std::vector<Member>& members() const { return members_; }
  // The member named key, or nullptr (also for non-objects).
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  // Replaces an existing member in place (keeping its position) or appends a new one. A null
  // value becomes an empty object first; other non-object types ignore the call.
  void set(const std::string& key, Value v);

 private:
  explicit Value(Type t) : type_(t) {}
  void set_int(int64_t i) {
    type_ = Type::kNumber;
    is_int_ = true;
    int_ = i;
    num_ = static_cast<double>(i);
  }

  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  int64_t int_ = 0;
  double num_ = 0.0;
  std::string str_;
  std::vector<Value> items_;
  std::vector<Member> members_;
};

// Parses one JSON document (RFC 8259; surrounding whitespace allowed, nesting up to 512 deep).
// Strings are UTF-8; \u escapes (surrogate pairs included) are decoded to UTF-8. Duplicate
// object keys: the last one wins, at the first one's position. On failure returns kParseError
// "json: line L, column C: <what was expected>" (1-based, columns count bytes) and leaves *out
// unchanged.
Status parse(const std::string& text, Value* out);

// Serialises a value. indent < 0: one line with no spaces (for JSONL); indent >= 0: pretty,
// members and elements on their own lines indented by `indent` spaces per level, ": " after
// keys. Integers print exactly without exponent, other numbers with %.17g (parse(dump(x))
// gives back the same double); NaN and infinities, which JSON cannot express, print as null.
// Strings escape '"', '\\' and control characters; other UTF-8 bytes are written as they are.
std::string dump(const Value& v, int indent = -1);

}  // namespace json
}  // namespace msa
