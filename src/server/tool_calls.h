// Tool calls in a model's answer, in the formats of the chat templates moeflux serves:
//   Qwen3 / Hermes:  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>  (repeated)
//   Qwen3-Coder:     <tool_call>\n<function=N>\n<parameter=P>\nV\n</parameter>\n</function>\n</tool_call>
//   DeepSeek-V3:     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>...
//                    (V3.1: <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>)
//   Mistral:         [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]
// The model's text is untrusted: fuzz/fuzz_tool_calls.cpp.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moeflux {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI's function.arguments
};

// The markers that open the tool calls of an answer.
const std::vector<std::string>& tool_call_openers();

// The calls in `text`, which starts with one of tool_call_openers() and runs to the answer's
// end (a missing last closing marker is accepted); nullopt when it is not well-formed calls
// (the caller then reports the text as content).
std::optional<std::vector<ToolCall>> parse_tool_calls(std::string_view text);

}  // namespace moeflux
