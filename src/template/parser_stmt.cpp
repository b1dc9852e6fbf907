// Parser of the jinja2 subset, statements: the template body, if/elif/else, for (targets,
// loop filter, else), set (names, tuples, namespace attributes, block set), macro,
// filter blocks, {% generation %}, break/continue; and parse_template.
#include "template/parser.h"

namespace moeflux::tpl {

Body Parser::parse_all() {
  std::string end;
  Body b = parse_body({}, end);
  return b;
}

// Parses until one of `ends` ({% name %}) or end of input; `end` gets the tag that stopped it
// (the parser then stands on that tag's name).
Body Parser::parse_body(const std::set<std::string>& ends, std::string& end) {
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

StmtP Parser::parse_statement() {
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

StmtP Parser::parse_if() {
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

std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names;
  bool paren = is_op("(");
  if (paren) next();
  names.push_back(expect_target());
  while (is_op(",")) {
    next();
    if (cur().type != Tok::Name) break;
    names.push_back(expect_target());
  }
  if (paren) expect_op(")");
  return names;
}

StmtP Parser::parse_for() {
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

StmtP Parser::parse_set() {
  const Token& at = cur();
  next();
  std::vector<std::string> targets;
  std::string attr;
  std::string first = expect_target();
  targets.push_back(first);
  if (is_op(".")) {
    next();
    attr = expect_name();
  } else {
    while (is_op(",")) {
      next();
      targets.push_back(expect_target());
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

StmtP Parser::parse_macro() {
  auto s = stmt(Stmt::Kind::Macro, cur());
  next();
  s->text = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!s->targets.empty()) expect_op(",");
    if (is_op(")")) break;
    s->targets.push_back(expect_target());
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
ExprP Parser::parse_tuple_or_expression() {
  const Token& at = cur();
  ExprP e = parse_expression();
  if (!is_op(",")) return e;
  auto list = node(Expr::Kind::ListLit, at);
  attach(*list, std::move(e));
  while (is_op(",")) {
    next();
    if (cur().type == Tok::BlockEnd) break;
    attach(*list, parse_expression());
  }
  return list;
}
std::shared_ptr<Template> parse_template(const std::string& source) {
  Parser p(lex_template(source));
  auto t = std::make_shared<Template>();
  t->body = p.parse_all();
  return t;
}

}  // namespace moeflux::tpl
