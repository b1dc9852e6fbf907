// Tool-call parsing of the four formats.
#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

namespace moeflux {

namespace {

using Json = nlohmann::ordered_json;

const std::string kHermes = "<tool_call>", kHermesEnd = "</tool_call>";
const std::string kDsCalls = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kDsCall = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>", kDsSep = "<｜tool▁sep｜>";
const std::string kMistral = "[TOOL_CALLS]";

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

bool starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// A JSON object's text (compact), or nullopt.
std::optional<std::string> object_text(std::string_view s) {
  const Json j = Json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// {"name": N, "arguments": {...} or "{...}"} -> a ToolCall.
std::optional<ToolCall> from_json(const Json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
    return std::nullopt;
  ToolCall c{j["name"].get<std::string>(), "{}"};
  const Json args = j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : Json::object();
  if (args.is_object()) c.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  else if (args.is_string()) {
    const auto o = object_text(args.get<std::string>());
    if (!o) return std::nullopt;
    c.arguments = *o;
  } else {
    return std::nullopt;
  }
  return c;
}

// Qwen3-Coder's body: <function=N> <parameter=P>V</parameter>... </function>.
std::optional<ToolCall> from_xml(std::string_view body) {
  body = trim(body);
  if (!starts(body, "<function=")) return std::nullopt;
  const size_t gt = body.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  ToolCall c{std::string(body.substr(10, gt - 10)), ""};
  if (c.name.empty()) return std::nullopt;
  body = trim(body.substr(gt + 1));
  Json args = Json::object();
  while (starts(body, "<parameter=")) {
    const size_t pg = body.find('>'), end = body.find("</parameter>");
    if (pg == std::string_view::npos || end == std::string_view::npos || end < pg) return std::nullopt;
    const std::string name(body.substr(11, pg - 11));
    std::string_view v = body.substr(pg + 1, end - pg - 1);
    if (starts(v, "\n")) v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    const Json parsed = Json::parse(v, nullptr, false);
    args[name] = parsed.is_discarded() ? Json(std::string(v)) : parsed;
    body = trim(body.substr(end + 12));
  }
  if (!starts(body, "</function>") || !trim(body.substr(11)).empty()) return std::nullopt;
  c.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  return c;
}

std::optional<std::vector<ToolCall>> hermes(std::string_view s) {
  std::vector<ToolCall> calls;
  for (s = trim(s); !s.empty(); s = trim(s)) {
    if (!starts(s, kHermes)) return std::nullopt;
    s.remove_prefix(kHermes.size());
    const size_t end = s.find(kHermesEnd);
    const std::string_view body = trim(s.substr(0, end));
    std::optional<ToolCall> c;
    if (starts(body, "<function=")) c = from_xml(body);
    else c = from_json(Json::parse(body, nullptr, false));
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
    s = end == std::string_view::npos ? std::string_view() : s.substr(end + kHermesEnd.size());
  }
  return calls;
}

std::optional<std::vector<ToolCall>> deepseek(std::string_view s) {
  s.remove_prefix(kDsCalls.size());
  std::vector<ToolCall> calls;
  for (s = trim(s); !s.empty() && !starts(s, kDsCallsEnd); s = trim(s)) {
    if (!starts(s, kDsCall)) return std::nullopt;
    s.remove_prefix(kDsCall.size());
    const size_t end = s.find(kDsCallEnd);
    const std::string_view body = s.substr(0, end);
    s = end == std::string_view::npos ? std::string_view() : s.substr(end + kDsCallEnd.size());
    const size_t sep = body.find(kDsSep);
    if (sep == std::string_view::npos) return std::nullopt;
    std::string_view head = body.substr(0, sep), rest = body.substr(sep + kDsSep.size());
    ToolCall c;
    if (head == "function") {  // V3: the name, then the arguments in a ```json block
      const size_t nl = rest.find('\n');
      if (nl == std::string_view::npos) return std::nullopt;
      c.name = std::string(trim(rest.substr(0, nl)));
      rest = trim(rest.substr(nl + 1));
      if (starts(rest, "```json")) rest.remove_prefix(7);
      if (rest.size() >= 3 && rest.substr(rest.size() - 3) == "```") rest.remove_suffix(3);
    } else {  // V3.1: the name before the separator, the arguments after it
      c.name = std::string(trim(head));
    }
    const auto args = object_text(trim(rest));
    if (c.name.empty() || !args) return std::nullopt;
    c.arguments = *args;
    calls.push_back(std::move(c));
  }
  if (starts(s, kDsCallsEnd) && !trim(s.substr(kDsCallsEnd.size())).empty()) return std::nullopt;
  if (calls.empty()) return std::nullopt;
  return calls;
}

std::optional<std::vector<ToolCall>> mistral(std::string_view s) {
  const Json j = Json::parse(trim(s.substr(kMistral.size())), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const Json& e : j.is_array() ? j : Json::array({j})) {
    auto c = from_json(e);
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

const std::vector<std::string>& tool_call_openers() {
  static const std::vector<std::string> openers{kHermes, kDsCalls, kMistral};
  return openers;
}

std::optional<std::vector<ToolCall>> parse_tool_calls(std::string_view text) {
  const std::string_view t = trim(text);
  if (starts(t, kHermes)) return hermes(t);
  if (starts(t, kDsCalls)) return deepseek(t);
  if (starts(t, kMistral)) return mistral(t);
  return std::nullopt;
}

}  // namespace moeflux
