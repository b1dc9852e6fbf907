// libFuzzer target: a prompt cache file (run --prompt-cache) parsed from its bytes into a
// snapshot. Any outcome but success or moeflux::Error is a bug.
// Seed corpus: fuzz/corpus_prompt_cache.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "engine/prompt_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)moeflux::parse_prompt_cache(data, size, "fuzz");
  } catch (const moeflux::Error&) {
  }
  return 0;
}
