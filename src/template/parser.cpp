// Parser of the jinja2 subset: statements (if/for/set/macro/filter/generation/break/continue)
// and expressions with jinja2's precedence (or < and < not < comparisons < + - < ~ < * / // %
// < ** < unary, then filters / tests / calls / subscripts). Nesting is capped so hostile
// templates cannot exhaust the stack.
#include <set>

#include "core/error.h"
#include "template/ast.h"
#include "template/builtins.h"
#include "template/lexer.h"

namespace moeflux::tpl {

namespace {

constexpr int kMaxParseDepth = 200;  // guard levels; one paren level costs about five

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body b = parse_body({}, end);
    return b;
  }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxParseDepth) p.error(p.cur(), cat("template nested deeper than ", kMaxParseDepth, " levels"));
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  void next() {
    if (p_ + 1 < t_.size()) ++p_;
  }

  [[noreturn]] void error(const Token& at, const std::string& msg) const {
    fail("template syntax error at ", at.line, ":", at.col, ": ", msg);
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::Data: return "template data";
      default: return "'" + t.text + "'";
    }
  }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) error(cur(), cat("expected '", op, "', got ", describe(cur())));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) error(cur(), "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) error(cur(), "expected '%}', got " + describe(cur()));
    next();
  }

  ExprP node(Expr::Kind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  StmtP stmt(Stmt::Kind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // Parses until one of `ends` ({% name %}) or end of input; `end` gets the tag that stopped it
  // (the parser then stands on that tag's name).
  Body parse_body(const std::set<std::string>& ends, std::string& end) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (!ends.empty()) {
          std::string want;
          for (const auto& e : ends) want += (want.empty() ? "" : " or ") + ("'" + e + "'");
          error(t, "unexpected end of template, expected " + want);
        }
        end.clear();
        return body;
      }
      if (t.type == Tok::Data) {
        auto s = stmt(Stmt::Kind::Data, t);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        auto s = stmt(Stmt::Kind::Output, t);
        next();
        s->expr = parse_expression();
        if (cur().type != Tok::VarEnd) error(cur(), "expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type != Tok::Name) error(cur(), "expected a statement name, got " + describe(cur()));
        if (ends.count(cur().text)) {
          end = cur().text;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        error(t, "unexpected " + describe(t));
      }
    }
  }

  StmtP parse_statement() {
    const Token& t = cur();
    std::string kw = t.text;
    if (kw == "if") return parse_if();
    if (kw == "for") return parse_for();
    if (kw == "set") return parse_set();
    if (kw == "macro") return parse_macro();
    if (kw == "break" || kw == "continue") {
      auto s = stmt(kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, t);
      next();
      expect_block_end();
      return s;
    }
    if (kw == "generation") {
      auto s = stmt(Stmt::Kind::Scope, t);
      next();
      expect_block_end();
      std::string end;
      s->body = parse_body({"endgeneration"}, end);
      next();
      expect_block_end();
      return s;
    }
    if (kw == "filter") {
      auto s = stmt(Stmt::Kind::FilterBlock, t);
      next();
      auto target = node(Expr::Kind::Name, t);
      s->expr = parse_filter_chain(std::move(target), true);
      expect_block_end();
      std::string end;
      s->body = parse_body({"endfilter"}, end);
      next();
      expect_block_end();
      return s;
    }
    error(t, "unknown or unsupported statement '" + kw + "'");
  }

  StmtP parse_if() {
    auto s = stmt(Stmt::Kind::If, cur());
    next();
    while (true) {
      s->conds.push_back(parse_expression());
      expect_block_end();
      std::string end;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
      next();
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, end);
        next();
      }
      expect_block_end();
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = is_op("(");
    if (paren) next();
    names.push_back(expect_name());
    while (is_op(",")) {
      next();
      if (cur().type != Tok::Name) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  StmtP parse_for() {
    auto s = stmt(Stmt::Kind::For, cur());
    next();
    s->targets = parse_targets();
    if (!is_name("in")) error(cur(), "expected 'in' in for loop, got " + describe(cur()));
    next();
    s->expr = parse_or_chain(false);
    if (is_name("if")) {
      next();
      s->cond = parse_or_chain(true);
    }
    if (is_name("recursive")) error(cur(), "recursive for loops are not supported");
    expect_block_end();
    std::string end;
    s->body = parse_body({"else", "endfor"}, end);
    next();
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, end);
      next();
    }
    expect_block_end();
    return s;
  }

  StmtP parse_set() {
    const Token& at = cur();
    next();
    std::vector<std::string> targets;
    std::string attr;
    std::string first = expect_name();
    targets.push_back(first);
    if (is_op(".")) {
      next();
      attr = expect_name();
    } else {
      while (is_op(",")) {
        next();
        targets.push_back(expect_name());
      }
    }
    if (cur().type == Tok::BlockEnd) {
      if (!attr.empty() || targets.size() != 1) error(at, "block set takes a single name");
      auto s = stmt(Stmt::Kind::SetBlock, at);
      s->targets = targets;
      next();
      std::string end;
      s->body = parse_body({"endset"}, end);
      next();
      expect_block_end();
      return s;
    }
    auto s = stmt(Stmt::Kind::Set, at);
    s->targets = targets;
    s->text = attr;
    expect_op("=");
    s->expr = parse_tuple_or_expression();
    expect_block_end();
    return s;
  }

  StmtP parse_macro() {
    auto s = stmt(Stmt::Kind::Macro, cur());
    next();
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->targets.empty()) expect_op(",");
      if (is_op(")")) break;
      s->targets.push_back(expect_name());
      if (is_op("=")) {
        next();
        s->defaults.push_back(parse_expression());
      } else {
        s->defaults.push_back(nullptr);
      }
    }
    next();
    expect_block_end();
    std::string end;
    s->body = parse_body({"endmacro"}, end);
    next();
    if (cur().type == Tok::Name && cur().text == s->text) next();
    expect_block_end();
    return s;
  }

  // `a, b` at the top of a set statement builds a tuple (a list here).
  ExprP parse_tuple_or_expression() {
    const Token& at = cur();
    ExprP e = parse_expression();
    if (!is_op(",")) return e;
    auto list = node(Expr::Kind::ListLit, at);
    list->args.push_back(std::move(e));
    while (is_op(",")) {
      next();
      if (cur().type == Tok::BlockEnd) break;
      list->args.push_back(parse_expression());
    }
    return list;
  }

 public:
  ExprP parse_expression() {
    DepthGuard g(*this);
    const Token& at = cur();
    ExprP e = parse_or_chain(true);
    if (is_name("if")) {
      next();
      auto c = node(Expr::Kind::Cond, at);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or_chain(true));
      if (is_name("else")) {
        next();
        c->args.push_back(parse_expression());
      } else {
        c->args.push_back(nullptr);
      }
      return c;
    }
    return e;
  }

 private:
  ExprP binary(const std::string& op, ExprP a, ExprP b, const Token& at) {
    auto e = node(Expr::Kind::Binary, at);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // with_cond is false for the iterable of a for loop, whose `if` starts the loop filter.
  ExprP parse_or_chain(bool /*with_cond*/) {
    DepthGuard g(*this);
    const Token& at = cur();
    ExprP e = parse_and();
    while (is_name("or")) {
      next();
      e = binary("or", std::move(e), parse_and(), at);
    }
    return e;
  }

  ExprP parse_and() {
    const Token& at = cur();
    ExprP e = parse_not();
    while (is_name("and")) {
      next();
      e = binary("and", std::move(e), parse_not(), at);
    }
    return e;
  }

  ExprP parse_not() {
    DepthGuard g(*this);
    if (is_name("not")) {
      auto e = node(Expr::Kind::Unary, cur());
      e->name = "not";
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprP parse_compare() {
    const Token& at = cur();
    ExprP e = parse_math1();
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        op = "not in";
        next();
        next();
      } else {
        return e;
      }
      e = binary(op, std::move(e), parse_math1(), at);
    }
  }

  ExprP parse_math1() {
    const Token& at = cur();
    ExprP e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      e = binary(op, std::move(e), parse_concat(), at);
    }
    return e;
  }

  ExprP parse_concat() {
    const Token& at = cur();
    ExprP e = parse_math2();
    while (is_op("~")) {
      next();
      e = binary("~", std::move(e), parse_math2(), at);
    }
    return e;
  }

  ExprP parse_math2() {
    const Token& at = cur();
    ExprP e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      e = binary(op, std::move(e), parse_pow(), at);
    }
    return e;
  }

  ExprP parse_pow() {
    const Token& at = cur();
    ExprP e = parse_unary(true);
    while (is_op("**")) {
      next();
      e = binary("**", std::move(e), parse_unary(true), at);
    }
    return e;
  }

  ExprP parse_unary(bool with_filter) {
    DepthGuard g(*this);
    const Token& at = cur();
    ExprP e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::Unary, at);
      e->name = cur().text;
      next();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_chain(std::move(e), false);
    return e;
  }

  ExprP parse_primary() {
    DepthGuard g(*this);
    const Token& t = cur();
    if (t.type == Tok::Name) {
      auto e = node(Expr::Kind::Const, t);
      const std::string& n = t.text;
      if (n == "true" || n == "True") e->value = Value::boolean(true);
      else if (n == "false" || n == "False") e->value = Value::boolean(false);
      else if (n == "none" || n == "None") e->value = Value::none();
      else {
        e->kind = Expr::Kind::Name;
        e->name = n;
      }
      next();
      return e;
    }
    if (t.type == Tok::String) {
      auto e = node(Expr::Kind::Const, t);
      std::string s;
      while (cur().type == Tok::String) {  // adjacent literals concatenate
        s += cur().text;
        next();
      }
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      auto e = node(Expr::Kind::Const, t);
      e->value = t.type == Tok::Int ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return node(Expr::Kind::ListLit, t);  // empty tuple
      }
      ExprP e = parse_expression();
      if (is_op(",")) {
        auto list = node(Expr::Kind::ListLit, t);
        list->args.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          list->args.push_back(parse_expression());
        }
        e = std::move(list);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = node(Expr::Kind::ListLit, t);
      next();
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    if (is_op("{")) {
      auto e = node(Expr::Kind::DictLit, t);
      next();
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    error(t, "unexpected " + describe(t));
  }

  ExprP parse_postfix(ExprP e) {
    while (true) {
      const Token& at = cur();
      if (is_op(".")) {
        next();
        if (cur().type == Tok::Name) {
          auto a = node(Expr::Kind::Attr, at);
          a->name = cur().text;
          a->args.push_back(std::move(e));
          e = std::move(a);
          next();
        } else if (cur().type == Tok::Int) {
          auto a = node(Expr::Kind::Item, at);
          auto idx = node(Expr::Kind::Const, cur());
          idx->value = Value::integer(cur().ival);
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
          e = std::move(a);
          next();
        } else {
          error(cur(), "expected an attribute name after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), at);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::Kind::Call, at);
      } else {
        return e;
      }
    }
  }

  ExprP parse_subscript(ExprP obj, const Token& at) {
    DepthGuard g(*this);
    ExprP parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (is_op("]")) break;
      if (is_op(":")) {
        is_slice = true;
        if (++n > 2) error(cur(), "too many ':' in slice");
        next();
        continue;
      }
      if (parts[n]) error(cur(), "expected ']' or ':', got " + describe(cur()));
      parts[n] = parse_expression();
    }
    next();
    if (!is_slice) {
      if (!parts[0]) error(at, "empty subscript");
      auto e = node(Expr::Kind::Item, at);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = node(Expr::Kind::Slice, at);
    e->args.push_back(std::move(obj));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Parses `(args, kw=value)` into a Call / Filter / Test node whose args[0] is `target`.
  ExprP parse_call(ExprP target, Expr::Kind kind, const Token& at) {
    DepthGuard g(*this);
    auto e = node(kind, at);
    e->args.push_back(std::move(target));
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string k = cur().text;
        next();
        next();
        e->kwargs.emplace_back(k, parse_expression());
      } else {
        if (!e->kwargs.empty()) error(cur(), "positional argument after keyword argument");
        e->args.push_back(parse_expression());
      }
    }
    next();
    return e;
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == Tok::Name) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  // `| filter(args)` and `is [not] test args` chains (and calls after them).
  ExprP parse_filter_chain(ExprP e, bool first_is_filter) {
    while (true) {
      const Token& at = cur();
      if (first_is_filter || is_op("|")) {
        if (!first_is_filter) next();
        first_is_filter = false;
        const Token& name_tok = cur();
        std::string name = parse_dotted_name();
        if (!is_known_filter(name)) error(name_tok, "no filter named '" + name + "'");
        ExprP f;
        if (is_op("(")) {
          f = parse_call(std::move(e), Expr::Kind::Filter, at);
        } else {
          f = node(Expr::Kind::Filter, at);
          f->args.push_back(std::move(e));
        }
        f->name = name;
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        bool neg = false;
        if (is_name("not")) {
          neg = true;
          next();
        }
        const Token& name_tok = cur();
        std::string name = parse_dotted_name();
        if (!is_known_test(name)) error(name_tok, "no test named '" + name + "'");
        ExprP t;
        if (is_op("(")) {
          t = parse_call(std::move(e), Expr::Kind::Test, at);
        } else {
          t = node(Expr::Kind::Test, at);
          t->args.push_back(std::move(e));
          bool starts_primary = cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{");
          if (starts_primary && !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) error(cur(), "you cannot chain multiple tests with is");
            t->args.push_back(parse_postfix(parse_primary()));
          }
        }
        t->name = name;
        t->negate = neg;
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::Kind::Call, at);
      } else {
        return e;
      }
    }
  }
};

}  // namespace

std::shared_ptr<Template> parse_template(const std::string& source) {
  Parser p(lex_template(source));
  auto t = std::make_shared<Template>();
  t->body = p.parse_all();
  return t;
}

}  // namespace moeflux::tpl
