// Runtime values of the template interpreter (see value.h).
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "template/text.h"

namespace moeflux::tpl {

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(List x) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>(std::move(x));
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>();
  return v;
}

namespace {
thread_local uint64_t g_work_left = UINT64_MAX;
}  // namespace

void charge_work(uint64_t units) {
  if (units > g_work_left) {
    g_work_left = 0;
    fail("template evaluation exceeded its work limit (steps)");
  }
  g_work_left -= units;
}

WorkBudget::WorkBudget(uint64_t units) : saved_(g_work_left) { g_work_left = units; }
WorkBudget::~WorkBudget() { g_work_left = saved_; }

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

const Value* CallArgs::get(size_t idx, const char* name) const {
  if (idx < pos.size()) return &pos[idx];
  for (const auto& kv : kw)
    if (name && kv.first == name) return &kv.second;
  return nullptr;
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Dict: return v.dict->is_namespace ? "Namespace" : "dict";
    case Value::Kind::Callable: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i != 0;
    case Value::Kind::Float: return v.f != 0;
    case Value::Kind::String: return !v.s.empty();
    case Value::Kind::List: return !v.list->empty();
    case Value::Kind::Dict: return v.dict->is_namespace || !v.dict->items.empty();
    case Value::Kind::Callable: return true;
  }
  return false;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed when -4 <= exponent < 16.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  bool neg = sci[0] == '-';
  size_t epos = sci.find('e');
  std::string mant = sci.substr(neg ? 1 : 0, epos - (neg ? 1 : 0));
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp10 >= -5 + 1 && exp10 < 16) {
    if (exp10 < 0) {
      out += "0." + std::string(size_t(-exp10 - 1), '0') + digits;
    } else if (size_t(exp10) + 1 >= digits.size()) {
      out += digits + std::string(size_t(exp10) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exp10) + 1) + "." + digits.substr(size_t(exp10) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + e;
}

namespace {

constexpr int kMaxNesting = 200;

void check_depth(int depth) {
  if (depth > kMaxNesting) fail("value nested deeper than ", kMaxNesting, " levels");
}

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : decode_utf8(s)) {
    char esc[16];
    if (c == char32_t(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(char(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == 0xad) {
      std::snprintf(esc, sizeof(esc), "\\x%02x", unsigned(c));
      out += esc;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      std::snprintf(esc, sizeof(esc), "\\udc%02x", unsigned(c & 0xff));
      out += esc;
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(q);
  return out;
}

void repr_into(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  charge_bytes(v.is_string() ? v.s.size() : 0);
  switch (v.kind) {
    case Value::Kind::String: out += repr_string(v.s); return;
    case Value::Kind::List:
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        repr_into(out, (*v.list)[k], depth + 1);
      }
      out += ']';
      return;
    case Value::Kind::Dict:
      if (v.dict->is_namespace) out += "<Namespace ";
      out += '{';
      for (size_t k = 0; k < v.dict->items.size(); ++k) {
        if (k) out += ", ";
        out += repr_string(v.dict->items[k].first) + ": ";
        repr_into(out, v.dict->items[k].second, depth + 1);
      }
      out += '}';
      if (v.dict->is_namespace) out += '>';
      return;
    default: out += to_str(v);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return py_float_repr(v.f);
    case Value::Kind::String: return v.s;
    case Value::Kind::Callable: return v.fn->is_macro ? "<Macro '" + v.fn->name + "'>" : "<function " + v.fn->name + ">";
    default: {
      std::string out;
      repr_into(out, v, 0);
      return out;
    }
  }
}

std::string py_repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

namespace {
bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  charge_work(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
      return (a.kind == Value::Kind::Bool ? a.b : a.i) == (b.kind == Value::Kind::Bool ? b.b : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.s == b.s;
    case Value::Kind::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals_at((*a.list)[k], (*b.list)[k], depth + 1)) return false;
      return true;
    case Value::Kind::Dict:
      if (a.dict == b.dict) return true;
      if (a.dict->is_namespace || b.dict->is_namespace) return false;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* o = b.dict->find(kv.first);
        if (!o || !equals_at(kv.second, *o, depth + 1)) return false;
      }
      return true;
    case Value::Kind::Callable: return a.fn == b.fn;
    default: return false;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  charge_work(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
      return (a.kind == Value::Kind::Bool ? a.b : a.i) < (b.kind == Value::Kind::Bool ? b.b : b.i);
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list()) {
    const List &x = *a.list, &y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!equals_at(x[k], y[k], depth + 1)) return less_at(x[k], y[k], depth + 1);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) fail("'", a.is_undefined() ? a.s : b.s, "' is undefined");
  fail("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'");
}
}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_at(a, b, 0); }

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : decode_utf8(s)) {
    char esc[16];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", unsigned(0xd800 + (v >> 10)), unsigned(0xdc00 + (v & 0x3ff)));
      } else {
        std::snprintf(esc, sizeof(esc), "\\u%04x", unsigned(c));
      }
      out += esc;
    } else {
      append_utf8(out, c);
    }
  }
  out += '"';
}

void json_into(std::string& out, const Value& v, const JsonOptions& opt, int depth) {
  check_depth(depth);
  charge_bytes(v.is_string() ? v.s.size() : opt.has_indent ? opt.indent.size() * size_t(depth) : 0);
  auto newline = [&](int d) {
    out += '\n';
    for (int k = 0; k < d; ++k) out += opt.indent;
  };
  switch (v.kind) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.b ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.i); return;
    case Value::Kind::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += py_float_repr(v.f);
      return;
    case Value::Kind::String: json_string(out, v.s, opt.ensure_ascii); return;
    case Value::Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += opt.item_sep;
        if (opt.has_indent) newline(depth + 1);
        json_into(out, (*v.list)[k], opt, depth + 1);
      }
      if (opt.has_indent) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict->is_namespace) fail("Object of type Namespace is not JSON serializable");
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (opt.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += opt.item_sep;
        if (opt.has_indent) newline(depth + 1);
        json_string(out, items[k]->first, opt.ensure_ascii);
        out += opt.key_sep;
        json_into(out, items[k]->second, opt, depth + 1);
      }
      if (opt.has_indent) newline(depth);
      out += '}';
      return;
    }
    default: fail("Object of type ", type_name(v), " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  json_into(out, v, opt, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) return Value::number(double(u));
      return Value::integer(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::make_list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict->items.emplace_back(it.key(), from_json(it.value()));
      return d;
    }
    default: fail("unsupported JSON value (binary or discarded)");
  }
}

}  // namespace moeflux::tpl
