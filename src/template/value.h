// Runtime values of the chat-template interpreter: the JSON kinds (none, bool, int, float,
// string, list, dict) plus jinja2's Undefined and callables (builtins, bound methods, macros).
// Printing, equality, ordering and tojson follow Python / jinja2 semantics (Python repr of
// floats and containers, json.dumps with ensure_ascii=False).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moeflux::tpl {

struct Value;
struct Dict;
struct Callable;
using List = std::vector<Value>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // String payload; for Undefined the name that was looked up
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Callable> fn;

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List v = {});
  static Value make_dict();

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : double(kind == Kind::Bool ? b : i); }
};

// Insertion-ordered string-keyed map, as Python dicts parsed from JSON are.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // jinja2 namespace(): the one object `set x.attr = ...` may change
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument `idx` / keyword `name`, or nullptr when not given.
  const Value* get(size_t idx, const char* name) const;
};

class Renderer;
struct Callable {
  std::string name;
  bool is_macro = false;
  std::function<Value(Renderer&, CallArgs&)> fn;
};

// Python type name for error messages ("str", "int", "dict", ...).
const char* type_name(const Value& v);
bool truthy(const Value& v);
// str(v) as jinja2 prints it: undefined -> "", None -> "None", True, 1.5, ['a', 1], {'k': 'v'}.
std::string to_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_float_repr(double d);
// Python ==, which is false across unrelated types; 1 == 1.0 == True.
bool equals(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings, lists lexicographically; else Error.
bool less(const Value& a, const Value& b);

struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // indent unit when has_indent
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonOptions& opt);

Value from_json(const nlohmann::ordered_json& j);

// Work units left for the render in progress on this thread, shared by the evaluator and by
// the value operations that walk nested data or copy bytes, so that shared sub-lists
// (`[a, a, a]` nested k deep) or repeated big strings cannot turn into an endless render.
void charge_work(uint64_t units);  // raises Error when the budget is spent
inline void charge_bytes(size_t bytes) { charge_work(bytes / 256 + 1); }
class WorkBudget {
 public:
  explicit WorkBudget(uint64_t units);
  ~WorkBudget();
  WorkBudget(const WorkBudget&) = delete;
  WorkBudget& operator=(const WorkBudget&) = delete;

 private:
  uint64_t saved_;
};

}  // namespace moeflux::tpl
