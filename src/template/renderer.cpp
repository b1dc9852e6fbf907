// Evaluator of parsed templates (see renderer.h). Scoping follows jinja2: every for-loop
// iteration gets a fresh scope (so `set` inside a loop does not leak; namespace() is the way
// out), if-blocks share their parent's scope, macros see the globals and top-level names.
#include "template/renderer.h"

#include <cmath>

#include "core/error.h"
#include "template/text.h"

namespace moeflux::tpl {

namespace {

// An Error that already names its template line:column.
struct LocatedError : Error {
  using Error::Error;
};

// Nested evaluation frames (expressions, statements, across macro calls); keeps the
// recursion well inside an 8 MiB stack even in ASan builds.
constexpr int kMaxEvalDepth = 1500;

struct DepthScope {
  int& depth;
  explicit DepthScope(int& d) : depth(d) {
    if (++depth > kMaxEvalDepth) fail("template evaluation nested deeper than ", kMaxEvalDepth, " levels");
  }
  ~DepthScope() { --depth; }
};

[[noreturn]] void fail_undefined(const Value& v) {
  fail(v.s.empty() ? std::string("value is undefined") : v.s);
}

int64_t int_of(const Value& v) { return v.kind == Value::Kind::Bool ? int64_t(v.b) : v.i; }
bool is_int(const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool; }

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '", type_name(b), "'");
}

Value repeat(Renderer& r, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::make_list();
  size_t unit = seq.is_string() ? seq.s.size() : seq.list->size() * 16;
  if (unit != 0 && uint64_t(n) > r.limits().max_output / unit) fail("repeated sequence exceeds the output limit");
  charge_bytes(size_t(n) * (unit + 1));
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out));
}

Value arith(Renderer& r, const std::string& op, const Value& a, const Value& b) {
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      r.check_size(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.is_list() && b.is_list()) {
      charge_work(a.list->size() + b.list->size());
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(l));
    }
    if (a.is_string() && !b.is_undefined() && !a.is_undefined())
      fail("can only concatenate str (not \"", type_name(b), "\") to str");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_int(b)) return repeat(r, a, int_of(b));
    if ((b.is_string() || b.is_list()) && is_int(a)) return repeat(r, b, int_of(a));
  }
  if (!a.is_number() || !b.is_number()) bad_operands(op, a, b);
  if (is_int(a) && is_int(b) && op != "/") {
    int64_t x = int_of(a), y = int_of(b), z = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &z)) fail("integer overflow");
      return Value::integer(z);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &z)) fail("integer overflow");
      return Value::integer(z);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &z)) fail("integer overflow");
      return Value::integer(z);
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) fail("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) {
        if (x == 0) fail("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(double(x), double(y)));
      }
      int64_t acc = 1;
      for (int64_t k = 0; k < y; ++k) {
        if (__builtin_mul_overflow(acc, x, &acc)) fail("integer overflow");
        if (acc == 0 || acc == 1) break;
        if (acc == -1) {
          acc = ((y - k - 1) % 2 == 0) ? -1 : 1;
          break;
        }
      }
      return Value::integer(acc);
    }
  }
  double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("float division by zero");
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    if (op == "%") return Value::number(m);
    return Value::number(std::floor((x - m) / y + 0.5));
  }
  if (op == "**") {
    if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  bad_operands(op, a, b);
}

bool contains(const Value& hay, const Value& needle) {
  switch (hay.kind) {
    case Value::Kind::String:
      if (!needle.is_string()) fail("'in <string>' requires string as left operand, not ", type_name(needle));
      return hay.s.find(needle.s) != std::string::npos;
    case Value::Kind::List:
      for (const auto& x : *hay.list)
        if (equals(x, needle)) return true;
      return false;
    case Value::Kind::Dict: return needle.is_string() && hay.dict->find(needle.s) != nullptr;
    case Value::Kind::Undefined: return false;
    default: fail("argument of type '", type_name(hay), "' is not iterable");
  }
}

}  // namespace

Renderer::Renderer(const Template& tpl, const RenderLimits& limits) : tpl_(tpl), limits_(limits) {}

Renderer::~Renderer() {
  for (auto& ns : namespaces_) ns->items.clear();
}

void Renderer::step() { charge_work(1); }

void Renderer::check_size(size_t bytes) const {
  if (bytes > limits_.max_output) fail("template output exceeds the limit of ", limits_.max_output, " bytes");
  charge_bytes(bytes);
}

void Renderer::emit(std::string& out, const std::string& text) {
  total_out_ += text.size();
  if (total_out_ > limits_.max_output) fail("template output exceeds the limit of ", limits_.max_output, " bytes");
  charge_bytes(text.size());
  out += text;
}

std::string Renderer::render(const Value& context) {
  auto globals = std::make_shared<Dict>();
  add_builtin_globals(*globals);
  if (context.is_dict())
    for (const auto& kv : context.dict->items) globals->set(kv.first, kv.second);
  scopes_ = {globals, std::make_shared<Dict>()};
  WorkBudget budget(limits_.max_steps);
  std::string out;
  if (exec(tpl_.body, out) != Flow::Normal) fail("'break' or 'continue' outside a for loop");
  return out;
}

Value Renderer::lookup(const std::string& name) const {
  for (size_t k = scopes_.size(); k-- > 0;)
    if (const Value* v = scopes_[k]->find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

void Renderer::assign(const std::string& name, Value v) { scopes_.back()->set(name, std::move(v)); }

Renderer::Flow Renderer::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec_stmt(*s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_stmt(const Stmt& s, std::string& out) {
  try {
    DepthScope depth(eval_depth_);
    step();
    switch (s.kind) {
      case Stmt::Kind::Data: emit(out, s.text); return Flow::Normal;
      case Stmt::Kind::Output: emit(out, to_str(eval(*s.expr))); return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t k = 0; k < s.conds.size(); ++k)
          if (truthy(eval(*s.conds[k]))) return exec(s.bodies[k], out);
        return exec(s.else_body, out);
      case Stmt::Kind::For: exec_for(s, out); return Flow::Normal;
      case Stmt::Kind::Set: {
        Value v = eval(*s.expr);
        if (!s.text.empty()) {
          Value ns = lookup(s.targets[0]);
          if (!ns.is_dict() || !ns.dict->is_namespace) fail("cannot assign attribute on non-namespace object");
          ns.dict->set(s.text, std::move(v));
        } else if (s.targets.size() == 1) {
          assign(s.targets[0], std::move(v));
        } else {
          List items = iterate(v);
          if (items.size() != s.targets.size())
            fail("cannot unpack ", items.size(), " values into ", s.targets.size(), " names");
          for (size_t k = 0; k < items.size(); ++k) assign(s.targets[k], items[k]);
        }
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: {
        std::string text;
        if (exec(s.body, text) != Flow::Normal) fail("'break' or 'continue' inside a set block");
        assign(s.targets[0], Value::string(std::move(text)));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: assign(s.text, make_macro(s)); return Flow::Normal;
      case Stmt::Kind::Break:
      case Stmt::Kind::Continue:
        if (loop_depth_ == 0) fail("'", s.kind == Stmt::Kind::Break ? "break" : "continue", "' outside a for loop");
        return s.kind == Stmt::Kind::Break ? Flow::Break : Flow::Continue;
      case Stmt::Kind::Scope: return exec(s.body, out);
      case Stmt::Kind::FilterBlock: {
        std::string text;
        if (exec(s.body, text) != Flow::Normal) fail("'break' or 'continue' inside a filter block");
        auto scope = std::make_shared<Dict>();
        scope->set("", Value::string(std::move(text)));
        scopes_.push_back(scope);
        Value v = eval(*s.expr);
        scopes_.pop_back();
        emit(out, to_str(v));
        return Flow::Normal;
      }
    }
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& e) {
    throw LocatedError(cat("template error at ", s.line, ":", s.col, ": ", e.what()));
  }
  return Flow::Normal;
}

void Renderer::exec_for(const Stmt& s, std::string& out) {
  List items = iterate(eval(*s.expr));
  auto bind = [&](Dict& scope, const Value& item) {
    if (s.targets.size() == 1) {
      scope.set(s.targets[0], item);
      return;
    }
    List parts = iterate(item);
    if (parts.size() != s.targets.size())
      fail("cannot unpack ", parts.size(), " values into ", s.targets.size(), " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) scope.set(s.targets[k], parts[k]);
  };
  if (s.cond) {
    List kept;
    for (const auto& item : items) {
      step();
      auto scope = std::make_shared<Dict>();
      bind(*scope, item);
      scopes_.push_back(scope);
      bool keep = truthy(eval(*s.cond));
      scopes_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  ++loop_depth_;
  const size_t n = items.size();
  for (size_t k = 0; k < n; ++k) {
    step();
    auto scope = std::make_shared<Dict>();
    bind(*scope, items[k]);
    Value loop = Value::make_dict();
    Dict& l = *loop.dict;
    l.set("index", Value::integer(int64_t(k) + 1));
    l.set("index0", Value::integer(int64_t(k)));
    l.set("revindex", Value::integer(int64_t(n - k)));
    l.set("revindex0", Value::integer(int64_t(n - k - 1)));
    l.set("first", Value::boolean(k == 0));
    l.set("last", Value::boolean(k + 1 == n));
    l.set("length", Value::integer(int64_t(n)));
    l.set("depth", Value::integer(1));
    l.set("depth0", Value::integer(0));
    if (k > 0) l.set("previtem", items[k - 1]);
    if (k + 1 < n) l.set("nextitem", items[k + 1]);
    auto cycle = std::make_shared<Callable>();
    cycle->name = "loop.cycle";
    cycle->fn = [k](Renderer&, CallArgs& a) {
      if (a.pos.empty()) fail("no items for cycling given");
      return a.pos[k % a.pos.size()];
    };
    Value cv;
    cv.kind = Value::Kind::Callable;
    cv.fn = cycle;
    l.set("cycle", cv);
    scope->set("loop", loop);
    scopes_.push_back(scope);
    Flow f = exec(s.body, out);
    scopes_.pop_back();
    if (f == Flow::Break) break;
  }
  --loop_depth_;
  if (n == 0) {
    scopes_.push_back(std::make_shared<Dict>());
    Flow f = exec(s.else_body, out);
    scopes_.pop_back();
    if (f != Flow::Normal) fail("'break' or 'continue' outside a for loop");
  }
}

Value Renderer::make_macro(const Stmt& s) {
  Value v;
  v.kind = Value::Kind::Callable;
  v.fn = std::make_shared<Callable>();
  v.fn->name = s.text;
  v.fn->is_macro = true;
  const Stmt* macro = &s;
  v.fn->fn = [macro](Renderer& r, CallArgs& a) { return r.invoke_macro(*macro, a); };
  return v;
}

Value Renderer::invoke_macro(const Stmt& m, CallArgs& a) {
  if (call_depth_ >= limits_.max_call_depth) fail("macro calls nested deeper than ", limits_.max_call_depth);
  if (a.pos.size() > m.targets.size()) fail("macro '", m.text, "' takes not more than ", m.targets.size(), " argument(s)");
  auto scope = std::make_shared<Dict>();
  for (const auto& kv : a.kw) {
    bool known = false;
    for (const auto& t : m.targets) known |= t == kv.first;
    if (!known) fail("macro '", m.text, "' takes no keyword argument '", kv.first, "'");
  }
  std::vector<std::shared_ptr<Dict>> saved = {scopes_[0], scopes_[1], scope};
  std::swap(saved, scopes_);
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  ++call_depth_;
  for (size_t k = 0; k < m.targets.size(); ++k) {
    const Value* given = a.get(k, m.targets[k].c_str());
    if (given) scope->set(m.targets[k], *given);
    else if (m.defaults[k]) scope->set(m.targets[k], eval(*m.defaults[k]));
    else scope->set(m.targets[k], Value::undefined("parameter '" + m.targets[k] + "' was not provided"));
  }
  std::string text;
  Flow f = exec(m.body, text);
  --call_depth_;
  loop_depth_ = saved_loops;
  std::swap(saved, scopes_);
  if (f != Flow::Normal) fail("'break' or 'continue' outside a for loop");
  return Value::string(std::move(text));
}

Value Renderer::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  if (fn.kind != Value::Kind::Callable) fail("'", type_name(fn), "' object is not callable");
  return fn.fn->fn(*this, args);
}

Value Renderer::make_namespace(CallArgs& args) {
  Value v = Value::make_dict();
  v.dict->is_namespace = true;
  for (const auto& p : args.pos) {
    if (!p.is_dict()) fail("namespace() takes keyword arguments or a dict");
    for (const auto& kv : p.dict->items) v.dict->set(kv.first, kv.second);
  }
  for (const auto& kv : args.kw) v.dict->set(kv.first, kv.second);
  namespaces_.push_back(v.dict);
  return v;
}

void Renderer::eval_args(const Expr& e, size_t first, CallArgs& args) {
  for (size_t k = first; k < e.args.size(); ++k) args.pos.push_back(eval(*e.args[k]));
  for (const auto& kv : e.kwargs) args.kw.emplace_back(kv.first, eval(*kv.second));
}

Value Renderer::eval(const Expr& e) {
  try {
    DepthScope depth(eval_depth_);
    step();
    return eval_inner(e);
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& x) {
    throw LocatedError(cat("template error at ", e.line, ":", e.col, ": ", x.what()));
  }
}

Value Renderer::eval_call(const Expr& e) {
  Value fn = eval(*e.args[0]);
  CallArgs args;
  eval_args(e, 1, args);
  return call(fn, args);
}

namespace {
bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equals(a, b);
  if (op == ">=") return less(b, a) || equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  MF_ASSERT(false);
  return false;
}
}  // namespace

Value Renderer::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.args[k + 1]);
    if (!compare(e.ops[k], left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Renderer::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value a = eval(*e.args[0]);
    return truthy(a) ? eval(*e.args[1]) : a;
  }
  if (op == "or") {
    Value a = eval(*e.args[0]);
    return truthy(a) ? a : eval(*e.args[1]);
  }
  Value a = eval(*e.args[0]), b = eval(*e.args[1]);
  if (op == "~") {
    std::string s = to_str(a);
    s += to_str(b);
    check_size(s.size());
    return Value::string(std::move(s));
  }
  if (op == "%" && a.is_string()) fail("printf-style string formatting ('%' on a string) is not supported");
  return arith(*this, op, a, b);
}

Value Renderer::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Const: return e.value;
    case Expr::Kind::Name: return lookup(e.name);
    case Expr::Kind::ListLit: {
      List l;
      for (const auto& a : e.args) l.push_back(eval(*a));
      return Value::make_list(std::move(l));
    }
    case Expr::Kind::DictLit: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        if (!key.is_string()) fail("dict keys must be strings here, got ", type_name(key));
        d.dict->set(key.s, eval(*e.args[k + 1]));
      }
      return d;
    }
    case Expr::Kind::Attr: return get_attr(*this, eval(*e.args[0]), e.name);
    case Expr::Kind::Item: {
      Value obj = eval(*e.args[0]);
      return get_item(*this, obj, eval(*e.args[1]));
    }
    case Expr::Kind::Slice: {
      Value obj = eval(*e.args[0]);
      Value parts[3];
      for (int k = 0; k < 3; ++k) parts[k] = e.args[size_t(k) + 1] ? eval(*e.args[size_t(k) + 1]) : Value::none();
      return slice_value(obj, parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::Call: return eval_call(e);
    case Expr::Kind::Filter: {
      Value v = eval(*e.args[0]);
      CallArgs args;
      eval_args(e, 1, args);
      return apply_filter(e.name, v, args);
    }
    case Expr::Kind::Test: {
      Value v = eval(*e.args[0]);
      CallArgs args;
      eval_args(e, 1, args);
      bool r = apply_test(e.name, v, args);
      return Value::boolean(e.negate ? !r : r);
    }
    case Expr::Kind::Unary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) fail("bad operand type for unary ", e.name, ": '", type_name(v), "'");
      if (e.name == "+") return is_int(v) ? Value::integer(int_of(v)) : v;
      if (is_int(v)) {
        if (int_of(v) == INT64_MIN) fail("integer overflow");
        return Value::integer(-int_of(v));
      }
      return Value::number(-v.f);
    }
    case Expr::Kind::Binary: return eval_binary(e);
    case Expr::Kind::Compare: return eval_compare(e);
    case Expr::Kind::Cond:
      if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the conditional expression evaluated to no value");
  }
  return Value::undefined();
}

}  // namespace moeflux::tpl
