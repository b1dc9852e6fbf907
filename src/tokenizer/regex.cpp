// PCRE2 wrapper: compile (UTF, UCP, JIT when available) and iterate matches.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace moeflux {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool never = false;  // an empty literal: Hugging Face finds no match at all
};

namespace {
// One match-data block per thread, grown on demand: allocating it per search costs more than
// matching a short word.
struct MatchData {
  pcre2_match_data* md = nullptr;
  uint32_t pairs = 0;
  ~MatchData() { pcre2_match_data_free(md); }
  pcre2_match_data* get(const pcre2_code* code) {
    uint32_t want = 0;
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &want);
    want += 1;
    if (!md || pairs < want) {
      pcre2_match_data_free(md);
      md = pcre2_match_data_create(want, nullptr);
      MF_ASSERT(md != nullptr);
      pairs = want;
    }
    return md;
  }
};
thread_local MatchData tls_match;
}  // namespace

// Hugging Face compiles these patterns with Oniguruma, whose Unicode \s is the White_Space
// property; PCRE2's (UCP) lacks U+0085 (NEL). Rewrites \s and \S to include it.
std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  bool in_class = false, class_start = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (e == 'S' && !in_class) out += "[^\\s\\x{85}]";
      else out += {c, e};
      class_start = false;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = class_start = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        class_start = false;
        continue;
      }
    }
    if (in_class && c == ']' && !class_start) in_class = false;
    class_start = false;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern, bool literal, const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  impl_->never = literal && pattern.empty();
  int err = 0;
  PCRE2_SIZE off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (literal) opts = (opts & ~PCRE2_UCP) | PCRE2_LITERAL;  // UCP is meaningless (and refused) here
  const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), opts, &err,
                              &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail(where, ": cannot compile regex at offset ", off, ": ", reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
}

Regex::~Regex() { pcre2_code_free(impl_->code); }

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  if (impl_->never) return;
  pcre2_match_data* md = tls_match.get(impl_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  uint32_t flags = 0;
  while (start <= s.size()) {
    const int rc = pcre2_match(impl_->code, subject, s.size(), start, flags | PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (flags == 0) break;
      // An empty match was found here and no non-empty one: move on by one character.
      flags = 0;
      if (start >= s.size()) break;
      ++start;
      while (start < s.size() && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      fail("regex match failed: ", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    out.emplace_back(ov[0], ov[1]);
    start = ov[1];
    // After an empty match, retry at the same place demanding a non-empty one (Perl's rule).
    flags = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
}

std::string Regex::replace_all(std::string_view s, std::string_view with) const {
  std::vector<std::pair<size_t, size_t>> m;
  find_all(s, m);
  std::string out;
  size_t prev = 0;
  for (auto [a, b] : m) {
    out.append(s.substr(prev, a - prev));
    out.append(with);
    prev = b;
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace moeflux
