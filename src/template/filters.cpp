// jinja2's filters and tests as chat templates use them, with transformers' tojson
// (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)).
// Names are checked at parse time (is_known_filter / is_known_test), as jinja2 does.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "template/builtins.h"
#include "template/renderer.h"
#include "template/text.h"

namespace moeflux::tpl {

namespace {

const std::set<std::string> kFilters = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper", "wordcount"};
const std::set<std::string> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "even", "false", "float", "ge", ">=",
    "gt", ">", "greaterthan", "in", "integer", "iterable", "le", "<=", "lessthan", "lower", "lt", "<", "mapping",
    "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper"};

const Value* arg(const CallArgs& a, size_t idx, const char* name) { return a.get(idx, name); }

bool flag(const CallArgs& a, size_t idx, const char* name, bool dflt) {
  const Value* v = arg(a, idx, name);
  return v ? truthy(*v) : dflt;
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String: return int64_t(cp_length(v.s));
    case Value::Kind::List: return int64_t(v.list->size());
    case Value::Kind::Dict: return int64_t(v.dict->items.size());
    case Value::Kind::Undefined: return 0;
    default: fail("object of type '", type_name(v), "' has no len()");
  }
}

// jinja2's make_attrgetter: "a.b.0" walks items (integer parts index lists).
Value attr_path(Renderer& r, const Value& item, const std::string& path) {
  Value cur = item;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    cur = get_item(r, cur, digits && part.size() < 18 ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

Value sort_key(Renderer& r, const Value& item, const Value* attribute, bool case_sensitive) {
  Value k = attribute && !attribute->is_none() ? attr_path(r, item, to_str(*attribute)) : item;
  if (!case_sensitive && k.is_string()) return Value::string(py_lower(k.s));
  return k;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::u32string u = decode_utf8(s), cur;
  for (size_t k = 0; k < u.size(); ++k) {
    char32_t c = u[k];
    bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur.push_back(c);
      continue;
    }
    if (c == '\r' && k + 1 < u.size() && u[k + 1] == '\n') ++k;
    lines.push_back(encode_utf8(cur));
    cur.clear();
  }
  if (!cur.empty()) lines.push_back(encode_utf8(cur));
  return lines;
}

Value filter_tojson(const Value& v, const CallArgs& a) {
  JsonOptions opt;
  opt.ensure_ascii = flag(a, 0, "ensure_ascii", false);
  const Value* indent = arg(a, 1, "indent");
  if (indent && !indent->is_none()) {
    opt.has_indent = true;
    if (indent->is_string()) {
      opt.indent = indent->s;
    } else if (indent->kind == Value::Kind::Int || indent->kind == Value::Kind::Bool) {
      int64_t n = indent->kind == Value::Kind::Bool ? indent->b : indent->i;
      if (n > 64) fail("tojson indent too large");
      opt.indent = std::string(size_t(std::max<int64_t>(n, 0)), ' ');
    } else {
      fail("tojson indent must be an int or a string");
    }
    opt.item_sep = ",";
  }
  const Value* seps = arg(a, 2, "separators");
  if (seps && !seps->is_none()) {
    if (!seps->is_list() || seps->list->size() != 2 || !(*seps->list)[0].is_string() || !(*seps->list)[1].is_string())
      fail("tojson separators must be a pair of strings");
    opt.item_sep = (*seps->list)[0].s;
    opt.key_sep = (*seps->list)[1].s;
  }
  opt.sort_keys = flag(a, 3, "sort_keys", false);
  return Value::string(to_json(v, opt));
}

Value filter_int(const Value& v, const CallArgs& a) {
  const Value* dflt = arg(a, 0, "default");
  Value fallback = dflt ? *dflt : Value::integer(0);
  auto from_double = [&](double d) {
    if (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18) fail("cannot convert float ", py_float_repr(d), " to integer");
    return Value::integer(int64_t(d));
  };
  switch (v.kind) {
    case Value::Kind::Int: return v;
    case Value::Kind::Bool: return Value::integer(v.b);
    case Value::Kind::Float: return from_double(v.f);
    case Value::Kind::String: {
      std::string t = py_strip(v.s, std::nullopt, true, true);
      std::string digits;
      for (size_t k = 0; k < t.size(); ++k)
        if (!(t[k] == '_' && k > 0 && k + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[k - 1])) &&
              std::isdigit(static_cast<unsigned char>(t[k + 1]))))
          digits += t[k];
      size_t used = 0;
      try {
        int64_t x = std::stoll(digits, &used, 10);
        if (used == digits.size() && !digits.empty() && !std::isspace(static_cast<unsigned char>(digits[0]))) return Value::integer(x);
      } catch (const std::exception&) {
      }
      try {
        double d = std::stod(digits, &used);
        if (used == digits.size() && !digits.empty() && !std::isspace(static_cast<unsigned char>(digits[0]))) return from_double(d);
      } catch (const std::exception&) {
      }
      return fallback;
    }
    default: return fallback;
  }
}

Value filter_float(const Value& v, const CallArgs& a) {
  const Value* dflt = arg(a, 0, "default");
  Value fallback = dflt ? *dflt : Value::number(0.0);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    std::string t = py_strip(v.s, std::nullopt, true, true);
    std::string low = py_lower(t);
    if (low == "nan" || low == "+nan" || low == "-nan") return Value::number(NAN);
    if (low == "inf" || low == "+inf" || low == "infinity" || low == "+infinity") return Value::number(INFINITY);
    if (low == "-inf" || low == "-infinity") return Value::number(-INFINITY);
    bool ok = !t.empty();
    for (char c : t) ok &= std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
    size_t used = 0;
    try {
      double d = ok ? std::stod(t, &used) : 0;
      if (ok && used == t.size()) return Value::number(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value filter_indent(Renderer& r, const Value& v, const CallArgs& a) {
  const Value* w = arg(a, 0, "width");
  std::string ind = w && w->is_string() ? w->s : std::string(size_t(std::clamp<int64_t>(w && w->kind == Value::Kind::Int ? w->i : 4, 0, 256)), ' ');
  bool first = flag(a, 1, "first", false), blank = flag(a, 2, "blank", false);
  std::string text = to_str(v);
  r.check_size(text.size() * (ind.size() + 1));
  std::vector<std::string> lines = split_lines(text + "\n");
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
  }
  return Value::string(first ? ind + rv : rv);
}

Value filter_minmax(Renderer& r, const Value& v, const CallArgs& a, bool want_max) {
  bool cs = flag(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  List items = iterate(v);
  if (items.empty()) return Value::undefined("no items for min/max");
  size_t best = 0;
  Value best_key = sort_key(r, items[0], attribute, cs);
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = sort_key(r, items[k], attribute, cs);
    if (want_max ? less(best_key, key) : less(key, best_key)) {
      best = k;
      best_key = key;
    }
  }
  return items[best];
}

// select / reject / selectattr / rejectattr.
Value filter_select(Renderer& r, const Value& v, const CallArgs& a, bool by_attr, bool keep_if) {
  size_t first = 0;
  std::string attribute;
  if (by_attr) {
    const Value* at = arg(a, 0, "attribute");
    if (!at) fail("selectattr/rejectattr need an attribute name");
    attribute = to_str(*at);
    first = 1;
  }
  const Value* test = arg(a, first, nullptr);
  CallArgs targs;
  for (size_t k = first + 1; k < a.pos.size(); ++k) targs.pos.push_back(a.pos[k]);
  List out;
  for (const auto& item : iterate(v)) {
    r.step();
    Value x = by_attr ? attr_path(r, item, attribute) : item;
    bool ok = test ? r.apply_test(to_str(*test), x, targs) : truthy(x);
    if (ok == keep_if) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

Value filter_map(Renderer& r, const Value& v, const CallArgs& a) {
  List out;
  const Value* attribute = nullptr;
  for (const auto& kv : a.kw)
    if (kv.first == "attribute") attribute = &kv.second;
  if (attribute) {
    const Value* dflt = nullptr;
    for (const auto& kv : a.kw)
      if (kv.first == "default") dflt = &kv.second;
    for (const auto& item : iterate(v)) {
      r.step();
      Value x = attr_path(r, item, to_str(*attribute));
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::make_list(std::move(out));
  }
  if (a.pos.empty()) fail("map() needs a filter name or attribute=");
  std::string name = to_str(a.pos[0]);
  if (!is_known_filter(name)) fail("No filter named '", name, "'");
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const auto& item : iterate(v)) {
    r.step();
    out.push_back(r.apply_filter(name, item, fargs));
  }
  return Value::make_list(std::move(out));
}

}  // namespace

bool is_known_filter(const std::string& name) { return kFilters.count(name) > 0; }
bool is_known_test(const std::string& name) { return kTests.count(name) > 0; }

// Parameter names (after the value) of the filters that take keyword arguments; jinja2 raises
// TypeError for an unknown keyword or too many positional arguments.
const std::map<std::string, std::vector<std::string>> kFilterParams = {
    {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}},
    {"default", {"default_value", "boolean"}},
    {"d", {"default_value", "boolean"}},
    {"trim", {"chars"}},
    {"replace", {"old", "new", "count"}},
    {"join", {"d", "attribute"}},
    {"int", {"default", "base"}},
    {"float", {"default"}},
    {"indent", {"width", "first", "blank"}},
    {"sort", {"reverse", "case_sensitive", "attribute"}},
    {"unique", {"case_sensitive", "attribute"}},
    {"dictsort", {"case_sensitive", "by", "reverse"}},
    {"min", {"case_sensitive", "attribute"}},
    {"max", {"case_sensitive", "attribute"}},
    {"sum", {"attribute", "start"}},
    {"round", {"precision", "method"}},
    {"attr", {"name"}},
    {"length", {}}, {"count", {}}, {"upper", {}}, {"lower", {}}, {"capitalize", {}}, {"title", {}},
    {"string", {}}, {"list", {}}, {"items", {}}, {"first", {}}, {"last", {}}, {"reverse", {}}, {"safe", {}},
    {"abs", {}}, {"wordcount", {}}, {"escape", {}}, {"e", {}},
};

Value Renderer::apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  if (auto it = kFilterParams.find(name); it != kFilterParams.end()) {
    const auto& params = it->second;
    if (a.pos.size() > params.size())
      fail("filter '", name, "' takes at most ", params.size(), " argument(s), got ", a.pos.size());
    for (size_t k = 0; k < a.kw.size(); ++k) {
      auto at = std::find(params.begin(), params.end(), a.kw[k].first);
      if (at == params.end()) fail("filter '", name, "' got an unexpected keyword argument '", a.kw[k].first, "'");
      if (size_t(at - params.begin()) < a.pos.size()) fail("filter '", name, "' got multiple values for argument '", a.kw[k].first, "'");
    }
  }
  if (name == "length" || name == "count") return Value::integer(length_of(v));
  if (name == "default" || name == "d") {
    bool boolean = flag(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) {
      const Value* dv = arg(a, 0, "default_value");
      return dv ? *dv : Value::string("");
    }
    return v;
  }
  if (name == "tojson") return filter_tojson(v, a);
  if (name == "safe") return v;
  if (name == "string") return Value::string(to_str(v));
  if (name == "trim") {
    const Value* chars = arg(a, 0, "chars");
    return Value::string(py_strip(to_str(v), chars && !chars->is_none() ? std::optional<std::string>(to_str(*chars)) : std::nullopt, true, true));
  }
  if (name == "upper") return Value::string(py_upper(to_str(v)));
  if (name == "lower") return Value::string(py_lower(to_str(v)));
  if (name == "capitalize") return Value::string(py_capitalize(to_str(v)));
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "escape" || name == "e") return Value::string(html_escape(to_str(v)));
  if (name == "wordcount") return Value::integer(int64_t(py_split(to_str(v), std::nullopt, -1, false).size()));
  if (name == "replace") {
    const Value *o = arg(a, 0, "old"), *n = arg(a, 1, "new"), *c = arg(a, 2, "count");
    if (!o || !n) fail("replace needs old and new");
    std::string s = replace_checked(*this, to_str(v), to_str(*o), to_str(*n), c && c->kind == Value::Kind::Int ? c->i : -1);
    check_size(s.size());
    return Value::string(std::move(s));
  }
  if (name == "join") {
    const Value *d = arg(a, 0, "d"), *attribute = arg(a, 1, "attribute");
    std::string sep = d ? to_str(*d) : "", out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += sep;
      out += to_str(attribute && !attribute->is_none() ? attr_path(*this, item, to_str(*attribute)) : item);
      first = false;
      check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "first") {
    List items = iterate(v);
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  }
  if (name == "last") {
    List items = iterate(v);
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
  }
  if (name == "int") return filter_int(v, a);
  if (name == "float") return filter_float(v, a);
  if (name == "abs") {
    if (v.kind == Value::Kind::Float) return Value::number(std::fabs(v.f));
    if (!v.is_number()) fail("bad operand type for abs(): '", type_name(v), "'");
    int64_t x = v.kind == Value::Kind::Bool ? v.b : v.i;
    if (x == INT64_MIN) fail("integer overflow");
    return Value::integer(x < 0 ? -x : x);
  }
  if (name == "round") {
    const Value* p = arg(a, 0, "precision");
    const Value* m = arg(a, 1, "method");
    int64_t prec = p && p->kind == Value::Kind::Int ? std::clamp<int64_t>(p->i, -300, 300) : 0;
    std::string method = m ? to_str(*m) : "common";
    if (!v.is_number()) fail("round needs a number");
    double x = v.as_double(), scale = std::pow(10.0, double(prec));
    double y = method == "ceil" ? std::ceil(x * scale) / scale : method == "floor" ? std::floor(x * scale) / scale
                                                                                  : std::nearbyint(x * scale) / scale;
    if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
    return Value::number(y);
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "items" || name == "dictsort") {
    if (v.is_undefined()) return Value::make_list();
    if (!v.is_dict() || v.dict->is_namespace) fail("Can only get item pairs from a mapping.");
    List out;
    for (const auto& kv : v.dict->items) out.push_back(Value::make_list({Value::string(kv.first), kv.second}));
    if (name == "dictsort") {
      bool cs = flag(a, 0, "case_sensitive", false), by_value = arg(a, 1, "by") && to_str(*arg(a, 1, "by")) == "value";
      bool rev = flag(a, 2, "reverse", false);
      std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
        Value kx = sort_key(*this, (*x.list)[by_value ? 1 : 0], nullptr, cs), ky = sort_key(*this, (*y.list)[by_value ? 1 : 0], nullptr, cs);
        return rev ? less(ky, kx) : less(kx, ky);
      });
    }
    return Value::make_list(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = decode_utf8(v.s);
      std::reverse(u.begin(), u.end());
      return Value::string(encode_utf8(u));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "sort") {
    bool rev = flag(a, 0, "reverse", false), cs = flag(a, 1, "case_sensitive", false);
    const Value* attribute = arg(a, 2, "attribute");
    List items = iterate(v);
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& item : items) keyed.emplace_back(sort_key(*this, item, attribute, cs), item);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return rev ? less(y.first, x.first) : less(x.first, y.first);
    });
    List out;
    for (auto& kv : keyed) out.push_back(kv.second);
    return Value::make_list(std::move(out));
  }
  if (name == "unique") {
    bool cs = flag(a, 0, "case_sensitive", false);
    const Value* attribute = arg(a, 1, "attribute");
    List out, seen;
    for (const auto& item : iterate(v)) {
      step();
      Value key = sort_key(*this, item, attribute, cs);
      charge_work(seen.size());
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "sum") {
    const Value* attribute = arg(a, 0, "attribute");
    const Value* start = arg(a, 1, "start");
    Value acc = start ? *start : Value::integer(0);
    for (const auto& item : iterate(v)) {
      Value x = attribute && !attribute->is_none() ? attr_path(*this, item, to_str(*attribute)) : item;
      if (!acc.is_number() || !x.is_number()) fail("sum needs numbers");
      if (acc.kind == Value::Kind::Float || x.kind == Value::Kind::Float) acc = Value::number(acc.as_double() + x.as_double());
      else if (__builtin_add_overflow(acc.kind == Value::Kind::Bool ? int64_t(acc.b) : acc.i, x.kind == Value::Kind::Bool ? int64_t(x.b) : x.i, &acc.i)) fail("integer overflow");
      else acc.kind = Value::Kind::Int;
    }
    return acc;
  }
  if (name == "min" || name == "max") return filter_minmax(*this, v, a, name == "max");
  if (name == "select" || name == "reject") return filter_select(*this, v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return filter_select(*this, v, a, true, name == "selectattr");
  if (name == "map") return filter_map(*this, v, a);
  if (name == "attr") {
    const Value* n = arg(a, 0, "name");
    if (!n) fail("attr needs a name");
    if (v.is_dict() && !v.dict->is_namespace) return Value::undefined("'dict object' has no attribute '" + to_str(*n) + "'");
    return get_attr(*this, v, to_str(*n));
  }
  if (name == "indent") return filter_indent(*this, v, a);
  fail("No filter named '", name, "'");
}

bool Renderer::apply_test(const std::string& name, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  static const std::set<std::string> kWithArg = {"divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<",
                                                 "lessthan", "gt", ">", "greaterthan", "le", "<=", "ge", ">=",
                                                 "in", "sameas"};
  size_t given = a.pos.size() + a.kw.size(), allowed = kWithArg.count(name) ? 1 : 0;
  if (given > allowed) fail("test_", name, "() takes ", allowed + 1, " positional argument(s) but ", given + 1, " were given");
  auto other = [&]() -> const Value& {
    if (a.pos.empty()) fail("test '", name, "' needs an argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.dict->is_namespace;
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_undefined() || (v.is_dict() && !v.dict->is_namespace);
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.dict->is_namespace);
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::Int;
  if (name == "float") return v.kind == K::Float;
  if (name == "boolean") return v.kind == K::Bool;
  if (name == "true") return v.kind == K::Bool && v.b;
  if (name == "false") return v.kind == K::Bool && !v.b;
  if (name == "callable") return v.kind == K::Callable;
  if (name == "lower") return v.is_string() && py_lower(v.s) == v.s && py_upper(v.s) != v.s;
  if (name == "upper") return v.is_string() && py_upper(v.s) == v.s && py_lower(v.s) != v.s;
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "<" || name == "lessthan") return less(v, other());
  if (name == "gt" || name == ">" || name == "greaterthan") return less(other(), v);
  if (name == "le" || name == "<=") return less(v, other()) || equals(v, other());
  if (name == "ge" || name == ">=") return less(other(), v) || equals(v, other());
  if (name == "in") {
    const Value& seq = other();
    if (seq.is_string()) return v.is_string() && seq.s.find(v.s) != std::string::npos;
    if (seq.is_dict()) return v.is_string() && seq.dict->find(v.s);
    for (const auto& x : iterate(seq))
      if (equals(x, v)) return true;
    return false;
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case K::List: return v.list == o.list;
      case K::Dict: return v.dict == o.dict;
      case K::Callable: return v.fn == o.fn;
      case K::String: return false;  // distinct str objects in general
      default: return equals(v, o);
    }
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.is_undefined()) fail(v.s.empty() ? "value is undefined" : v.s);
    if (v.kind != K::Int && v.kind != K::Bool) fail("test '", name, "' needs an integer");
    int64_t x = v.kind == K::Bool ? v.b : v.i;
    if (name == "divisibleby") {
      const Value& d = other();
      if (d.kind != K::Int || d.i == 0) fail("divisibleby needs a non-zero integer");
      return d.i == -1 || x % d.i == 0;
    }
    return (name == "odd") == (x % 2 != 0);
  }
  fail("No test named '", name, "'");
}

}  // namespace moeflux::tpl
