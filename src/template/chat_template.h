// Chat templates rendered the way transformers' apply_chat_template renders them: a jinja2
// subset interpreter (lexer.cpp, parser.cpp, renderer.cpp, filters.cpp, access.cpp) run with
// trim_blocks + lstrip_blocks, raise_exception / strftime_now globals and transformers' tojson.
// Tested by tests/template (goldens from scripts/template_golden.py); fuzzed by fuzz/fuzz_template.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "template/renderer.h"

namespace moeflux {

using tpl::RenderLimits;

// Renders `template_text` with `context` (a JSON object) as its variables.
std::string render_template(const std::string& template_text, const nlohmann::ordered_json& context,
                            const RenderLimits& limits = {});

// The chat-template part of a tokenizer directory: tokenizer_config.json's chat_template
// (a string, or a list of {name, template}) or a chat_template.jinja file beside it, and the
// special tokens that apply_chat_template passes to the template (bos_token, eos_token, ...).
struct ChatTemplates {
  std::string source;                          // where the templates came from (for messages)
  std::map<std::string, std::string> by_name;  // "default" for a single template
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  // The template transformers picks: "tool_use" when tools are given and it exists, else
  // "default". Raises Error when there is none.
  const std::string& pick(bool have_tools) const;
};

// `path` is a tokenizer directory or its tokenizer_config.json.
ChatTemplates load_chat_templates(const std::string& path);

// apply_chat_template(messages, tools=tools, add_generation_prompt=...) with `extra` (a JSON
// object, may be null) merged over the special tokens, e.g. {"enable_thinking": false}.
// `tools` null means no tools (the template sees tools=None).
std::string render_chat(const std::string& template_text, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra = nullptr, const RenderLimits& limits = {});
std::string render_chat(const ChatTemplates& templates, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra = nullptr, const RenderLimits& limits = {});

}  // namespace moeflux
