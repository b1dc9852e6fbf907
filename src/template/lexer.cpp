// Lexer of the jinja2 subset (see lexer.h). Follows jinja2's lexer rules: lstrip_blocks only
// for block and comment tags at the start of a line, trim_blocks eats one newline after %}
// and #}, `}}`/`%}` do not close a tag while brackets are open.
#include "template/lexer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "template/text.h"

namespace moeflux::tpl {

namespace {

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = find_tag(pos);
      if (start == std::string::npos) {
        push_data(pos, src_.size());
        break;
      }
      char kind = src_[start + 1];  // '{', '%' or '#'
      char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      std::string text = src_.substr(pos, start - pos);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.resize(l_pos);
      }
      if (!text.empty()) emit(Tok::Data, text, pos);
      size_t p = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t e = src_.find("#}", p);
        if (e == std::string::npos) error_at(start, "unclosed comment: missing '#}'");
        pos = finish_tag(e, e + 2, true);
      } else if (kind == '{') {
        emit(Tok::VarBegin, "{{", start);
        pos = lex_inside(p, false, start);
      } else {
        emit(Tok::BlockBegin, "{%", start);
        pos = lex_inside(p, true, start);
        pos = maybe_raw(pos);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    emit(Tok::Eof, "", src_.size());
    return std::move(toks_);
  }

 private:
  std::string src_;
  std::vector<Token> toks_;

  size_t find_tag(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1))
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  void line_col(size_t off, int& line, int& col) const {
    line = 1;
    col = 1;
    for (size_t k = 0; k < off && k < src_.size(); ++k) {
      if (src_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  }

  [[noreturn]] void error_at(size_t off, const std::string& msg) const {
    int line, col;
    line_col(off, line, col);
    fail("template syntax error at ", line, ":", col, ": ", msg);
  }

  void emit(Tok t, std::string text, size_t off) {
    Token tok{t, std::move(text)};
    line_col_fast(off, tok.line, tok.col);
    toks_.push_back(std::move(tok));
  }

  // Incremental line/column: offsets only grow, so keep a cursor.
  size_t lc_off_ = 0;
  int lc_line_ = 1, lc_col_ = 1;
  void line_col_fast(size_t off, int& line, int& col) {
    if (off < lc_off_) {
      lc_off_ = 0;
      lc_line_ = lc_col_ = 1;
    }
    for (; lc_off_ < off && lc_off_ < src_.size(); ++lc_off_) {
      if (src_[lc_off_] == '\n') {
        ++lc_line_;
        lc_col_ = 1;
      } else {
        ++lc_col_;
      }
    }
    line = lc_line_;
    col = lc_col_;
  }

  void push_data(size_t b, size_t e) {
    if (e > b) emit(Tok::Data, src_.substr(b, e - b), b);
  }

  static std::string rstrip_ws(const std::string& s) {
    std::u32string u = decode_utf8(s);
    size_t e = u.size();
    while (e > 0 && is_py_space(u[e - 1])) --e;
    return encode_utf8(u.substr(0, e));
  }

  size_t skip_ws(size_t p) const {
    std::u32string u;
    while (p < src_.size()) {
      unsigned char c = static_cast<unsigned char>(src_[p]);
      if (c < 0x80) {
        if (!is_py_space(c)) break;
        ++p;
        continue;
      }
      // Non-ASCII whitespace (e.g. U+00A0) is stripped by Python's \s too.
      size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      u = decode_utf8(src_.substr(p, len));
      if (u.size() != 1 || !is_py_space(u[0])) break;
      p += len;
    }
    return p;
  }

  // After a tag's closing delimiter at [end_begin, end_after): `-` strips all whitespace,
  // otherwise trim_blocks removes one newline after block and comment tags.
  size_t finish_tag(size_t end_begin, size_t end_after, bool trim) {
    char before = end_begin > 0 ? src_[end_begin - 1] : 0;
    if (before == '-') return skip_ws(end_after);
    if (trim && before != '+' && end_after < src_.size() && src_[end_after] == '\n') return end_after + 1;
    return end_after;
  }

  size_t lex_inside(size_t p, bool block, size_t tag_start) {
    std::vector<char> balance;
    const char* close = block ? "%}" : "}}";
    while (true) {
      while (p < src_.size() && std::strchr(" \t\n\r\f\v", src_[p]) && src_[p] != 0) ++p;
      if (p >= src_.size()) error_at(tag_start, block ? "unclosed block tag: missing '%}'" : "unclosed variable tag: missing '}}'");
      if (balance.empty()) {
        bool minus = src_.compare(p, 3, std::string("-") + close) == 0;
        bool plus = block && src_.compare(p, 3, "+%}") == 0;
        if (minus || plus || src_.compare(p, 2, close) == 0) {
          size_t e = p + ((minus || plus) ? 1 : 0);
          emit(block ? Tok::BlockEnd : Tok::VarEnd, close, p);
          return finish_tag(e, e + 2, block);
        }
      }
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        emit(Tok::Name, src_.substr(p, e - p), p);
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (src_.compare(p, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-*/%~<>=()[]{},.:|", c) || c == 0)
            error_at(p, cat("unexpected character '", c, "' inside tag"));
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") balance.push_back(op[0]);
        if (op == ")" || op == "]" || op == "}") {
          char want = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (balance.empty() || balance.back() != want) error_at(p, cat("unexpected '", op, "'"));
          balance.pop_back();
        }
        emit(Tok::Op, op, p);
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p) {
    size_t e = p;
    auto digits = [&] {
      // Python literals: single underscores between digits only.
      auto digit = [&](size_t k) { return k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k])); };
      while (digit(e) || (src_[e] == '_' && e > p && digit(e - 1) && digit(e + 1))) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        e = q;
        digits();
      }
    }
    if (!is_float && src_[p] == '0') {
      // jinja2's integer rule allows no leading zeros: "05" lexes as 0 then 5.
      e = p + 1;
      while (e < src_.size() && (src_[e] == '0' || (src_[e] == '_' && e + 1 < src_.size() && src_[e + 1] == '0'))) ++e;
    }
    std::string text;
    for (size_t k = p; k < e; ++k)
      if (src_[k] != '_') text.push_back(src_[k]);
    Token tok{is_float ? Tok::Float : Tok::Int, text};
    line_col_fast(p, tok.line, tok.col);
    try {
      if (is_float) tok.fval = std::stod(text);
      else tok.ival = std::stoll(text);
    } catch (const std::exception&) {
      if (!is_float) error_at(p, "integer literal out of range: " + text);
      tok.fval = HUGE_VAL;  // Python: float('1e999') is inf
    }
    toks_.push_back(std::move(tok));
    return e;
  }

  size_t lex_string(size_t p) {
    char q = src_[p];
    std::string out;
    size_t k = p + 1;
    auto hex = [&](size_t at, int n) -> char32_t {
      if (at + size_t(n) > src_.size()) error_at(at, "truncated escape in string literal");
      char32_t v = 0;
      for (int d = 0; d < n; ++d) {
        char h = src_[at + size_t(d)];
        if (!std::isxdigit(static_cast<unsigned char>(h))) error_at(at, "bad escape in string literal");
        v = v * 16 + char32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      if (v > 0x10ffff) error_at(at, "escape out of range in string literal");
      return v;
    };
    while (true) {
      if (k >= src_.size()) error_at(p, "unterminated string literal");
      char c = src_[k];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) error_at(p, "unterminated string literal");
      char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // line continuation
        case 'x': append_utf8(out, hex(k, 2)); k += 2; break;
        case 'u': append_utf8(out, hex(k, 4)); k += 4; break;
        case 'U': append_utf8(out, hex(k, 8)); k += 8; break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = char32_t(e - '0');
            for (int d = 0; d < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++d, ++k) v = v * 8 + char32_t(src_[k] - '0');
            append_utf8(out, v);
          } else {
            out += '\\';  // Python keeps unknown escapes verbatim
            out += e;
          }
      }
    }
    Token tok{Tok::String, std::move(out)};
    line_col_fast(p, tok.line, tok.col);
    toks_.push_back(std::move(tok));
    return k + 1;
  }

  // {% raw %}...{% endraw %}: the text up to endraw is data, untouched.
  size_t maybe_raw(size_t pos) {
    size_t n = toks_.size();
    if (n < 3 || toks_[n - 1].type != Tok::BlockEnd || toks_[n - 2].type != Tok::Name || toks_[n - 2].text != "raw" ||
        toks_[n - 3].type != Tok::BlockBegin)
      return pos;
    toks_.resize(n - 3);
    for (size_t k = src_.find("{%", pos); k != std::string::npos; k = src_.find("{%", k + 2)) {
      size_t p = k + 2;
      char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      while (p < src_.size() && std::strchr(" \t\n\r", src_[p]) && src_[p]) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && std::strchr(" \t\n\r", src_[p]) && src_[p]) ++p;
      bool minus = src_.compare(p, 3, "-%}") == 0;
      if (!minus && src_.compare(p, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos, k - pos);
      if (sign == '-') text = rstrip_ws(text);
      if (!text.empty()) emit(Tok::Data, text, pos);
      size_t e = p + (minus ? 1 : 0);
      return finish_tag(e, e + 2, true);
    }
    error_at(pos, "missing {% endraw %}");
  }
};

// jinja2 normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False).
std::string normalise_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\r') {
      out += '\n';
      if (k + 1 < s.size() && s[k + 1] == '\n') ++k;
    } else {
      out += s[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> lex_template(const std::string& source) { return Lexer(normalise_newlines(source)).run(); }

}  // namespace moeflux::tpl
