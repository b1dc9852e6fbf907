// tokenizer.json file reading (plain or gzip) and checked field access.
#include "tokenizer/json_util.h"

#include <zlib.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moeflux {

std::string read_maybe_gzip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string raw = ss.str();
  if (raw.size() < 2 || static_cast<uint8_t>(raw[0]) != 0x1F || static_cast<uint8_t>(raw[1]) != 0x8B) return raw;

  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) fail(path, ": zlib init failed");
  z.next_in = reinterpret_cast<Bytef*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string msg = z.msg ? z.msg : "truncated or corrupt data";
      inflateEnd(&z);
      fail(path, ": gzip error at input offset ", z.total_in, ": ", msg);
    }
    out.append(buf, sizeof(buf) - z.avail_out);
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      fail(path, ": gzip data truncated at offset ", z.total_in);
    }
  }
  inflateEnd(&z);
  return out;
}

const Json& json_field(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) fail(where, ": expected an object");
  auto it = obj.find(key);
  if (it == obj.end()) fail(where, ": missing field '", key, "'");
  return *it;
}

const Json* json_opt(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string json_string(const Json& v, const std::string& where) {
  if (!v.is_string()) fail(where, ": expected a string");
  return v.get<std::string>();
}

bool json_bool(const Json& obj, const char* key, bool dflt, const std::string& where) {
  const Json* v = json_opt(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) fail(where, ".", key, ": expected a boolean");
  return v->get<bool>();
}

int64_t json_int(const Json& v, const std::string& where) {
  if (!v.is_number_integer()) fail(where, ": expected an integer");
  return v.get<int64_t>();
}

std::string json_pattern(const Json& v, bool* is_regex, const std::string& where) {
  if (const Json* s = json_opt(v, "String")) {
    *is_regex = false;
    return json_string(*s, where + ".String");
  }
  if (const Json* r = json_opt(v, "Regex")) {
    *is_regex = true;
    return json_string(*r, where + ".Regex");
  }
  fail(where, ": expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace moeflux
