// The pre-tokenizer implementations. Matches become (range, is_match) lists that a split
// behaviour turns into pieces, following Hugging Face's SplitDelimiterBehavior.
#include "tokenizer/pre_tokenizer.h"

#include <functional>
#include <utility>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace moeflux {

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  size_t a, b;
  bool match;
};

// Cuts `p` at the given matches with the given behaviour, appending non-empty pieces to `out`.
void apply_behavior(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
                    Behavior behavior, std::vector<Piece>& out) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [a, b] : matches) {
    if (prev != a) spans.push_back({prev, a, invert});
    spans.push_back({a, b, !invert});
    prev = b;
  }
  if (prev != p.text.size()) spans.push_back({prev, p.text.size(), invert});

  std::vector<Span> merged;
  switch (behavior) {
    case Behavior::Isolated: merged.swap(spans); break;  // a copy here trips GCC 12 -O3 -Wfree-nonheap-object
    case Behavior::Removed:
      for (const auto& s : spans)
        if (!s.match) merged.push_back(s);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& s : spans) {
        if (s.match && !prev_match && !merged.empty()) merged.back().b = s.b;
        else merged.push_back(s);
        prev_match = s.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const auto& s = spans[k];
        if (s.match && !prev_match && !merged.empty()) merged.back().a = s.a;
        else merged.push_back(s);
        prev_match = s.match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (const auto& s : spans) {
        if (s.match == prev_match && !merged.empty()) merged.back().b = s.b;
        else merged.push_back(s);
        prev_match = s.match;
      }
      break;
    }
  }
  for (const auto& s : merged)
    if (s.b > s.a) out.push_back({p.text.substr(s.a, s.b - s.a), p.at_start && s.a == 0});
}

Behavior parse_behavior(const std::string& s, const std::string& where) {
  if (s == "Removed") return Behavior::Removed;
  if (s == "Isolated") return Behavior::Isolated;
  if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::MergedWithNext;
  if (s == "Contiguous") return Behavior::Contiguous;
  fail(where, ": unknown split behavior '", s, "'");
}

// Applies fn to each piece, collecting the non-empty results.
template <typename Fn>
void for_each_piece(std::vector<Piece>& pieces, Fn&& fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (const auto& p : pieces) fn(p, out);
  pieces.swap(out);
}

class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(const std::string& pattern, bool literal, Behavior b, bool invert, const std::string& where)
      : regex_(pattern, literal, where), behavior_(b), invert_(invert) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<std::pair<size_t, size_t>> m;
    for_each_piece(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      m.clear();
      regex_.find_all(p.text, m);
      apply_behavior(p, m, invert_, behavior_, out);
    });
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// Splits where pred(code point) holds, each such character being one match.
class CharSplit : public PreTokenizer {
 public:
  CharSplit(std::function<bool(int32_t)> pred, Behavior b) : pred_(std::move(pred)), behavior_(b) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<std::pair<size_t, size_t>> m;
    for_each_piece(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      m.clear();
      for (size_t i = 0; i < p.text.size();) {
        const size_t a = i;
        if (pred_(utf8_next(p.text, i))) m.emplace_back(a, i);
      }
      apply_behavior(p, m, false, behavior_, out);
    });
  }

 private:
  std::function<bool(int32_t)> pred_;
  Behavior behavior_;
};

// GPT-2's pre-tokenisation regex, used by ByteLevel when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, false, where);
  }
  void split(std::vector<Piece>& pieces) const override {
    const auto& map = ByteLevelMap::get();
    std::vector<std::pair<size_t, size_t>> m;
    for_each_piece(pieces, [&](const Piece& p0, std::vector<Piece>& out) {
      Piece p = p0;
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, 1, ' ');
      const size_t first = out.size();
      if (regex_) {
        m.clear();
        regex_->find_all(p.text, m);
        apply_behavior(p, m, false, Behavior::Isolated, out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
      for (size_t k = first; k < out.size(); ++k) out[k].text = map.encode(out[k].text);
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { Always, First, Never };
  Metaspace(std::string replacement, Prepend scheme, bool split)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void split(std::vector<Piece>& pieces) const override {
    for_each_piece(pieces, [&](const Piece& p0, std::vector<Piece>& out) {
      Piece p{"", p0.at_start};
      for (char c : p0.text) {
        if (c == ' ') p.text += rep_;
        else p.text += c;
      }
      const bool starts = p.text.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == Prepend::Always || (scheme_ == Prepend::First && p.at_start)))
        p.text.insert(0, rep_);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        return;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t pos = p.text.find(rep_); pos != std::string::npos; pos = p.text.find(rep_, pos + rep_.size()))
        m.emplace_back(pos, pos + rep_.size());
      apply_behavior(p, m, false, Behavior::MergedWithNext, out);
    });
  }

 private:
  std::string rep_;
  Prepend scheme_;
  bool split_;
};

class SequencePre : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& p : items) p->split(pieces);
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_string(json_field(j, "type", where), where + ".type");
  if (type == "Split") {
    bool is_regex = false;
    const std::string pat = json_pattern(json_field(j, "pattern", where), &is_regex, where + ".pattern");
    const Behavior b =
        parse_behavior(json_string(json_field(j, "behavior", where), where + ".behavior"), where + ".behavior");
    return std::make_unique<RegexSplit>(pat, !is_regex, b, json_bool(j, "invert", false, where), where + ".pattern");
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(json_bool(j, "add_prefix_space", true, where),
                                          json_bool(j, "use_regex", true, where), where);
  if (type == "Metaspace") {
    const std::string rep = json_string(json_field(j, "replacement", where), where + ".replacement");
    if (rep.empty() || utf8_valid_len(rep, 0) != rep.size()) fail(where, ".replacement: expected one character");
    Metaspace::Prepend scheme = Metaspace::Prepend::Always;
    if (const Json* s = json_opt(j, "prepend_scheme")) {
      const std::string v = json_string(*s, where + ".prepend_scheme");
      if (v == "always") scheme = Metaspace::Prepend::Always;
      else if (v == "first") scheme = Metaspace::Prepend::First;
      else if (v == "never") scheme = Metaspace::Prepend::Never;
      else fail(where, ".prepend_scheme: unknown value '", v, "'");
    } else if (!json_bool(j, "add_prefix_space", true, where)) {
      scheme = Metaspace::Prepend::Never;
    }
    return std::make_unique<Metaspace>(rep, scheme, json_bool(j, "split", true, where));
  }
  if (type == "Digits") {
    const bool each = json_bool(j, "individual_digits", false, where);
    return std::make_unique<CharSplit>(unicode_is_numeric, each ? Behavior::Isolated : Behavior::Contiguous);
  }
  if (type == "Whitespace")
    return std::make_unique<RegexSplit>(R"(\w+|[^\w\s]+)", false, Behavior::Removed, true, where);
  if (type == "WhitespaceSplit") return std::make_unique<CharSplit>(unicode_is_whitespace, Behavior::Removed);
  if (type == "Sequence") {
    const Json& list = json_field(j, "pretokenizers", where);
    if (!list.is_array()) fail(where, ".pretokenizers: expected an array");
    auto seq = std::make_unique<SequencePre>();
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list[i], cat(where, ".pretokenizers[", i, "]"));
      if (p) seq->items.push_back(std::move(p));
    }
    return seq;
  }
  fail(where, ": unsupported pre-tokenizer type '", type, "'");
}

}  // namespace moeflux
