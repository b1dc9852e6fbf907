// The decoder implementations and their construction from JSON.
#include "tokenizer/decoder.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace moeflux {

namespace {

// Token strings back to bytes (tokens that are not all stand-in characters pass as they are),
// then one lossy UTF-8 conversion of the whole byte string.
class ByteLevelDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const auto& map = ByteLevelMap::get();
    std::string bytes;
    for (const auto& t : tokens)
      if (!map.decode_append(t, bytes)) bytes += t;
    tokens.assign(1, utf8_lossy(bytes));
  }
};

// Runs of <0xNN> tokens become their bytes; an invalid run becomes one U+FFFD per byte.
class ByteFallbackDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t n_bytes = 0;
    const auto flush = [&] {
      if (!n_bytes) return;
      if (utf8_is_valid(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < n_bytes; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      n_bytes = 0;
    };
    for (auto& t : tokens) {
      int b = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') b = hex_byte(t[3], t[4]);
      if (b >= 0) {
        bytes += static_cast<char>(b);
        ++n_bytes;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int hex_byte(char hi, char lo) {
    const int h = hex_digit(hi), l = hex_digit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class ReplaceDec : public Decoder {
 public:
  ReplaceDec(const std::string& pattern, bool is_regex, std::string content, const std::string& where)
      : regex_(pattern, !is_regex, where), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = regex_.replace_all(t, content_);
  }

 private:
  Regex regex_;
  std::string content_;
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDec : public Decoder {
 public:
  StripDec(std::string content, size_t start, size_t stop) : c_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && e - b >= c_.size() && t.compare(b, c_.size(), c_) == 0; ++k) b += c_.size();
      for (size_t k = 0; k < stop_ && e - b >= c_.size() && t.compare(e - c_.size(), c_.size(), c_) == 0; ++k)
        e -= c_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string c_;
  size_t start_, stop_;
};

// The replacement character becomes a space, except in the first token where (unless the
// prepend scheme is "never") it is dropped, as Hugging Face does.
class MetaspaceDec : public Decoder {
 public:
  MetaspaceDec(std::string rep, bool prepend) : rep_(std::move(rep)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t p = 0; p < t.size();) {
        if (t.compare(p, rep_.size(), rep_) == 0) {
          if (!(i == 0 && prepend_)) out += ' ';
          p += rep_.size();
        } else {
          out += t[p++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string rep_;
  bool prepend_;
};

class SequenceDec : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> items;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items) d->decode_chain(tokens);
  }
};

size_t json_count(const Json& j, const char* key, const std::string& where) {
  const int64_t v = json_int(json_field(j, key, where), where + "." + key);
  if (v < 0 || v > (1 << 20)) fail(where, ".", key, ": out of range");
  return static_cast<size_t>(v);
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_string(json_field(j, "type", where), where + ".type");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Replace") {
    bool is_regex = false;
    const std::string pat = json_pattern(json_field(j, "pattern", where), &is_regex, where + ".pattern");
    return std::make_unique<ReplaceDec>(pat, is_regex, json_string(json_field(j, "content", where), where + ".content"),
                                        where + ".pattern");
  }
  if (type == "Strip") {
    const std::string c = json_string(json_field(j, "content", where), where + ".content");
    if (c.empty()) fail(where, ".content: empty");
    return std::make_unique<StripDec>(c, json_count(j, "start", where), json_count(j, "stop", where));
  }
  if (type == "Metaspace") {
    const std::string rep = json_string(json_field(j, "replacement", where), where + ".replacement");
    if (rep.empty()) fail(where, ".replacement: empty");
    bool prepend = json_bool(j, "add_prefix_space", true, where);
    if (const Json* s = json_opt(j, "prepend_scheme")) prepend = json_string(*s, where + ".prepend_scheme") != "never";
    return std::make_unique<MetaspaceDec>(rep, prepend);
  }
  if (type == "Sequence") {
    const Json& list = json_field(j, "decoders", where);
    if (!list.is_array()) fail(where, ".decoders: expected an array");
    auto seq = std::make_unique<SequenceDec>();
    for (size_t i = 0; i < list.size(); ++i) {
      auto d = make_decoder(list[i], cat(where, ".decoders[", i, "]"));
      if (d) seq->items.push_back(std::move(d));
    }
    return seq;
  }
  fail(where, ": unsupported decoder type '", type, "'");
}

}  // namespace moeflux
