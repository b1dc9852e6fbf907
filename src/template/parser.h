// Recursive-descent parser of the jinja2 subset, shared by parser_stmt.cpp (statements:
// if/for/set/macro/filter/generation/break/continue) and parser_expr.cpp (expressions with
// jinja2's precedence). Internal to the template library; use parse_template (ast.h).
#pragma once
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "template/ast.h"
#include "template/lexer.h"

namespace moeflux::tpl {

// Guard levels before "nested too deep"; one parenthesis level costs about five, so hostile
// templates cannot exhaust the stack (checked by fuzz/fuzz_template under ASan).
constexpr int kMaxParseDepth = 200;
// Height of one expression tree: bounds the chains (`a+b+c...`, `x|f|g...`, `a.b.c...`) that
// parse iteratively but evaluate and destroy recursively.
constexpr int kMaxExprHeight = 300;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

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
  // A name that can be assigned: not true / false / none in either spelling.
  std::string expect_target() {
    const Token& at = cur();
    std::string n = expect_name();
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      error(at, "can't assign to '" + n + "'");
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

  // Adds a child (null allowed: missing slice parts, no else) and keeps parent.height.
  void attach(Expr& parent, ExprP child) {
    grow(parent, child.get());
    parent.args.push_back(std::move(child));
  }
  void attach_kw(Expr& parent, std::string key, ExprP child) {
    grow(parent, child.get());
    parent.kwargs.emplace_back(std::move(key), std::move(child));
  }
  void grow(Expr& parent, const Expr* child) const {
    if (!child) return;
    parent.height = std::max(parent.height, child->height + 1);
    if (parent.height > kMaxExprHeight)
      fail("template syntax error at ", parent.line, ":", parent.col, ": expression nested deeper than ", kMaxExprHeight, " levels");
  }

  StmtP stmt(Stmt::Kind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // Statements (parser_stmt.cpp).
  Body parse_all();
  // Parses until one of `ends` ({% name %}) or end of input; `end` gets the tag that stopped it
  // (the parser then stands on that tag's name).
  Body parse_body(const std::set<std::string>& ends, std::string& end);
  StmtP parse_statement();
  StmtP parse_if();
  std::vector<std::string> parse_targets();
  StmtP parse_for();
  StmtP parse_set();
  StmtP parse_macro();
  // `a, b` at the top of a set statement builds a tuple (a list here).
  ExprP parse_tuple_or_expression();

  // Expressions (parser_expr.cpp).
  ExprP parse_expression();
  ExprP binary(const std::string& op, ExprP a, ExprP b, const Token& at);
  // with_cond is false for the iterable of a for loop, whose `if` starts the loop filter.
  ExprP parse_or_chain(bool /*with_cond*/);
  ExprP parse_and();
  ExprP parse_not();
  ExprP parse_compare();
  ExprP parse_math1();
  ExprP parse_concat();
  ExprP parse_math2();
  ExprP parse_pow();
  ExprP parse_unary(bool with_filter);
  ExprP parse_primary();
  ExprP parse_postfix(ExprP e);
  ExprP parse_subscript(ExprP obj, const Token& at);
  // Parses `(args, kw=value)` into a Call / Filter / Test node whose args[0] is `target`.
  ExprP parse_call(ExprP target, Expr::Kind kind, const Token& at);
  std::string parse_dotted_name();
  // `| filter(args)` and `is [not] test args` chains (and calls after them).
  ExprP parse_filter_chain(ExprP e, bool first_is_filter);
};

}  // namespace moeflux::tpl
