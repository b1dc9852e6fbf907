// Shorthands for the template tests: render a template string with a JSON context.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "template/chat_template.h"

namespace moeflux::test {

inline std::string render(const std::string& tpl, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return render_template(tpl, ctx);
}

// The message of the moeflux::Error that rendering raises ("" and a test failure if none).
inline std::string render_error(const std::string& tpl, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                                const RenderLimits& limits = {}) {
  try {
    std::string out = render_template(tpl, ctx, limits);
    ADD_FAILURE() << "expected an error, rendered: " << out;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace moeflux::test
