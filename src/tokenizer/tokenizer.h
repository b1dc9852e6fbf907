// A Hugging Face tokenizer.json (plain or gzipped) as one object: added tokens, normalizer,
// pre-tokenizer, BPE model, post-processor (special tokens) and decoder. encode() and decode()
// reproduce the `tokenizers` library. Test: ctest -R Tokenizer; bench: bench_tokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocab.h"

namespace moeflux {

class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;
class PostProcessor;

class Tokenizer {
 public:
  // `path`: a tokenizer.json[.gz] file or a directory holding one.
  static Tokenizer load(const std::string& path);
  // `source` names the input in error messages.
  static Tokenizer from_json_text(std::string_view json, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Error if `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Unknown ids are skipped, as Hugging Face does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when unknown
  bool is_special(int32_t id) const;
  // True for <0xNN> tokens when the decoder has ByteFallback: a run of them is decoded as a
  // whole, so a streaming decoder must not emit text while such a run may still grow.
  bool is_fallback_byte(int32_t id) const;
  int32_t vocab_size() const;  // max id + 1 over the model and added tokens
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

 private:
  Tokenizer();
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocab added_;
  std::vector<int32_t> added_index_;
  bool byte_fallback_decoder_ = false;  // id -> index into added tokens, -1 when not added
};

}  // namespace moeflux
