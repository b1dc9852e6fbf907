// Lexer of the jinja2 subset: splits template text into data, {{ }}, {% %} tokens and the
// expression tokens inside tags. Applies transformers' environment: trim_blocks and
// lstrip_blocks, `-`/`+` whitespace control, newline normalisation and the dropped final
// newline. Errors name line:column.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeflux::tpl {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // data text, name, operator, decoded string literal
  int64_t ival = 0;
  double fval = 0;
  int line = 1, col = 1;
};

std::vector<Token> lex_template(const std::string& source);

}  // namespace moeflux::tpl
