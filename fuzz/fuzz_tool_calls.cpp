// libFuzzer target: a model's answer parsed for tool calls (moeflux serve, requests with tools):
// nullopt or calls whose arguments are JSON objects. Any other outcome is a bug.
// Seed corpus: fuzz/corpus_tool_calls.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto calls = moeflux::parse_tool_calls(text))
    for (const auto& c : *calls) {
      const auto j = nlohmann::json::parse(c.arguments, nullptr, false);
      if (c.name.empty() || j.is_discarded() || !j.is_object()) std::abort();
    }
  return 0;
}
