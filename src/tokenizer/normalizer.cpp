// The normalizer implementations and their construction from JSON.
#include "tokenizer/normalizer.h"

#include <vector>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace moeflux {

namespace {

class UnicodeNorm : public Normalizer {
 public:
  explicit UnicodeNorm(NormalForm f) : form_(f) {}
  std::string normalize(std::string s) const override {
    bool ascii = true;  // every normal form leaves ASCII alone: skip utf8proc
    for (char c : s) ascii &= static_cast<uint8_t>(c) < 0x80;
    return ascii ? s : unicode_normalize(s, form_);
  }

 private:
  NormalForm form_;
};

class Lowercase : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return unicode_lowercase(s); }
};

class StripAccents : public Normalizer {
 public:
  std::string normalize(std::string s) const override {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      const int32_t cp = utf8_next(s, i);
      if (!unicode_is_nonspacing_mark(cp)) utf8_append(out, cp);
    }
    return out;
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!unicode_is_whitespace(utf8_next(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!unicode_is_whitespace(utf8_next(s, i))) break;
        e = start;
      }
    }
    return s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prefix_(std::move(p)) {}
  std::string normalize(std::string s) const override { return s.empty() ? s : prefix_ + s; }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(const std::string& pattern, bool is_regex, std::string content, const std::string& where)
      : regex_(pattern, !is_regex, where), content_(std::move(content)) {}
  std::string normalize(std::string s) const override { return regex_.replace_all(s, content_); }

 private:
  Regex regex_;
  std::string content_;
};

class Sequence : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> items;
  std::string normalize(std::string s) const override {
    for (const auto& n : items) s = n->normalize(std::move(s));
    return s;
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_string(json_field(j, "type", where), where + ".type");
  if (type == "NFC") return std::make_unique<UnicodeNorm>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNorm>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNorm>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNorm>(NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip")
    return std::make_unique<Strip>(json_bool(j, "strip_left", true, where), json_bool(j, "strip_right", true, where));
  if (type == "Prepend")
    return std::make_unique<Prepend>(json_string(json_field(j, "prepend", where), where + ".prepend"));
  if (type == "Replace") {
    bool is_regex = false;
    const std::string pat = json_pattern(json_field(j, "pattern", where), &is_regex, where + ".pattern");
    return std::make_unique<Replace>(pat, is_regex, json_string(json_field(j, "content", where), where + ".content"),
                                     where + ".pattern");
  }
  if (type == "Sequence") {
    const Json& list = json_field(j, "normalizers", where);
    if (!list.is_array()) fail(where, ".normalizers: expected an array");
    auto seq = std::make_unique<Sequence>();
    for (size_t i = 0; i < list.size(); ++i) {
      auto n = make_normalizer(list[i], cat(where, ".normalizers[", i, "]"));
      if (n) seq->items.push_back(std::move(n));
    }
    return seq;
  }
  fail(where, ": unsupported normalizer type '", type, "'");
}

}  // namespace moeflux
