#include "core/json.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace msa {
namespace json {
namespace {

// How far nlohmann's lexer has read: it reads its input one character at a time through a
// CountingIterator, so when the parser reports an object key, `newlines` is the number of
// newlines before the key's closing quote (the key's line, less one).
struct ReadPosition {
  int newlines = 0;
  size_t read = 0;  // characters
};

class CountingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* p, ReadPosition* pos) : p_(p), pos_(pos) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    if (*p_ == '\n') ++pos_->newlines;
    ++pos_->read;
    ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  ReadPosition* pos_;
};

// The JSON pointer of every object key, kept from the parser's events: a frame per open
// container with its own pointer, its last key (objects) or the index of the next element
// (arrays).
class KeyTracker {
 public:
  KeyTracker(const ReadPosition* pos, KeyLines* lines) : pos_(pos), lines_(lines) {}

  bool operator()(int /*depth*/, nlohmann::detail::parse_event_t event, Json& parsed) {
    using Event = nlohmann::detail::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        frames_.push_back({child_pointer(), event == Event::array_start, 0, ""});
        break;
      case Event::key:
        frames_.back().key = parsed.get<std::string>();
        (*lines_)[frames_.back().pointer + "/" + escape(frames_.back().key)] = pos_->newlines + 1;
        break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        element_done();
        break;
      case Event::value:
        element_done();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    std::string pointer;
    bool is_array;
    size_t next_index;
    std::string key;
  };

  // RFC 6901: '~' and '/' in a key are written "~0" and "~1".
  static std::string escape(const std::string& key) {
    std::string out;
    for (char c : key) {
      if (c == '~') {
        out += "~0";
      } else if (c == '/') {
        out += "~1";
      } else {
        out.push_back(c);
      }
    }
    return out;
  }

  std::string child_pointer() const {
    if (frames_.empty()) return "";
    const Frame& f = frames_.back();
    return f.pointer + "/" + (f.is_array ? std::to_string(f.next_index) : escape(f.key));
  }

  void element_done() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().next_index;
  }

  const ReadPosition* pos_;
  KeyLines* lines_;
  std::vector<Frame> frames_;
};

Status error_at(const std::string& text, size_t offset, const std::string& what) {
  int line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return Status(StatusCode::kParseError, "json: line " + std::to_string(line) + ", column " +
                                             std::to_string(column) + ": " + what);
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line L,
// column C: " prefix, whose column is lost at line ends (the position is recomputed here).
std::string reason(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  const size_t bracket = what.find("] ");
  std::string rest = bracket == std::string::npos ? what : what.substr(bracket + 2);
  const size_t column = rest.find("column ");
  const size_t colon = rest.find(": ", column == std::string::npos ? 0 : column);
  if (rest.compare(0, 11, "parse error") == 0 && colon != std::string::npos) {
    rest = rest.substr(colon + 2);
  }
  return rest;
}

}  // namespace

Status parse(const std::string& text, Json* out, KeyLines* lines) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "out: null output pointer");
  ReadPosition pos;
  CountingIterator first(text.data(), &pos), last(text.data() + text.size(), &pos);
  KeyLines found;
  Json v;
  try {
    if (lines != nullptr) {
      v = Json::parse(first, last, KeyTracker(&pos, &found));
    } else {
      v = Json::parse(first, last);
    }
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the characters read, the offending one included.
    return error_at(text, e.byte > 0 ? e.byte - 1 : 0, reason(e));
  } catch (const nlohmann::json::exception& e) {
    // A number outside the double range (out_of_range.406), the only other error of parsing:
    // the lexer has read the literal and at most one character past it. Point at its start.
    auto in_number = [](char c) {
      return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
    };
    size_t start = std::min(pos.read, text.size());
    if (start > 0 && !in_number(text[start - 1])) --start;
    while (start > 0 && in_number(text[start - 1])) --start;
    return error_at(text, start, reason(e));
  }
  *out = std::move(v);
  if (lines != nullptr) *lines = std::move(found);
  return Status::Ok();
}

std::string dump(const Json& v, int indent) {
  return v.dump(indent, ' ', false, Json::error_handler_t::replace);
}

const Json* find(const Json& v, const std::string& key) {
  if (!v.is_object()) return nullptr;
  const auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float: {
      int64_t i = 0;
      return exact_int(v, &i) ? "an integer" : "a non-integer number";
    }
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::binary:
      return "binary data";
    case Json::value_t::discarded:
      return "nothing";
  }
  return "unknown";
}

bool exact_int(const Json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  // 2^63 bounds the int64 range.
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9223372036854775808.0) {
    return false;
  }
  *out = static_cast<int64_t>(d);
  return true;
}

}  // namespace json
}  // namespace msa
