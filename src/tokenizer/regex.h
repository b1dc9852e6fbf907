// PCRE2 regular expressions as Hugging Face tokenizers uses Oniguruma ones: UTF-8 with Unicode
// properties (UTF + UCP), JIT-compiled, searched for all non-overlapping matches.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeflux {

// The pattern with Oniguruma's \s (White_Space, which includes U+0085) spelled for PCRE2.
std::string onig_to_pcre2(std::string_view pattern);

class Regex {
 public:
  // literal: the pattern is a plain string. `where` names the JSON field for error messages.
  Regex(std::string_view pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [start, end) byte ranges of all non-overlapping matches, left to right.
  // PRECOND: s is valid UTF-8.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
  // Replaces every match by `with`.
  std::string replace_all(std::string_view s, std::string_view with) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moeflux
