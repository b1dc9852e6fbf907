// Evaluator of a parsed template: walks statements, evaluates expressions with jinja2
// semantics (default Undefined, Python operators), and enforces limits on output size,
// evaluation steps and call depth so hostile templates end with an Error, not a hang.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "template/ast.h"
#include "template/value.h"

namespace moeflux::tpl {

struct RenderLimits {
  size_t max_output = size_t(64) << 20;  // bytes of rendered text (and of any one string)
  uint64_t max_steps = 50'000'000;       // expression evaluations + loop iterations
  int max_call_depth = 40;               // nested macro calls
};

class Renderer {
 public:
  Renderer(const Template& tpl, const RenderLimits& limits);
  ~Renderer();
  // Renders with `context` (a Dict value) as the global variables.
  std::string render(const Value& context);

  // Used by the builtins (builtins.cpp).
  void step();
  void check_size(size_t bytes) const;
  Value call(const Value& fn, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, CallArgs& args);
  Value make_namespace(CallArgs& args);
  Value invoke_macro(const Stmt& macro, CallArgs& args);
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { Normal, Break, Continue };
  const Template& tpl_;
  RenderLimits limits_;
  std::vector<std::shared_ptr<Dict>> scopes_;  // [0]: globals, [1]: template top level
  std::vector<std::shared_ptr<Dict>> namespaces_;  // cleared at the end: breaks reference cycles
  size_t total_out_ = 0;
  int call_depth_ = 0;
  int loop_depth_ = 0;
  int eval_depth_ = 0;  // nested eval / exec_stmt frames, across macro calls

  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  void assign(const std::string& name, Value v);
  void emit(std::string& out, const std::string& text);
  Value lookup(const std::string& name) const;
  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_call(const Expr& e);
  void eval_args(const Expr& e, size_t first, CallArgs& args);
  Value make_macro(const Stmt& s);
};

// Attribute / item access with jinja2's rules (dict keys, then methods; list index).
Value get_attr(Renderer& r, const Value& obj, const std::string& name);
Value get_item(Renderer& r, const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Items of an iterable (list, dict keys, string code points); Error otherwise.
List iterate(const Value& v);
// str.replace with the result size checked against the output limit first.
std::string replace_checked(Renderer& r, const std::string& s, const std::string& old, const std::string& repl,
                            int64_t count);
// Globals every template sees (range, namespace, raise_exception, strftime_now, dict).
void add_builtin_globals(Dict& globals);

}  // namespace moeflux::tpl
