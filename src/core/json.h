// JSON for the library and the engine (Hugging Face configs, traces, reports): nlohmann/json
// with objects in insertion (or document) order, so that a report reads in the order it is
// written, and parse errors returned as a Status naming the line and column. Internal (not part
// of the public API).
//
//   json::Json cfg;
//   json::KeyLines lines;
//   Status s = json::parse(text, &cfg, &lines);   // kParseError "json: line 3, column 7: ..."
//   lines["/text_config/head_dim"];                // the line that key is on
//   std::string out = json::dump(cfg, 1);
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "msa/types.h"

namespace msa {
namespace json {

using Json = nlohmann::ordered_json;

// The line (1-based) of every object key of a parsed document, by its JSON pointer
// ("/text_config/head_dim"; array elements by index, "/a/0/b").
using KeyLines = std::map<std::string, int>;

// Parses one JSON document (RFC 8259). On failure returns kParseError "json: line L, column C:
// <what was expected>" (1-based; columns count bytes) and leaves *out and *lines unchanged.
// Duplicate keys: the last one wins.
Status parse(const std::string& text, Json* out, KeyLines* lines = nullptr);

// Serialises a value: indent < 0 on one line (JSONL), else pretty with `indent` spaces per level.
// NaN and infinities, which JSON cannot express, are written as null; invalid UTF-8 in strings
// (a path or a command line from the user) as U+FFFD instead of failing.
std::string dump(const Json& v, int indent = -1);

// The member named key of an object, or nullptr (also when v is no object).
const Json* find(const Json& v, const std::string& key);

// "an integer", "a non-integer number", "a string", ... for messages about a value's type.
const char* type_name(const Json& v);

// Whether v is a number with an exact int64 value: an integer literal within range, or an
// integral double within range (configs written by other tools may say 128.0). Sets *out then.
bool exact_int(const Json& v, int64_t* out);

}  // namespace json
}  // namespace msa
