// `moeflux template`: render a chat with a tokenizer's chat template, as transformers'
// apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False) does,
// and print the prompt text (no trailing newline is added).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "template/chat_template.h"

namespace moeflux::cli {

namespace {
struct TemplateArgs {
  std::string tokenizer, messages, tools, context;
  bool add_generation_prompt = false;
};

nlohmann::ordered_json read_json(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(what, " file ", path, ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::ordered_json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail(what, " file ", path, ": invalid JSON: ", e.what());
  }
}
}  // namespace

Runner register_template(CLI::App& app) {
  auto a = std::make_shared<TemplateArgs>();
  auto* sub = app.add_subcommand("template", "Render a chat with the tokenizer's chat template and print the prompt");
  sub->add_option("--tokenizer", a->tokenizer, "Tokenizer directory (tokenizer_config.json)")->required();
  sub->add_option("--messages", a->messages, "JSON file: list of {role, content, ...} messages")->required();
  sub->add_option("--tools", a->tools, "JSON file: list of tool schemas");
  sub->add_option("--context", a->context, "JSON file: object of extra template variables, e.g. {\"enable_thinking\": false}");
  sub->add_flag("--add-generation-prompt", a->add_generation_prompt, "End with the assistant turn's header");
  return [a]() {
    auto templates = load_chat_templates(a->tokenizer);
    auto messages = read_json(a->messages, "--messages");
    if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
    if (!messages.is_array()) fail("--messages file ", a->messages, ": expected a JSON list of messages");
    nlohmann::ordered_json tools = a->tools.empty() ? nlohmann::ordered_json() : read_json(a->tools, "--tools");
    if (!tools.is_null() && !tools.is_array()) fail("--tools file ", a->tools, ": expected a JSON list");
    nlohmann::ordered_json extra = a->context.empty() ? nlohmann::ordered_json() : read_json(a->context, "--context");
    std::string prompt = render_chat(templates, messages, tools, a->add_generation_prompt, extra);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
    return 0;
  };
}

}  // namespace moeflux::cli
