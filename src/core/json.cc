#include "core/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/validate.h"

namespace msa {
namespace json {

Value::Value(double d) : type_(Type::kNumber), num_(d) {
  // 2^63 bounds the int64 range; -0 stays a double so its sign survives dump().
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9223372036854775808.0 &&
      !(d == 0.0 && std::signbit(d))) {
    is_int_ = true;
    int_ = static_cast<int64_t>(d);
  }
}

const std::string& Value::as_string() const {
  static const std::string kEmpty;
  return type_ == Type::kString ? str_ : kEmpty;
}

size_t Value::size() const {
  if (type_ == Type::kArray) return items_.size();
  if (type_ == Type::kObject) return members_.size();
  return 0;
}

void Value::push_back(Value v) {
  if (type_ == Type::kNull) type_ = Type::kArray;
  if (type_ != Type::kArray) return;
  items_.push_back(std::move(v));
}

const Value* Value::find(const std::string& key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

Value* Value::find(const std::string& key) {
  return const_cast<Value*>(static_cast<const Value*>(this)->find(key));
}

void Value::set(const std::string& key, Value v) {
  if (type_ == Type::kNull) type_ = Type::kObject;
  if (type_ != Type::kObject) return;
  if (Value* existing = find(key)) {
    *existing = std::move(v);
    return;
  }
  members_.emplace_back(key, std::move(v));
}

// Recursive-descent parser over the whole text; tracks the byte position and reports errors
// with the line and column of the offending byte.
class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Status parse_document(Value* out) {
    skip_whitespace();
    Value v;
    MSA_RETURN_IF_ERROR(parse_value(&v, 0));
    skip_whitespace();
    if (pos_ != text_.size()) return error("unexpected text after the JSON value");
    *out = std::move(v);
    return Status::Ok();
  }

 private:
  static constexpr int kMaxDepth = 512;

  Status error(const std::string& what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return Status(StatusCode::kParseError, "json: line " + std::to_string(line) + ", column " +
                                               std::to_string(column) + ": " + what);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  bool consume_literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (text_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  Status parse_value(Value* out, int depth) {
    if (depth > kMaxDepth) return error("nesting deeper than 512 levels");
    if (at_end()) return error("expected a value, got the end of the text");
    char c = peek();
    switch (c) {
      case '{':
        return parse_object(out, depth);
      case '[':
        return parse_array(out, depth);
      case '"': {
        std::string s;
        MSA_RETURN_IF_ERROR(parse_string(&s));
        *out = Value(std::move(s));
        return Status::Ok();
      }
      case 't':
        if (consume_literal("true")) {
          *out = Value(true);
          return Status::Ok();
        }
        break;
      case 'f':
        if (consume_literal("false")) {
          *out = Value(false);
          return Status::Ok();
        }
        break;
      case 'n':
        if (consume_literal("null")) {
          *out = Value();
          return Status::Ok();
        }
        break;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
        break;
    }
    return error(std::string("expected a value, got '") + c + "'");
  }

  Status parse_object(Value* out, int depth) {
    ++pos_;  // '{'
    Value obj = Value::object();
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      *out = std::move(obj);
      return Status::Ok();
    }
    while (true) {
      skip_whitespace();
      if (peek() != '"') return error("expected a string key in the object");
      std::string key;
      MSA_RETURN_IF_ERROR(parse_string(&key));
      skip_whitespace();
      if (peek() != ':') return error("expected ':' after the object key");
      ++pos_;
      skip_whitespace();
      Value v;
      MSA_RETURN_IF_ERROR(parse_value(&v, depth + 1));
      obj.set(key, std::move(v));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        break;
      }
      return error("expected ',' or '}' in the object");
    }
    *out = std::move(obj);
    return Status::Ok();
  }

  Status parse_array(Value* out, int depth) {
    ++pos_;  // '['
    Value arr = Value::array();
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      *out = std::move(arr);
      return Status::Ok();
    }
    while (true) {
      skip_whitespace();
      Value v;
      MSA_RETURN_IF_ERROR(parse_value(&v, depth + 1));
      arr.push_back(std::move(v));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        break;
      }
      return error("expected ',' or ']' in the array");
    }
    *out = std::move(arr);
    return Status::Ok();
  }

  Status parse_hex4(uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return error("expected 4 hex digits after \\u");
      }
      v = v * 16 + d;
      ++pos_;
    }
    *out = v;
    return Status::Ok();
  }

  static void append_utf8(uint32_t cp, std::string* s) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status parse_string(std::string* out) {
    ++pos_;  // opening quote
    std::string s;
    while (true) {
      if (at_end()) return error("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        break;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return error("control character in a string (must be escaped)");
      }
      if (c != '\\') {
        s.push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) return error("unterminated escape in a string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          s.push_back('"');
          break;
        case '\\':
          s.push_back('\\');
          break;
        case '/':
          s.push_back('/');
          break;
        case 'b':
          s.push_back('\b');
          break;
        case 'f':
          s.push_back('\f');
          break;
        case 'n':
          s.push_back('\n');
          break;
        case 'r':
          s.push_back('\r');
          break;
        case 't':
          s.push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          MSA_RETURN_IF_ERROR(parse_hex4(&cp));
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!consume_literal("\\u")) return error("high surrogate without a low surrogate");
            uint32_t lo = 0;
            MSA_RETURN_IF_ERROR(parse_hex4(&lo));
            if (lo < 0xDC00 || lo > 0xDFFF) return error("invalid low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return error("low surrogate without a high surrogate");
          }
          append_utf8(cp, &s);
          break;
        }
        default:
          --pos_;
          return error(std::string("invalid escape '\\") + e + "'");
      }
    }
    *out = std::move(s);
    return Status::Ok();
  }

  Status parse_number(Value* out) {
    const size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      return error("expected a digit in the number");
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) return error("expected a digit after '.'");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) return error("expected a digit in the exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    const std::string token = text_.substr(start, pos_ - start);
    if (integral) {
      errno = 0;
      long long i = std::strtoll(token.c_str(), nullptr, 10);
      // "-0" is kept as a double so its sign survives; out-of-range literals fall through.
      if (errno == 0 && token != "-0") {
        *out = Value(static_cast<int64_t>(i));
        return Status::Ok();
      }
    }
    errno = 0;
    double d = std::strtod(token.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(d)) {
      pos_ = start;
      return error("number " + token + " is outside the double range");
    }
    *out = Value(d);
    return Status::Ok();
  }

  const std::string& text_;
  size_t pos_ = 0;
};

Status parse(const std::string& text, Value* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "out: null output pointer");
  Parser p(text);
  return p.parse_document(out);
}

namespace {

void dump_string(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void dump_number(const Value& v, std::string* out) {
  char buf[32];
  if (v.is_integer()) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v.as_int()));
  } else if (!std::isfinite(v.as_number())) {
    std::snprintf(buf, sizeof(buf), "null");
  } else {
    // The shortest of %.15g..%.17g that reads back as the same double; %.17g always does.
    for (int precision = 15; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof(buf), "%.*g", precision, v.as_number());
      if (std::strtod(buf, nullptr) == v.as_number()) break;
    }
  }
  *out += buf;
}

void newline_indent(int indent, int depth, std::string* out) {
  if (indent < 0) return;
  out->push_back('\n');
  out->append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
}

void dump_value(const Value& v, int indent, int depth, std::string* out) {
  switch (v.type()) {
    case Type::kNull:
      *out += "null";
      return;
    case Type::kBool:
      *out += v.as_bool() ? "true" : "false";
      return;
    case Type::kNumber:
      dump_number(v, out);
      return;
    case Type::kString:
      dump_string(v.as_string(), out);
      return;
    case Type::kArray: {
      out->push_back('[');
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out->push_back(',');
        first = false;
        newline_indent(indent, depth + 1, out);
        dump_value(item, indent, depth + 1, out);
      }
      if (!v.items().empty()) newline_indent(indent, depth, out);
      out->push_back(']');
      return;
    }
    case Type::kObject: {
      out->push_back('{');
      bool first = true;
      for (const Value::Member& m : v.members()) {
        if (!first) out->push_back(',');
        first = false;
        newline_indent(indent, depth + 1, out);
        dump_string(m.first, out);
        *out += indent < 0 ? ":" : ": ";
        dump_value(m.second, indent, depth + 1, out);
      }
      if (!v.members().empty()) newline_indent(indent, depth, out);
      out->push_back('}');
      return;
    }
  }
}

}  // namespace

std::string dump(const Value& v, int indent) {
  std::string out;
  dump_value(v, indent, 0, &out);
  return out;
}

}  // namespace json
}  // namespace msa
