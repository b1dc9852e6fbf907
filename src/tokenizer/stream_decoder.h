// Incremental detokenisation for streaming generation: fed one id at a time, it returns the
// new text once it is complete UTF-8 (not ending in U+FFFD). It decodes a short window of
// recent ids with the full decoder, so spaces come out right, and subtracts the decoded
// context. After the first emission the window starts with an anchor token (one that decodes
// to "a"), so decoder rules for the first token (Strip, Metaspace) act on the anchor as they
// would on earlier text. Runs of ByteFallback <0xNN> tokens are held until another token ends
// them (they decode as a whole). All pieces plus finish() equal Tokenizer::decode of all ids.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moeflux {

class Tokenizer;

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false);
  // Text completed by this id (possibly empty).
  std::string step(int32_t id);
  // Whatever is still held back (an incomplete or invalid UTF-8 tail); resets the stream.
  std::string finish();

 private:
  std::string decode_window() const;

  const Tokenizer& tok_;
  bool skip_special_;
  std::optional<int32_t> anchor_;
  bool started_ = false;      // something was emitted: the window no longer starts the text
  std::vector<int32_t> ids_;  // the window: context ids (already emitted), then pending ones
  std::string prefix_;        // decode of the context (with the anchor once started)
  size_t prefix_index_ = 0;   // ids_[0, prefix_index_) are the context
};

}  // namespace moeflux
