// libFuzzer target: tokenizer.json parsing, then encode and decode of a short text, must never
// crash (moeflux::Error is the expected failure). The input is "text\0json"; without a NUL the
// whole input is the JSON and a fixed text is encoded. Build: -DMOEFLUX_FUZZ=ON with clang++;
// run: build-fuzz/fuzz/fuzz_tokenizer_json -max_len=4096 fuzz/corpus_tokenizer
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view text = "Hello, world! 123  <s> \xC3\xA9\xF0\x9F\x91\x8D\n", json = in;
  if (const size_t nul = in.find('\0'); nul != std::string_view::npos) {
    text = in.substr(0, nul);
    json = in.substr(nul + 1);
  }
  try {
    const auto tok = moeflux::Tokenizer::from_json_text(json, "fuzz");
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(text);
    } catch (const moeflux::Error&) {
      ids = tok.encode("plain text, 42 words");
    }
    ids.push_back(static_cast<int32_t>(size));  // maybe unknown
    ids.push_back(-7);
    const std::string all = tok.decode(ids, size % 2 == 0);
    moeflux::StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.step(id);
    streamed += stream.finish();
    if (const std::string batch = tok.decode(ids); streamed != batch) {  // streaming must equal batch decoding
      std::fprintf(stderr, "stream/batch mismatch\n ids:");
      for (int32_t id : ids) std::fprintf(stderr, " %d", id);
      std::fprintf(stderr, "\n streamed: [%s]\n batch:    [%s]\n", streamed.c_str(), batch.c_str());
      __builtin_trap();
    }
  } catch (const moeflux::Error&) {
  }
  return 0;
}
