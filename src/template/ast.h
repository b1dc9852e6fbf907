// Syntax tree of a parsed chat template: expressions (Expr) and statements (Stmt). Each node
// keeps the line:column of its first token for error messages.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace moeflux::tpl {

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Const,    // value
    Name,     // name
    ListLit,  // args: items
    DictLit,  // args: key0, value0, key1, value1, ...
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..]); negate
    Unary,    // name in {"-", "+", "not"}, args[0]
    Binary,   // name: operator; args[0], args[1]; "and"/"or" short-circuit
    Cond,     // args[0] if args[1] else args[2] (args[2] may be null)
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (a chained comparison)
  };
  Kind kind;
  int line = 0, col = 0;
  int height = 1;  // of this subtree, capped by the parser
  std::string name;
  Value value;
  bool negate = false;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // Compare operators
};

struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

struct Stmt {
  enum class Kind {
    Data,      // text
    Output,    // {{ expr }}
    If,        // conds[k] -> bodies[k]; else_body
    For,       // targets in expr [if cond]: body; else_body
    Set,       // targets (or attr target `ns.attr`: targets={ns}, attr) = expr
    SetBlock,  // {% set target %}body{% endset %}
    Macro,     // name(targets with defaults) body
    Break,
    Continue,
    Scope,     // body rendered as is ({% generation %})
    FilterBlock,  // {% filter name(args) %}: expr is a Filter node over Name("")
  };
  Kind kind;
  int line = 0, col = 0;
  std::string text;  // Data text, Set attribute, Macro name
  ExprP expr;
  ExprP cond;
  std::vector<std::string> targets;
  std::vector<ExprP> defaults;  // Macro parameter defaults (null when none)
  std::vector<ExprP> conds;
  std::vector<Body> bodies;
  Body body, else_body;
};

struct Template {
  Body body;
};

// Parses template text; raises moeflux::Error naming line:column on bad syntax.
std::shared_ptr<Template> parse_template(const std::string& source);

}  // namespace moeflux::tpl
