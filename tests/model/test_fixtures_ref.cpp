// The fixture suite's short goldens through the reference backend (--backend ref): prefill
// logits and hidden states, token-by-token decode and the greedy continuation of every
// architecture and weight format, as transformers computed them. The CPU backend runs the
// whole suite (test_fixtures.cpp); this checks that the spec itself is the model.
#include <gtest/gtest.h>

#include "backend/registry.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "model/model.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

constexpr double kTol = 1e-4;

class RefFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    BackendOptions o;
    o.name = "ref";
    model_ = load_model(test::fixture_dir(GetParam()), MapMode::Map, make_backend(o));
    ASSERT_STREQ(model_->backend->name(), "ref");
  }
  std::unique_ptr<Model> model_;
};

TEST_P(RefFixtureTest, PrefillDecodeAndGreedyMatchTheGolden) {
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  const auto& ids = g.i32.at("input_ids");
  Session s(*model_);
  std::vector<float> hidden;
  EXPECT_LE(test::rel_l2(s.forward(ids, {.all_logits = true, .hidden = &hidden}), g.f32.at("logits")), kTol);
  const auto& gh = g.f32.at("hidden");
  ASSERT_EQ(hidden.size(), gh.size());
  const size_t per = ids.size() * size_t(model_->cfg.dim);
  for (size_t l = 0; l * per < gh.size(); ++l)
    EXPECT_LE(test::rel_l2(hidden.data() + l * per, gh.data() + l * per, per), kTol) << "hidden state " << l;
  s.reset();
  std::vector<float> logits;
  for (int32_t id : ids) {
    auto l = s.forward(std::span<const int32_t>(&id, 1));
    logits.insert(logits.end(), l.begin(), l.end());
  }
  EXPECT_LE(test::rel_l2(logits, g.f32.at("logits")), kTol);
  s.reset();
  const auto& want = g.i32.at("gen_ids");
  EXPECT_EQ(greedy_generate(s, g.i32.at("gen_prompt"), int(want.size())), want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RefFixtureTest,
                         ::testing::Values("qwen3_moe", "qwen3_moe/q4", "mixtral", "mixtral/q4", "deepseek_v3",
                                           "deepseek_v3/q4", "deepseek_v3/fp8", "qwen3_next/q4", "qwen3_5_moe_text",
                                           "qwen3_5_moe_text/q4", "variants/qwen3_moe/q4", "variants/mixtral/q4",
                                           "variants/qwen3_next/q4", "variants/qwen3_5_moe_text/q4",
                                           "variants/deepseek_v3/q4"),
                         test::param_name);

}  // namespace
}  // namespace moeflux
