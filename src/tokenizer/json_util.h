// Checked access to tokenizer.json fields: every lookup names the field path in its error, so
// a malformed file gives a moeflux::Error instead of an nlohmann exception or a crash.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace moeflux {

using Json = nlohmann::json;

// Reads a tokenizer.json, gunzipping it when it starts with the gzip magic.
std::string read_maybe_gzip(const std::string& path);

// obj[key]; fails if obj is not an object or key is missing.
const Json& json_field(const Json& obj, const char* key, const std::string& where);
// obj[key] or nullptr when absent or null.
const Json* json_opt(const Json& obj, const char* key);
std::string json_string(const Json& v, const std::string& where);
bool json_bool(const Json& obj, const char* key, bool dflt, const std::string& where);
int64_t json_int(const Json& v, const std::string& where);
// A Replace/Split "pattern": {"String": s} or {"Regex": r}; sets *is_regex.
std::string json_pattern(const Json& v, bool* is_regex, const std::string& where);

}  // namespace moeflux
