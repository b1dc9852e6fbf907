// The models and backends the engine tests run on: every architecture and format of the
// fixture suite, its variants and the demo model (mapped, and streaming its experts through a
// small cache), loaded for a named backend; token ids valid for each.
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/model.h"
#include "stream/streaming.h"
#include "util/test_util.h"

namespace moeflux::test {

inline const std::string kDemo = "demo";                   // models/demo-qwen3-moe-q4, its experts mapped
inline const std::string kDemoStreamed = "demo_streamed";  // ... through an expert cache of 25% of them

inline std::string demo_dir() { return std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4"; }

// Model `name` for the backend named `backend` (backend/registry.h).
inline std::unique_ptr<Model> load(const std::string& name, const std::string& backend = "cpu") {
  BackendOptions bo;
  bo.name = backend;
  if (name == kDemo) return load_model(demo_dir(), MapMode::Map, make_backend(bo));
  if (name == kDemoStreamed) {
    StreamOptions o;
    o.budget = "25%";
    auto m = load_model(demo_dir(), o, make_backend(bo));
    EXPECT_NE(expert_cache(*m), nullptr);
    return m;
  }
  return load_model(fixture_dir(name), MapMode::Map, make_backend(bo));
}

// Token ids valid for the model: the golden's (fixtures), or spread over the vocabulary (demo).
inline std::vector<int32_t> base_ids(const std::string& name, const Model& m) {
  if (name == kDemo || name == kDemoStreamed) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 24; ++i) ids.push_back(int32_t((101 + 977 * i) % m.cfg.vocab_size));
    return ids;
  }
  return load_golden(fixture_dir(name) + "/golden.safetensors").i32.at("input_ids");
}

// A model on a backend.
struct Case {
  std::string model, backend;
};
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " on " << c.backend; }

// cuda runs where a GPU is usable, else its cases skip.
#define SKIP_UNUSABLE_BACKEND()                                                  \
  if (std::string why; !backend_usable(GetParam().backend, &why)) GTEST_SKIP() << why

inline std::string safe_name(std::string n) {
  for (auto& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// Every architecture and format of the fixture suite (tests/model/test_fixtures.cpp), its
// variants, and the demo model (mapped and streamed).
inline const std::vector<std::string> kFixtures{"qwen3_moe",        "qwen3_moe/q4",       "mixtral",         "mixtral/q4",
                                         "deepseek_v3",      "deepseek_v3/q4",     "deepseek_v3/fp8", "qwen3_next/q4",
                                         "qwen3_5_moe_text", "qwen3_5_moe_text/q4"};
inline const std::vector<std::string> kVariants{"variants/qwen3_moe/q4", "variants/mixtral/q4", "variants/qwen3_next/q4",
                                         "variants/qwen3_5_moe_text/q4", "variants/deepseek_v3/q4"};
inline const std::vector<std::string> kDemos{kDemo, kDemoStreamed};

inline std::vector<Case> on(const std::string& backend, const std::vector<std::string>& models) {
  std::vector<Case> v;
  for (const auto& m : models) v.push_back({m, backend});
  return v;
}
inline std::string case_name(const ::testing::TestParamInfo<Case>& info) { return safe_name(info.param.model); }

}  // namespace moeflux::test
