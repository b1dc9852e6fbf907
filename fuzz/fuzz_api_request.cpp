// libFuzzer target: the OpenAI-compatible request bodies of `moeflux serve` (chat and text
// completions). Any input must give a CompletionRequest or an ApiError (an HTTP 4xx).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {true, false}) {
    try {
      moeflux::parse_completion_request(body, chat);
    } catch (const moeflux::ApiError& e) {
      if (e.status < 400 || e.status >= 500) __builtin_trap();
    }
  }
  return 0;
}
