// Attribute, item and slice access, iteration, the Python methods of str / dict / list that
// templates call, and the global functions (range, namespace, raise_exception, strftime_now,
// dict). Mutating methods (list.append, dict.update, ...) fail as they do in transformers,
// which renders in jinja2's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <ctime>
#include <utf8proc.h>

#include "core/error.h"
#include "template/renderer.h"
#include "template/text.h"

namespace moeflux::tpl {

namespace {

Value callable(std::string name, std::function<Value(Renderer&, CallArgs&)> fn) {
  Value v;
  v.kind = Value::Kind::Callable;
  v.fn = std::make_shared<Callable>();
  v.fn->name = std::move(name);
  v.fn->fn = std::move(fn);
  return v;
}

const std::string& need_str(const Value* v, const char* what) {
  if (!v || !v->is_string()) fail(what, " must be a string, got ", v ? type_name(*v) : "nothing");
  return v->s;
}

std::optional<std::string> opt_str(const Value* v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return need_str(v, what);
}

int64_t opt_int(const Value* v, int64_t dflt, const char* what) {
  if (!v || v->is_none()) return dflt;
  if (v->kind == Value::Kind::Int) return v->i;
  if (v->kind == Value::Kind::Bool) return v->b;
  fail(what, " must be an integer, got ", type_name(*v));
}

Value str_list(const std::vector<std::string>& parts) {
  List l;
  for (const auto& p : parts) l.push_back(Value::string(p));
  return Value::make_list(std::move(l));
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  std::u32string u = decode_utf8(s);
  if (u.empty()) return false;
  for (char32_t c : u)
    if (!pred(c)) return false;
  return true;
}

int category(char32_t c) { return c >= 0xd800 && c <= 0xdfff ? -1 : utf8proc_category(utf8proc_int32_t(c)); }
bool is_alpha(char32_t c) {
  int k = category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
bool is_digit(char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; }
bool is_alnum(char32_t c) { return is_alpha(c) || is_digit(c); }

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& x = need_str(&a, prefix ? "startswith argument" : "endswith argument");
    return prefix ? s.compare(0, x.size(), x) == 0 : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    for (const auto& a : *affix.list)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

Value string_method(const std::string& s, const std::string& name) {
  auto m = [&](std::function<Value(CallArgs&)> f) {
    return callable("str." + name, [f](Renderer&, CallArgs& a) { return f(a); });
  };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return m([s, prefix](CallArgs& a) {
      if (!a.get(0, nullptr)) fail(prefix ? "startswith" : "endswith", "() takes at least 1 argument");
      return Value::boolean(affix_match(s, a.pos[0], prefix));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return m([s, right](CallArgs& a) {
      return str_list(py_split(s, opt_str(a.get(0, "sep"), "sep"), opt_int(a.get(1, "maxsplit"), -1, "maxsplit"), right));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return m([s, l, r](CallArgs& a) { return Value::string(py_strip(s, opt_str(a.get(0, "chars"), "chars"), l, r)); });
  }
  if (name == "replace")
    return callable("str.replace", [s](Renderer& r, CallArgs& a) {
      return Value::string(replace_checked(r, s, need_str(a.get(0, "old"), "old"), need_str(a.get(1, "new"), "new"),
                                           opt_int(a.get(2, "count"), -1, "count")));
    });
  if (name == "upper") return m([s](CallArgs&) { return Value::string(py_upper(s)); });
  if (name == "lower") return m([s](CallArgs&) { return Value::string(py_lower(s)); });
  if (name == "title") return m([s](CallArgs&) { return Value::string(py_title(s)); });
  if (name == "capitalize") return m([s](CallArgs&) { return Value::string(py_capitalize(s)); });
  if (name == "find" || name == "rfind") {
    bool right = name == "rfind";
    return m([s, right](CallArgs& a) { return Value::integer(py_find(s, need_str(a.get(0, "sub"), "sub"), right)); });
  }
  if (name == "count") return m([s](CallArgs& a) { return Value::integer(py_count(s, need_str(a.get(0, "sub"), "sub"))); });
  if (name == "join")
    return m([s](CallArgs& a) {
      const Value* it = a.get(0, "iterable");
      if (!it) fail("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(*it)) {
        if (!x.is_string()) fail("sequence item: expected str instance, ", type_name(x), " found");
        if (!first) out += s;
        out += x.s;
        first = false;
      }
      return Value::string(std::move(out));
    });
  if (name == "isdigit") return m([s](CallArgs&) { return Value::boolean(all_chars(s, is_digit)); });
  if (name == "isalpha") return m([s](CallArgs&) { return Value::boolean(all_chars(s, is_alpha)); });
  if (name == "isalnum") return m([s](CallArgs&) { return Value::boolean(all_chars(s, is_alnum)); });
  if (name == "isspace") return m([s](CallArgs&) { return Value::boolean(all_chars(s, is_py_space)); });
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value immutable(const std::string& type, const std::string& name) {
  return callable(type + "." + name, [type, name](Renderer&, CallArgs&) -> Value {
    fail(type, ".", name, "() is not allowed: transformers renders chat templates in jinja2's immutable sandbox");
  });
}

Value dict_method(const std::shared_ptr<Dict>& d, const std::string& name) {
  if (name == "items")
    return callable("dict.items", [d](Renderer&, CallArgs&) {
      List l;
      for (const auto& kv : d->items) l.push_back(Value::make_list({Value::string(kv.first), kv.second}));
      return Value::make_list(std::move(l));
    });
  if (name == "keys")
    return callable("dict.keys", [d](Renderer&, CallArgs&) {
      List l;
      for (const auto& kv : d->items) l.push_back(Value::string(kv.first));
      return Value::make_list(std::move(l));
    });
  if (name == "values")
    return callable("dict.values", [d](Renderer&, CallArgs&) {
      List l;
      for (const auto& kv : d->items) l.push_back(kv.second);
      return Value::make_list(std::move(l));
    });
  if (name == "get")
    return callable("dict.get", [d](Renderer&, CallArgs& a) {
      const Value* k = a.get(0, nullptr);
      if (!k) fail("get() takes at least 1 argument");
      const Value* v = k->is_string() ? d->find(k->s) : nullptr;
      if (v) return *v;
      const Value* dflt = a.get(1, nullptr);
      return dflt ? *dflt : Value::none();
    });
  if (name == "copy")
    return callable("dict.copy", [d](Renderer&, CallArgs&) {
      Value c = Value::make_dict();
      c.dict->items = d->items;
      return c;
    });
  if (name == "pop" || name == "update" || name == "clear" || name == "setdefault" || name == "popitem")
    return immutable("dict", name);
  return Value::undefined();
}

Value list_method(const std::shared_ptr<List>& l, const std::string& name) {
  if (name == "index" || name == "count") {
    bool index = name == "index";
    return callable("list." + name, [l, index](Renderer&, CallArgs& a) {
      const Value* x = a.get(0, nullptr);
      if (!x) fail(index ? "index" : "count", "() takes exactly one argument");
      int64_t n = 0;
      for (size_t k = 0; k < l->size(); ++k) {
        if (!equals((*l)[k], *x)) continue;
        if (index) return Value::integer(int64_t(k));
        ++n;
      }
      if (index) fail(py_repr(*x), " is not in list");
      return Value::integer(n);
    });
  }
  if (name == "append" || name == "pop" || name == "insert" || name == "extend" || name == "remove" ||
      name == "clear" || name == "sort" || name == "reverse")
    return immutable("list", name);
  return Value::undefined("'list object' has no attribute '" + name + "'");
}

int64_t slice_index(const Value& v) {
  if (v.kind == Value::Kind::Int) return v.i;
  if (v.kind == Value::Kind::Bool) return v.b;
  fail("slice indices must be integers or None, not ", type_name(v));
}

}  // namespace

std::string replace_checked(Renderer& r, const std::string& s, const std::string& old, const std::string& repl,
                            int64_t count) {
  // Bound the result before building it: "".replace("", big) multiplies sizes.
  uint64_t hits = old.empty() ? cp_length(s) + 1 : uint64_t(py_count(s, old));
  if (count >= 0) hits = std::min<uint64_t>(hits, uint64_t(count));
  if (repl.size() > old.size()) r.check_size(s.size() + size_t(std::min<uint64_t>(hits, r.limits().max_output + 1)) * (repl.size() - old.size()));
  return py_replace(s, old, repl, count);
}

Value get_attr(Renderer&, const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::Undefined: fail(obj.s.empty() ? std::string("value is undefined") : obj.s);
    case Value::Kind::Dict: {
      if (obj.dict->is_namespace) {
        const Value* v = obj.dict->find(name);
        return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
      }
      Value m = dict_method(obj.dict, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::String: return string_method(obj.s, name);
    case Value::Kind::List: return list_method(obj.list, name);
    default: return Value::undefined(cat("'", type_name(obj), " object' has no attribute '", name, "'"));
  }
}

Value get_item(Renderer& r, const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Value::Kind::Undefined: fail(obj.s.empty() ? std::string("value is undefined") : obj.s);
    case Value::Kind::Dict: {
      if (key.is_string()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        if (!obj.dict->is_namespace) {
          Value m = dict_method(obj.dict, key.s);
          if (!m.is_undefined()) return m;
        }
      }
      return Value::undefined("'dict object' has no attribute " + py_repr(key));
    }
    case Value::Kind::List:
    case Value::Kind::String: {
      if (key.is_string()) return get_attr(r, obj, key.s);
      if (key.kind != Value::Kind::Int && key.kind != Value::Kind::Bool)
        return Value::undefined(cat("'", type_name(obj), " object' has no attribute ", py_repr(key)));
      int64_t i = slice_index(key);
      if (obj.is_list()) {
        int64_t n = int64_t(obj.list->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(cat("list object has no element ", slice_index(key)));
        return (*obj.list)[size_t(i)];
      }
      std::u32string u = decode_utf8(obj.s);
      int64_t n = int64_t(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(cat("str object has no element ", slice_index(key)));
      std::string out;
      append_utf8(out, u[size_t(i)]);
      return Value::string(out);
    }
    default: return Value::undefined(cat("'", type_name(obj), " object' has no attribute ", py_repr(key)));
  }
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail(obj.s.empty() ? std::string("value is undefined") : obj.s);
  if (!obj.is_list() && !obj.is_string()) fail("'", type_name(obj), "' object is not subscriptable");
  int64_t step = step_v.is_none() ? 1 : slice_index(step_v);
  if (step == 0) fail("slice step cannot be zero");
  std::u32string u;
  if (obj.is_string()) u = decode_utf8(obj.s);
  const int64_t n = obj.is_list() ? int64_t(obj.list->size()) : int64_t(u.size());
  // Python's PySlice_AdjustIndices.
  const int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? n - 1 : n;
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t x = slice_index(v);
    if (x < 0) {
      x += n;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  int64_t start = adjust(start_v, step < 0 ? upper : lower), stop = adjust(stop_v, step < 0 ? lower : upper);
  std::vector<size_t> idx;
  if (step > 0)
    for (int64_t k = start; k < stop; k += step) idx.push_back(size_t(k));
  else
    for (int64_t k = start; k > stop; k += step) idx.push_back(size_t(k));
  if (obj.is_list()) {
    List l;
    for (size_t k : idx) l.push_back((*obj.list)[k]);
    return Value::make_list(std::move(l));
  }
  std::string out;
  for (size_t k : idx) append_utf8(out, u[k]);
  return Value::string(std::move(out));
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::List: charge_work(v.list->size()); return *v.list;
    case Value::Kind::Undefined: return {};
    case Value::Kind::Dict: {
      if (v.dict->is_namespace) fail("'Namespace' object is not iterable");
      List l;
      for (const auto& kv : v.dict->items) l.push_back(Value::string(kv.first));
      return l;
    }
    case Value::Kind::String: {
      List l;
      charge_work(v.s.size());
      for (char32_t c : decode_utf8(v.s)) {
        std::string one;
        append_utf8(one, c);
        l.push_back(Value::string(one));
      }
      return l;
    }
    default: fail("'", type_name(v), "' object is not iterable");
  }
}

void add_builtin_globals(Dict& g) {
  g.set("range", callable("range", [](Renderer&, CallArgs& a) {
    if (a.pos.empty() || a.pos.size() > 3) fail("range expected 1 to 3 arguments, got ", a.pos.size());
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = opt_int(&a.pos[0], 0, "range() argument");
    } else {
      start = opt_int(&a.pos[0], 0, "range() argument");
      stop = opt_int(&a.pos[1], 0, "range() argument");
      if (a.pos.size() == 3) step = opt_int(&a.pos[2], 1, "range() argument");
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    // jinja2's sandbox refuses ranges longer than MAX_RANGE = 100000.
    constexpr int64_t kMaxRange = 100000;
    long double len = step > 0 ? (stop > start ? ((long double)stop - start + step - 1) / step : 0)
                               : (stop < start ? ((long double)start - stop - step - 1) / -(long double)step : 0);
    if (len > kMaxRange) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    charge_work(uint64_t(len));
    List l;
    for (int64_t k = 0; k < int64_t(len); ++k) l.push_back(Value::integer(start + k * step));
    return Value::make_list(std::move(l));
  }));
  g.set("namespace", callable("namespace", [](Renderer& r, CallArgs& a) { return r.make_namespace(a); }));
  g.set("dict", callable("dict", [](Renderer&, CallArgs& a) {
    Value d = Value::make_dict();
    for (const auto& p : a.pos) {
      if (!p.is_dict()) fail("dict() positional argument must be a mapping");
      for (const auto& kv : p.dict->items) d.dict->set(kv.first, kv.second);
    }
    for (const auto& kv : a.kw) d.dict->set(kv.first, kv.second);
    return d;
  }));
  g.set("raise_exception", callable("raise_exception", [](Renderer&, CallArgs& a) -> Value {
    const Value* m = a.get(0, "message");
    fail(m ? to_str(*m) : std::string());
  }));
  g.set("strftime_now", callable("strftime_now", [](Renderer&, CallArgs& a) {
    const std::string& fmt = need_str(a.get(0, "format"), "strftime_now format");
    if (fmt.size() > 256) fail("strftime_now format too long");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[1024];
    size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
    return Value::string(std::string(buf, n));
  }));
}

}  // namespace moeflux::tpl
