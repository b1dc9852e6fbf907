// Parser of the jinja2 subset, expressions, by jinja2's precedence: conditional < or < and
// < not < comparisons / in < + - < ~ < * / // % < ** < unary minus, then postfix subscripts,
// slices, attributes, calls, and | filter / is test chains (names checked at parse time).
#include "template/builtins.h"
#include "template/parser.h"

namespace moeflux::tpl {

ExprP Parser::parse_expression() {
  DepthGuard g(*this);
  const Token& at = cur();
  ExprP e = parse_or_chain(true);
  if (is_name("if")) {
    next();
    auto c = node(Expr::Kind::Cond, at);
    attach(*c, std::move(e));
    attach(*c, parse_or_chain(true));
    if (is_name("else")) {
      next();
      attach(*c, parse_expression());
    } else {
      attach(*c, nullptr);
    }
    return c;
  }
  return e;
}

ExprP Parser::binary(const std::string& op, ExprP a, ExprP b, const Token& at) {
  auto e = node(Expr::Kind::Binary, at);
  e->name = op;
  attach(*e, std::move(a));
  attach(*e, std::move(b));
  return e;
}

// with_cond is false for the iterable of a for loop, whose `if` starts the loop filter.
ExprP Parser::parse_or_chain(bool /*with_cond*/) {
  DepthGuard g(*this);
  const Token& at = cur();
  ExprP e = parse_and();
  while (is_name("or")) {
    next();
    e = binary("or", std::move(e), parse_and(), at);
  }
  return e;
}

ExprP Parser::parse_and() {
  const Token& at = cur();
  ExprP e = parse_not();
  while (is_name("and")) {
    next();
    e = binary("and", std::move(e), parse_not(), at);
  }
  return e;
}

ExprP Parser::parse_not() {
  DepthGuard g(*this);
  if (is_name("not")) {
    auto e = node(Expr::Kind::Unary, cur());
    e->name = "not";
    next();
    attach(*e, parse_not());
    return e;
  }
  return parse_compare();
}

ExprP Parser::parse_compare() {
  // Comparisons chain as in Python: `a < b < c` is `a < b and b < c`, b evaluated once.
  const Token& at = cur();
  ExprP e = parse_math1();
  ExprP chain;
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
      return chain ? std::move(chain) : std::move(e);
    }
    if (!chain) {
      chain = node(Expr::Kind::Compare, at);
      attach(*chain, std::move(e));
    }
    chain->ops.push_back(op);
    attach(*chain, parse_math1());
  }
}

ExprP Parser::parse_math1() {
  const Token& at = cur();
  ExprP e = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    next();
    e = binary(op, std::move(e), parse_concat(), at);
  }
  return e;
}

ExprP Parser::parse_concat() {
  const Token& at = cur();
  ExprP e = parse_math2();
  while (is_op("~")) {
    next();
    e = binary("~", std::move(e), parse_math2(), at);
  }
  return e;
}

ExprP Parser::parse_math2() {
  const Token& at = cur();
  ExprP e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    next();
    e = binary(op, std::move(e), parse_pow(), at);
  }
  return e;
}

ExprP Parser::parse_pow() {
  const Token& at = cur();
  ExprP e = parse_unary(true);
  while (is_op("**")) {
    next();
    e = binary("**", std::move(e), parse_unary(true), at);
  }
  return e;
}

ExprP Parser::parse_unary(bool with_filter) {
  DepthGuard g(*this);
  const Token& at = cur();
  ExprP e;
  if (is_op("-") || is_op("+")) {
    e = node(Expr::Kind::Unary, at);
    e->name = cur().text;
    next();
    attach(*e, parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_chain(std::move(e), false);
  return e;
}

ExprP Parser::parse_primary() {
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
      attach(*list, std::move(e));
      while (is_op(",")) {
        next();
        if (is_op(")")) break;
        attach(*list, parse_expression());
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
      attach(*e, parse_expression());
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
      attach(*e, parse_expression());
      expect_op(":");
      attach(*e, parse_expression());
    }
    next();
    return e;
  }
  error(t, "unexpected " + describe(t));
}

ExprP Parser::parse_postfix(ExprP e) {
  while (true) {
    const Token& at = cur();
    if (is_op(".")) {
      next();
      if (cur().type == Tok::Name) {
        auto a = node(Expr::Kind::Attr, at);
        a->name = cur().text;
        attach(*a, std::move(e));
        e = std::move(a);
        next();
      } else if (cur().type == Tok::Int) {
        auto a = node(Expr::Kind::Item, at);
        auto idx = node(Expr::Kind::Const, cur());
        idx->value = Value::integer(cur().ival);
        attach(*a, std::move(e));
        attach(*a, std::move(idx));
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

ExprP Parser::parse_subscript(ExprP obj, const Token& at) {
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
    attach(*e, std::move(obj));
    attach(*e, std::move(parts[0]));
    return e;
  }
  auto e = node(Expr::Kind::Slice, at);
  attach(*e, std::move(obj));
  for (auto& p : parts) attach(*e, std::move(p));
  return e;
}

// Parses `(args, kw=value)` into a Call / Filter / Test node whose args[0] is `target`.
ExprP Parser::parse_call(ExprP target, Expr::Kind kind, const Token& at) {
  DepthGuard g(*this);
  auto e = node(kind, at);
  attach(*e, std::move(target));
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
      attach_kw(*e, k, parse_expression());
    } else {
      if (!e->kwargs.empty()) error(cur(), "positional argument after keyword argument");
      attach(*e, parse_expression());
    }
  }
  next();
  return e;
}

std::string Parser::parse_dotted_name() {
  std::string n = expect_name();
  while (is_op(".") && peek().type == Tok::Name) {
    next();
    n += "." + expect_name();
  }
  return n;
}

// `| filter(args)` and `is [not] test args` chains (and calls after them).
ExprP Parser::parse_filter_chain(ExprP e, bool first_is_filter) {
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
        attach(*f, std::move(e));
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
        attach(*t, std::move(e));
        bool starts_primary = cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                              cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{");
        if (starts_primary && !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error(cur(), "you cannot chain multiple tests with is");
          attach(*t, parse_postfix(parse_primary()));
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
}  // namespace moeflux::tpl
