// libFuzzer target for the chat-template interpreter: the input is template text, rendered
// with a fixed Qwen3-style chat (messages, tools, namespace-friendly values) under small
// limits. Every failure must be a moeflux::Error; crashes, hangs, leaks and ASan reports are
// bugs. Build: cmake -DMOEFLUX_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++; run:
//   build-fuzz/fuzz/fuzz_template fuzz/corpus_template -max_total_time=300
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "template/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2? <tool_response>x</tool_response>"},
      {"role": "assistant", "content": "<think>\nsum\n</think>\n\n4.", "reasoning_content": null,
       "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2.5}}},
                      {"type": "function", "function": {"name": "neg", "arguments": "{\"x\": -1}"}}]},
      {"role": "tool", "content": "4"},
      {"role": "user", "content": "Caf\u00e9 \u5929\u6c14 \ud83c\udf27"}],
    "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
               "properties": {"a": {"type": "number"}}, "required": ["a"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "n": 3, "f": 1.5, "b": false,
    "documents": null
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  std::string text(reinterpret_cast<const char*>(data), size);
  moeflux::RenderLimits limits;
  limits.max_output = 1 << 20;
  limits.max_steps = 200000;
  limits.max_call_depth = 20;
  try {
    moeflux::render_template(text, context(), limits);
  } catch (const moeflux::Error&) {
  }
  return 0;
}
