// Chat-template entry points (see chat_template.h): loading templates from a tokenizer
// directory and building apply_chat_template's render context.
#include "template/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "template/ast.h"

namespace moeflux {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// bos_token etc. are strings, null, or AddedToken objects {"content": ...}.
std::optional<std::string> token_text(const nlohmann::ordered_json& v, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  fail(where, ": expected a string or an object with a string 'content'");
}

}  // namespace

std::string render_template(const std::string& template_text, const nlohmann::ordered_json& context,
                            const RenderLimits& limits) {
  if (!context.is_object()) fail("template context must be a JSON object");
  auto tpl = tpl::parse_template(template_text);
  tpl::Renderer r(*tpl, limits);
  return r.render(tpl::from_json(context));
}

const std::string& ChatTemplates::pick(bool have_tools) const {
  if (have_tools && by_name.count("tool_use")) return by_name.at("tool_use");
  auto it = by_name.find("default");
  if (it != by_name.end()) return it->second;
  if (by_name.empty())
    fail(source, ": no chat template (tokenizer_config.json has no 'chat_template' and there is no chat_template.jinja)");
  fail(source, ": this tokenizer has several chat templates and none named 'default'");
}

ChatTemplates load_chat_templates(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  fs::path cfg_path = fs::is_directory(path) ? dir / "tokenizer_config.json" : fs::path(path);
  ChatTemplates out;
  out.source = cfg_path.string();
  nlohmann::ordered_json cfg;
  try {
    cfg = nlohmann::ordered_json::parse(read_text(cfg_path.string()));
  } catch (const nlohmann::json::exception& e) {
    fail(cfg_path.string(), ": invalid JSON: ", e.what());
  }
  if (!cfg.is_object()) fail(cfg_path.string(), ": expected a JSON object");
  if (cfg.contains("chat_template")) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
      out.by_name["default"] = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (size_t k = 0; k < ct.size(); ++k) {
        const auto& e = ct[k];
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
            !e["template"].is_string())
          fail(cfg_path.string(), ": chat_template[", k, "] must be {\"name\": string, \"template\": string}");
        out.by_name[e["name"].get<std::string>()] = e["template"].get<std::string>();
      }
    } else if (!ct.is_null()) {
      fail(cfg_path.string(), ": chat_template must be a string or a list of {name, template}");
    }
  }
  // Newer checkpoints ship the template as a separate file, which transformers prefers.
  fs::path jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja)) {
    out.by_name["default"] = read_text(jinja.string());
    out.source = jinja.string();
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!cfg.contains(key)) continue;
    if (auto t = token_text(cfg[key], cfg_path.string() + ": " + key)) out.special_tokens[key] = *t;
  }
  if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : cfg["additional_special_tokens"])
      if (auto s = token_text(t, cfg_path.string() + ": additional_special_tokens")) list.push_back(*s);
    out.special_tokens["additional_special_tokens"] = list;
  }
  return out;
}

std::string render_chat(const std::string& template_text, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra, const RenderLimits& limits) {
  if (!messages.is_array()) fail("chat messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) fail("chat tools must be a JSON array");
  if (!extra.is_null() && !extra.is_object()) fail("extra chat template variables must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  // transformers: render(messages=..., tools=..., documents=None, add_generation_prompt=..., **kwargs)
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  return render_template(template_text, ctx, limits);
}

std::string render_chat(const ChatTemplates& templates, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra, const RenderLimits& limits) {
  nlohmann::ordered_json ctx = templates.special_tokens;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  else if (!extra.is_null())
    fail("extra chat template variables must be a JSON object");
  return render_chat(templates.pick(!tools.is_null()), messages, tools, add_generation_prompt, ctx, limits);
}

}  // namespace moeflux
