// Incremental detokenisation for streaming generation: fed one id at a time, it returns the
// new text once it is complete UTF-8 (not ending in U+FFFD), decoding a short window of recent
// ids with the full decoder so spaces come out right. Runs of ByteFallback <0xNN> tokens are held
// until another token ends them (they decode as a whole). The concatenation of all pieces plus
// finish() equals Tokenizer::decode of all ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeflux {

class Tokenizer;

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false)
      : tok_(tok), skip_special_(skip_special_tokens) {}
  // Text completed by this id (possibly empty).
  std::string step(int32_t id);
  // Whatever is still held back (an incomplete or invalid UTF-8 tail); resets the stream.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // the window: already-emitted context ids, then pending ones
  std::string prefix_;        // decode of the context ids
  size_t prefix_index_ = 0;   // ids_[0, prefix_index_) are the context
};

}  // namespace moeflux
