// Tokenizer: loading tokenizer.json and the encode / decode pipelines.
// encode: added tokens (raw) -> normalizer -> added tokens (normalised) -> pre-tokenizer ->
// BPE per piece [-> post-processor]. decode: ids -> token strings -> decoder chain -> concat.
#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace moeflux {

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    file.clear();
    for (const char* name : {"tokenizer.json", "tokenizer.json.gz"})
      if (fs::exists(fs::path(path) / name, ec)) {
        file = (fs::path(path) / name).string();
        break;
      }
    if (file.empty()) fail(path, ": no tokenizer.json or tokenizer.json.gz in this directory");
  }
  return from_json_text(read_maybe_gzip(file), file);
}

Tokenizer Tokenizer::from_json_text(std::string_view text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    fail(source, ": invalid JSON at byte ", e.byte, ": ", e.what());
  } catch (const Json::exception& e) {  // e.g. out_of_range for a number that overflows
    fail(source, ": invalid JSON: ", e.what());
  }
  Tokenizer t;
  try {
    if (!root.is_object()) fail(source, ": expected a JSON object");
    const Json& model = json_field(root, "model", source);
    if (const Json* type = json_opt(model, "type")) {
      const std::string ty = json_string(*type, source + ".model.type");
      if (ty != "BPE") fail(source, ".model.type: unsupported model '", ty, "' (only BPE)");
    }
    t.model_ = BpeModel::from_json(model, source + ".model");
    const auto null = Json();
    const auto opt = [&](const char* key) -> const Json& {
      const Json* v = json_opt(root, key);
      return v ? *v : null;
    };
    t.normalizer_ = make_normalizer(opt("normalizer"), source + ".normalizer");
    t.pre_tokenizer_ = make_pre_tokenizer(opt("pre_tokenizer"), source + ".pre_tokenizer");
    t.post_ = make_post_processor(opt("post_processor"), source + ".post_processor");
    t.decoder_ = make_decoder(opt("decoder"), source + ".decoder");
    t.byte_fallback_decoder_ = opt("decoder").dump().find("\"ByteFallback\"") != std::string::npos;

    std::vector<AddedToken> added;
    int32_t limit = t.model_->id_limit();
    if (const Json* list = json_opt(root, "added_tokens")) {
      if (!list->is_array()) fail(source, ".added_tokens: expected an array");
      for (size_t k = 0; k < list->size(); ++k) {
        const Json& e = (*list)[k];
        const std::string at = cat(source, ".added_tokens[", k, "]");
        AddedToken a;
        const int64_t id = json_int(json_field(e, "id", at), at + ".id");
        if (id < 0 || id >= static_cast<int64_t>(t.model_->id_limit()) + (1 << 20)) fail(at, ".id: ", id, " out of range");
        a.id = static_cast<int32_t>(id);
        a.content = json_string(json_field(e, "content", at), at + ".content");
        a.lstrip = json_bool(e, "lstrip", false, at);
        a.rstrip = json_bool(e, "rstrip", false, at);
        a.single_word = json_bool(e, "single_word", false, at);
        a.normalized = json_bool(e, "normalized", true, at);
        a.special = json_bool(e, "special", false, at);
        limit = std::max(limit, a.id + 1);
        added.push_back(std::move(a));
      }
    }
    t.added_index_.assign(static_cast<size_t>(limit), -1);
    for (size_t k = 0; k < added.size(); ++k)
      if (t.added_index_[static_cast<size_t>(added[k].id)] < 0)
        t.added_index_[static_cast<size_t>(added[k].id)] = static_cast<int32_t>(k);
    t.added_.build(std::move(added), t.normalizer_.get());
  } catch (const Json::exception& e) {
    fail(source, ": malformed tokenizer: ", e.what());
  }
  return t;
}

void Tokenizer::encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  std::vector<Piece> pieces{{std::string(text), at_start}};
  if (pre_tokenizer_) pre_tokenizer_->split(pieces);
  for (const auto& p : pieces)
    if (!p.text.empty()) model_->encode_word(p.text, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const size_t bad = utf8_first_invalid(text); bad != std::string_view::npos)
    fail("tokenizer: input text is not valid UTF-8 at byte offset ", bad);
  std::vector<int32_t> ids;
  std::vector<Segment> raw, inner;
  added_.raw_matcher().split(text, added_.tokens(), raw);
  for (const Segment& seg : raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string norm = normalizer_ ? normalizer_->normalize(std::string(seg.text)) : std::string(seg.text);
    if (added_.normalized_matcher().empty()) {
      encode_text(norm, seg.offset == 0, ids);
      continue;
    }
    inner.clear();
    added_.normalized_matcher().split(norm, added_.tokens(), inner);
    for (const Segment& s : inner) {
      if (s.id >= 0) ids.push_back(s.id);
      else encode_text(s.text, seg.offset == 0 && s.offset == 0, ids);
    }
  }
  if (add_special_tokens && post_) ids = post_->process(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    if (const std::string* t = id_to_token(id)) tokens.push_back(*t);
  }
  if (!decoder_) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : added_.tokens())
    if (a.content == token) return a.id;
  return model_->token_to_id(token);
}

const std::string* Tokenizer::id_to_token(int32_t id) const {
  if (id >= 0 && id < static_cast<int32_t>(added_index_.size()) && added_index_[static_cast<size_t>(id)] >= 0)
    return &added_.tokens()[static_cast<size_t>(added_index_[static_cast<size_t>(id)])].content;
  return model_->id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(added_index_.size()) || added_index_[static_cast<size_t>(id)] < 0) return false;
  return added_.tokens()[static_cast<size_t>(added_index_[static_cast<size_t>(id)])].special;
}

bool Tokenizer::is_fallback_byte(int32_t id) const {
  if (!byte_fallback_decoder_) return false;
  const std::string* t = id_to_token(id);
  return t && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(added_index_.size()); }

}  // namespace moeflux
