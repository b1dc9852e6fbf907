// Python str semantics on UTF-8 strings (see text.h).
#include "template/text.h"

#include <utf8proc.h>

#include "core/error.h"

namespace moeflux::tpl {

std::u32string decode_utf8(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    bool ok = len > 0 && i + size_t(len) <= n;
    for (int k = 1; ok && k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((d & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Reject overlong forms, surrogates and out-of-range values like Python's decoder does.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff))
      ok = false;
    if (!ok) {
      out.push_back(0xdc00 + c);
      ++i;
    } else {
      out.push_back(cp);
      i += size_t(len);
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= 0xdc80 && c <= 0xdcff) {
    out.push_back(static_cast<char>(c - 0xdc00));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t cp_length(const std::string& s) { return decode_utf8(s).size(); }

bool is_py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = decode_utf8(s), set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_py_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode_utf8(u.substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit != 0) {
        size_t at = s.find(*sep, pos);
        if (at == std::string::npos) break;
        out.push_back(s.substr(pos, at - pos));
        pos = at + sep->size();
        --maxsplit;
      }
      out.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit != 0 && end >= sep->size()) {
        size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string::npos) break;
        out.insert(out.begin(), s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
        --maxsplit;
      }
      out.insert(out.begin(), s.substr(0, end));
    }
    return out;
  }
  std::u32string u = decode_utf8(s);
  if (!from_right) {
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && is_py_space(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit == 0) {
        size_t e = n;
        while (e > i && is_py_space(u[e - 1])) --e;
        out.push_back(encode_utf8(u.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < n && !is_py_space(u[j])) ++j;
      out.push_back(encode_utf8(u.substr(i, j - i)));
      i = j;
      --maxsplit;
    }
  } else {
    size_t e = u.size();
    while (true) {
      while (e > 0 && is_py_space(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit == 0) {
        size_t b = 0;
        while (b < e && is_py_space(u[b])) ++b;
        out.insert(out.begin(), encode_utf8(u.substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_py_space(u[b - 1])) --b;
      out.insert(out.begin(), encode_utf8(u.substr(b, e - b)));
      e = b;
      --maxsplit;
    }
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  if (old.empty()) {
    // Python inserts repl between every code point and at both ends.
    std::u32string u = decode_utf8(s);
    std::string out;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || int64_t(k) < count) out += repl;
      if (k < u.size()) append_utf8(out, u[k]);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  while (count != 0) {
    size_t at = s.find(old, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += repl;
    pos = at + old.size();
    --count;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
  size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return int64_t(cp_length(s.substr(0, at)));
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return int64_t(cp_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

namespace {
char32_t to_upper(char32_t c) { return c >= 0xd800 && c <= 0xdfff ? c : char32_t(utf8proc_toupper(utf8proc_int32_t(c))); }
char32_t to_lower(char32_t c) { return c >= 0xd800 && c <= 0xdfff ? c : char32_t(utf8proc_tolower(utf8proc_int32_t(c))); }
bool is_cased_letter(char32_t c) {
  if (c >= 0xd800 && c <= 0xdfff) return false;
  auto cat = utf8proc_category(utf8proc_int32_t(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
}  // namespace

std::string py_upper(const std::string& s) {
  std::u32string u = decode_utf8(s);
  for (auto& c : u) c = to_upper(c);
  return encode_utf8(u);
}

std::string py_lower(const std::string& s) {
  std::u32string u = decode_utf8(s);
  for (auto& c : u) c = to_lower(c);
  return encode_utf8(u);
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = decode_utf8(s);
  for (size_t k = 0; k < u.size(); ++k) u[k] = k == 0 ? to_upper(u[k]) : to_lower(u[k]);
  return encode_utf8(u);
}

std::string py_title(const std::string& s) {
  std::u32string u = decode_utf8(s);
  bool prev_cased = false;
  for (auto& c : u) {
    bool cased = is_cased_letter(c);
    c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = cased;
  }
  return encode_utf8(u);
}

std::string jinja_title(const std::string& s) {
  // jinja2 splits on runs of [-\s({\[<] and capitalises each piece (first upper, rest lower).
  std::u32string u = decode_utf8(s);
  auto is_sep = [](char32_t c) { return is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  bool at_start = true;
  for (auto& c : u) {
    if (is_sep(c)) {
      at_start = true;
      continue;
    }
    c = at_start ? to_upper(c) : to_lower(c);
    at_start = false;
  }
  return encode_utf8(u);
}

}  // namespace moeflux::tpl
