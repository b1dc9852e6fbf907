// Request bodies: JSON -> CompletionRequest, checked field by field.
#include "server/api_request.h"

#include <algorithm>

namespace moeflux {

using Json = nlohmann::ordered_json;

std::string ApiError::json() const {
  Json e = {{"error", {{"message", what()}, {"type", type}, {"param", param.empty() ? Json() : Json(param)}, {"code", nullptr}}}};
  return e.dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {

const Json* field(const Json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const Json& j, const char* name, double lo, double hi) {
  if (!j.is_number()) throw ApiError(400, std::string("'") + name + "' must be a number", name);
  const double v = j.get<double>();
  if (!(v >= lo && v <= hi))
    throw ApiError(400, std::string("'") + name + "' must be between " + Json(lo).dump() + " and " + Json(hi).dump(), name);
  return v;
}

int64_t integer(const Json& j, const char* name, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) throw ApiError(400, std::string("'") + name + "' must be an integer", name);
  const int64_t v = j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : j.get<int64_t>();
  if (v < lo || v > hi)
    throw ApiError(400, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), name);
  return v;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string content_text(const Json& c, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw ApiError(400, "'" + param + "' must be a string or an array of text parts", param);
  std::string text;
  for (const Json& part : c) {
    if (!part.is_object() || part.value("type", Json()) != "text" || !part.contains("text") || !part["text"].is_string())
      throw ApiError(400, "'" + param + "' parts must be {\"type\": \"text\", \"text\": string}", param);
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

SamplingParams openai_sampling_defaults() {
  SamplingParams p;
  p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f;
  return p;
}

CompletionRequest parse_completion_request(std::string_view body, bool chat, const SamplingParams& defaults) {
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  r.sampling = defaults;
  if (const Json* m = field(j, "model")) {
    if (!m->is_string()) throw ApiError(400, "'model' must be a string", "model");
    r.model = m->get<std::string>();
  }
  if (chat) {
    const Json* ms = field(j, "messages");
    if (!ms || !ms->is_array() || ms->empty()) throw ApiError(400, "'messages' must be a non-empty array", "messages");
    for (size_t i = 0; i < ms->size(); ++i) {
      const Json& m = (*ms)[i];
      const std::string p = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) throw ApiError(400, "'" + p + "' must be an object", p);
      const Json* role = field(m, "role");
      if (!role || !role->is_string()) throw ApiError(400, "'" + p + ".role' must be a string", p + ".role");
      const std::string rs = role->get<std::string>();
      if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer")
        throw ApiError(400, "'" + p + ".role' must be system, developer, user, assistant or tool (not '" + rs + "')", p + ".role");
      Json out = m;  // tool_calls, name, tool_call_id reach the template as given
      out["role"] = rs == "developer" ? "system" : rs;
      const Json* c = field(m, "content");
      if (c) out["content"] = content_text(*c, i);
      else if (rs != "assistant") throw ApiError(400, "'" + p + ".content' is missing", p + ".content");
      r.messages.push_back(std::move(out));
    }
    if (const Json* t = field(j, "tools")) {
      if (!t->is_array()) throw ApiError(400, "'tools' must be an array", "tools");
      for (const Json& tool : *t)
        if (!tool.is_object()) throw ApiError(400, "'tools' must be an array of objects", "tools");
      r.tools = *t;
    }
    if (const Json* c = field(j, "tool_choice")) {
      const bool named = c->is_object() && c->contains("type") && (*c)["type"] == "function" && c->contains("function") &&
                         (*c)["function"].is_object() && (*c)["function"].contains("name") &&
                         (*c)["function"]["name"].is_string();
      const std::string s = c->is_string() ? c->get<std::string>() : "";
      if (!named && s != "auto" && s != "none" && s != "required")
        throw ApiError(400, "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                       "tool_choice");
      r.tool_choice = s == "none" ? "none" : "auto";
    }
  } else {
    const Json* p = field(j, "prompt");
    if (p && p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (!p || !p->is_string()) throw ApiError(400, "'prompt' must be a string", "prompt");
    r.prompt = p->get<std::string>();
  }
  for (const char* name : {"max_completion_tokens", "max_tokens"})
    if (const Json* v = field(j, name)) r.max_tokens = int(integer(*v, name, 1, 1 << 24));
  if (const Json* v = field(j, "temperature")) r.sampling.temperature = float(number(*v, "temperature", 0, 2));
  if (const Json* v = field(j, "top_p")) r.sampling.top_p = float(number(*v, "top_p", 1e-6, 1));
  if (const Json* v = field(j, "top_k")) r.sampling.top_k = int(integer(*v, "top_k", 0, 1 << 20));
  if (const Json* v = field(j, "min_p")) r.sampling.min_p = float(number(*v, "min_p", 0, 1));
  if (const Json* v = field(j, "presence_penalty")) r.sampling.presence_penalty = float(number(*v, "presence_penalty", -2, 2));
  if (const Json* v = field(j, "frequency_penalty"))
    r.sampling.frequency_penalty = float(number(*v, "frequency_penalty", -2, 2));
  if (const Json* v = field(j, "seed")) r.sampling.seed = uint64_t(integer(*v, "seed", INT64_MIN, INT64_MAX)), r.seeded = true;
  if (const Json* v = field(j, "stop")) {
    if (v->is_string()) r.stop.push_back(v->get<std::string>());
    else if (v->is_array() && v->size() <= 4) {
      for (const Json& s : *v) {
        if (!s.is_string()) throw ApiError(400, "'stop' must be a string or an array of up to 4 strings", "stop");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      throw ApiError(400, "'stop' must be a string or an array of up to 4 strings", "stop");
    }
    for (const auto& s : r.stop)
      if (s.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop");
  }
  if (const Json* v = field(j, "stream")) {
    if (!v->is_boolean()) throw ApiError(400, "'stream' must be a boolean", "stream");
    r.stream = v->get<bool>();
  }
  if (const Json* v = field(j, "stream_options")) {
    if (!v->is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    if (const Json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) throw ApiError(400, "'stream_options.include_usage' must be a boolean", "stream_options");
      r.include_usage = u->get<bool>();
    }
  }
  if (const Json* v = field(j, "logit_bias"); v && !v->is_null()) {
    if (!v->is_object() || v->size() > 1024)
      throw ApiError(400, "'logit_bias' must be an object of up to 1024 token ids and biases", "logit_bias");
    for (const auto& [key, bias] : v->items()) {
      const bool digits = !key.empty() && key.size() <= 9 &&
                          std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || !bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100))
        throw ApiError(400, "'logit_bias' maps token ids (\"123\") to numbers in [-100, 100]; not '" + key + "'",
                       "logit_bias");
      r.sampling.logit_bias.emplace_back(int32_t(std::stol(key)), bias.get<float>());
    }
  }
  if (const Json* v = field(j, "response_format")) {  // constrained output is not done: say so
    const Json* t = v->is_object() ? field(*v, "type") : nullptr;
    if (!t || !t->is_string()) throw ApiError(400, "'response_format' must be an object with a 'type'", "response_format");
    if (*t != "text")
      throw ApiError(400, "'response_format' " + t->get<std::string>() + " is not supported (only \"text\")",
                     "response_format");
  }
  if (const Json* v = field(j, "n"); v && integer(*v, "n", 1, 1 << 20) != 1)
    throw ApiError(400, "'n' above 1 is not supported", "n");
  if (chat) {
    const Json* lp = field(j, "logprobs");
    if (lp && !lp->is_boolean()) throw ApiError(400, "'logprobs' must be a boolean", "logprobs");
    const bool on = lp && lp->get<bool>();
    if (const Json* t = field(j, "top_logprobs")) {
      if (!on) throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
      r.logprobs = int(integer(*t, "top_logprobs", 0, 20));
    } else if (on) {
      r.logprobs = 0;
    }
  } else if (const Json* lp = field(j, "logprobs")) {
    r.logprobs = int(integer(*lp, "logprobs", 0, 5));
  }
  return r;
}

}  // namespace moeflux
