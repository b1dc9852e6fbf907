// Decoders of tokenizer.json ("decoder"): ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, Sequence. Each rewrites the list of token strings, as Hugging Face's decode_chain;
// the final text is their concatenation.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace moeflux {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where);

}  // namespace moeflux
