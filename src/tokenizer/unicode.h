// UTF-8 and Unicode helpers for the tokenizer: code point iteration, lossy decoding the way
// Rust's String::from_utf8_lossy does it (one U+FFFD per maximal invalid subpart), character
// classes and normal forms through utf8proc (no Unicode tables of our own).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace moeflux {

// Length of the well-formed UTF-8 sequence at s[i], or 0 when it is not well-formed.
size_t utf8_valid_len(std::string_view s, size_t i);
bool utf8_is_valid(std::string_view s);
// Decodes the code point at s[i] (which must be valid UTF-8) and advances i past it.
int32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, int32_t cp);
// Byte offset of the first invalid byte, or npos.
size_t utf8_first_invalid(std::string_view s);
// Invalid sequences become U+FFFD, one per maximal subpart (Unicode 3.9, as Rust does).
std::string utf8_lossy(std::string_view bytes);
inline bool utf8_ends_with_replacement(std::string_view s) {
  return s.size() >= 3 && s.substr(s.size() - 3) == "\xEF\xBF\xBD";
}

// Rust's char::is_whitespace: the White_Space property.
bool unicode_is_whitespace(int32_t cp);
// Rust's char::is_numeric: general categories Nd, Nl, No.
bool unicode_is_numeric(int32_t cp);
// Letters or numbers (approximates Rust's char::is_alphanumeric, which also counts the
// Other_Alphabetic marks; used only for single_word added tokens).
bool unicode_is_alphanumeric(int32_t cp);
// Nonspacing mark (Mn), removed by StripAccents.
bool unicode_is_nonspacing_mark(int32_t cp);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// PRECOND: s is valid UTF-8.
std::string unicode_normalize(std::string_view s, NormalForm form);
// Full lowercase mapping (Rust's str::to_lowercase, without final-sigma context).
std::string unicode_lowercase(std::string_view s);

}  // namespace moeflux
