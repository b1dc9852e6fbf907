// Chat templates of real models: the tokenizer goldens (transformers' apply_chat_template on
// tests/data/tokenizers), hand-derived Qwen3 tool / reasoning renders, the cases of
// tests/data/template_cases.json against fixtures/template_goldens.json (made by
// scripts/template_golden.py), and the `moeflux template` command.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "template_test_util.h"
#include "util/test_util.h"

namespace moeflux::test {
namespace {

using J = nlohmann::ordered_json;

J read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << path;
  std::ostringstream ss;
  ss << f.rdbuf();
  return J::parse(ss.str());
}

std::string tokenizer_dir(const std::string& name) { return data_dir() + "/tokenizers/" + name; }

TEST(ChatTemplate, TokenizerGoldensByteIdentical) {
  J goldens = read_json(data_dir() + "/fixtures/tokenizer_goldens.json");
  int checked = 0;
  for (auto it = goldens.begin(); it != goldens.end(); ++it) {
    const J& g = it.value();
    auto templates = load_chat_templates(tokenizer_dir(it.key()));
    if (g.contains("chat_prompt")) {
      EXPECT_EQ(render_chat(templates, g["chat_messages"], nullptr, true), g["chat_prompt"].get<std::string>())
          << it.key();
      ++checked;
    } else {
      ASSERT_TRUE(g.contains("chat_error")) << it.key();
      try {
        render_chat(templates, g["chat_messages"], nullptr, true);
        ADD_FAILURE() << it.key() << ": expected an error for a tokenizer without a chat template";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_EQ(checked, 2);
}

TEST(ChatTemplate, ConfigVariants) {
  TempDir dir;
  auto write = [&](const std::string& text) {
    std::ofstream(dir.file("tokenizer_config.json")) << text;
  };
  write(R"({"chat_template": [{"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T{{ tools|length }}"}],
            "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": null})");
  auto t = load_chat_templates(dir.path());
  EXPECT_EQ(render_chat(t, J::array(), nullptr, false), "D<s>");
  EXPECT_EQ(render_chat(t, J::array(), J::array({J::object()}), false), "T1");
  write(R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THROW(load_chat_templates(dir.path()).pick(false), Error);
  write(R"({"chat_template": 5})");
  EXPECT_THROW(load_chat_templates(dir.path()), Error);
  write(R"({"chat_template": "x", "bos_token": 3})");
  EXPECT_THROW(load_chat_templates(dir.path()), Error);
  write("{not json");
  EXPECT_THROW(load_chat_templates(dir.path()), Error);
  EXPECT_THROW(load_chat_templates(dir.file("absent")), Error);
}

// Qwen3's template worked through by hand: tools in the system turn, tool calls with mapping
// arguments (tojson), consecutive tool results merged into one user turn, and the <think>
// block only on assistant turns after the last real user query.
TEST(ChatTemplate, Qwen3ToolsByHand) {
  auto t = load_chat_templates(tokenizer_dir("qwen3"));
  J tool = J::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})");
  J messages = J::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 20}"},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "It is 20C."}])");
  std::string want =
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\n"
      "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
      "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n{\"temp\": 20}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nIt is 20C.<|im_end|>\n";
  EXPECT_EQ(render_chat(t, messages, J::array({tool}), false), want);
}

TEST(ChatTemplate, Qwen3ReasoningByHand) {
  auto t = load_chat_templates(tokenizer_dir("qwen3"));
  // Reasoning of turns before the last user query is dropped; on the last turn it is kept,
  // whether it comes as reasoning_content or inside <think> in the content.
  J earlier = J::parse(R"([{"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
    {"role": "user", "content": "Bye"}])");
  EXPECT_EQ(render_chat(t, earlier, nullptr, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  J last_field = J::parse(R"([{"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "\nGreet back.\n"}])");
  EXPECT_EQ(render_chat(t, last_field, nullptr, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGreet back.\n</think>\n\nHello!<|im_end|>\n");
  J last_inline = J::parse(R"([{"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<think>\nPlan.\n</think>\n\nHello!"}])");
  EXPECT_EQ(render_chat(t, last_inline, nullptr, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nPlan.\n</think>\n\nHello!<|im_end|>\n");
  J one = J::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(render_chat(t, one, nullptr, true, J{{"enable_thinking", false}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, OtherFamiliesByHand) {
  J cases = read_json(data_dir() + "/template_cases.json")["cases"];
  auto find = [&](const std::string& name) {
    for (const auto& c : cases)
      if (c["name"] == name) return c;
    ADD_FAILURE() << "no case " << name;
    return J();
  };
  J msgs = J::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": " U "},
                        {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}])");
  EXPECT_EQ(render_chat(find("llama3")["template"].get<std::string>(), msgs, nullptr, true, J{{"bos_token", "<|begin_of_text|>"}}),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nV<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  J toks = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  EXPECT_EQ(render_chat(find("llama2_chat")["template"].get<std::string>(), msgs, nullptr, true, toks),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\n U [/INST] A </s><s>[INST] V [/INST]");
  const std::string mixtral = find("mixtral")["template"].get<std::string>();
  J no_sys(msgs.begin() + 1, msgs.end());
  EXPECT_EQ(render_chat(mixtral, no_sys, nullptr, true, toks), "<s>[INST]  U  [/INST]A</s>[INST] V [/INST]");
  try {
    render_chat(mixtral, msgs, nullptr, true, toks);
    ADD_FAILURE() << "expected raise_exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos);
  }
}

// Every case of template_cases.json, byte for byte against transformers' rendering.
TEST(ChatTemplate, CasesMatchTransformersGoldens) {
  const char* env = std::getenv("MOEFLUX_TEMPLATE_GOLDENS");
  std::string path = env ? env : data_dir() + "/fixtures/template_goldens.json";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " does not exist yet: run scripts/template_golden.py where transformers is installed";
  J goldens = read_json(path)["cases"];
  J cases = read_json(data_dir() + "/template_cases.json")["cases"];
  int compared = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    ASSERT_TRUE(goldens.contains(name)) << name;
    const J& g = goldens[name];
    auto templates = load_chat_templates(tokenizer_dir(c["tokenizer"]));
    if (c.contains("template")) templates.by_name = {{"default", c["template"].get<std::string>()}};
    J tools = c.contains("tools") ? c["tools"] : J();
    J extra = c.contains("extra") ? c["extra"] : J();
    bool agp = c.value("add_generation_prompt", false);
    if (g.contains("prompt")) {
      EXPECT_EQ(render_chat(templates, c["messages"], tools, agp, extra), g["prompt"].get<std::string>()) << name;
    } else {
      EXPECT_THROW(render_chat(templates, c["messages"], tools, agp, extra), Error) << name << ": " << g["error"];
    }
    ++compared;
  }
  EXPECT_EQ(compared, int(cases.size()));
}

TEST(ChatTemplate, CommandLine) {
  TempDir dir;
  J goldens = read_json(data_dir() + "/fixtures/tokenizer_goldens.json");
  std::ofstream(dir.file("messages.json")) << goldens["qwen3"]["chat_messages"].dump();
  std::string out;
  int rc = run_command(moeflux_exe() + " template --tokenizer " + tokenizer_dir("qwen3") + " --messages " +
                           dir.file("messages.json") + " --add-generation-prompt 2>/dev/null",
                       &out);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, goldens["qwen3"]["chat_prompt"].get<std::string>());
  rc = run_command(moeflux_exe() + " template --tokenizer " + tokenizer_dir("llama2") + " --messages " +
                       dir.file("messages.json"),
                   &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("no chat template"), std::string::npos) << out;
  std::ofstream(dir.file("bad.json")) << "[{";
  rc = run_command(moeflux_exe() + " template --tokenizer " + tokenizer_dir("qwen3") + " --messages " + dir.file("bad.json"), &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("invalid JSON"), std::string::npos) << out;
}

}  // namespace
}  // namespace moeflux::test
