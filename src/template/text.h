// Python str semantics on UTF-8 strings for the template interpreter: code-point length and
// slicing, strip/split/replace/find/count, case mapping (utf8proc) and jinja2's title filter.
// Invalid UTF-8 bytes decode to lone surrogates U+DC80..U+DCFF and encode back unchanged.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moeflux::tpl {

std::u32string decode_utf8(const std::string& s);
std::string encode_utf8(const std::u32string& s);
void append_utf8(std::string& out, char32_t c);
size_t cp_length(const std::string& s);
bool is_py_space(char32_t c);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; sep == nullopt splits on whitespace runs. maxsplit < 0: no limit.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
// str.replace(old, new, count); count < 0: all.
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
// str.find in code points (-1 when absent); str.count.
int64_t py_find(const std::string& s, const std::string& sub, bool from_right);
int64_t py_count(const std::string& s, const std::string& sub);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);      // str.title()
std::string jinja_title(const std::string& s);   // the |title filter

}  // namespace moeflux::tpl
