// Whole-model tests against the Hugging Face goldens (tests/data/fixtures): logits of a
// prefill and of token-by-token decode, per-layer hidden states, greedy continuations, on the
// 24-token and the 160-token sequences. Tolerance: relative L2 1e-4 (the bound).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/generate.h"
#include "engine/session.h"
#include "model/model.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

constexpr double kTol = 1e-4;

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = load_model(test::fixture_dir(GetParam())); }
  std::unique_ptr<Model> model_;
};

TEST_P(FixtureTest, PrefillLogitsAndHiddenStates) {
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  const auto& ids = g.i32.at("input_ids");
  Session s(*model_);
  std::vector<float> hidden;
  auto logits = s.forward(ids, {.all_logits = true, .hidden = &hidden});
  EXPECT_LE(test::rel_l2(logits, g.f32.at("logits")), kTol);
  const auto& gh = g.f32.at("hidden");
  ASSERT_EQ(hidden.size(), gh.size());
  const size_t per = size_t(ids.size()) * size_t(model_->cfg.dim);
  for (size_t l = 0; l * per < gh.size(); ++l)
    EXPECT_LE(test::rel_l2(hidden.data() + l * per, gh.data() + l * per, per), kTol) << "hidden state " << l;
}

TEST_P(FixtureTest, DecodeMatchesPrefillGolden) {
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  const auto& ids = g.i32.at("input_ids");
  Session s(*model_);
  std::vector<float> logits;
  for (int32_t id : ids) {
    auto l = s.forward(std::span<const int32_t>(&id, 1));
    logits.insert(logits.end(), l.begin(), l.end());
  }
  EXPECT_LE(test::rel_l2(logits, g.f32.at("logits")), kTol);
}

// Layers keep their batch buffers from one prompt to the next (backend/cpu/batch_buffers.h):
// a prompt's logits must not depend on what longer or different prompts left in them.
TEST_P(FixtureTest, PrefillDoesNotDependOnEarlierPrompts) {
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  const auto& ids = g.i32.at("input_ids");
  ASSERT_GE(ids.size(), 12u);
  const std::span<const int32_t> shorter(ids.data(), 8);
  Session first(*model_);
  const std::vector<float> want = first.forward(shorter, {.all_logits = true});
  std::vector<int32_t> other(ids.rbegin(), ids.rend());  // other tokens, other experts
  Session a(*model_), b(*model_);
  a.forward(ids, {.all_logits = true});
  b.forward(other, {.all_logits = true});
  Session again(*model_);
  EXPECT_EQ(again.forward(shorter, {.all_logits = true}), want);
}

// golden_long (160 tokens) ships once per architecture, with its q4 form (and every deepseek_v3
// form), and for the mixtral variant, whose sliding window is shorter than it (tests/data/README.md).
bool has_file(const std::string& p) { return std::filesystem::exists(p); }

TEST_P(FixtureTest, GreedyContinuation) {
  for (const char* file : {"/golden.safetensors", "/golden_long.safetensors"}) {
    if (!has_file(test::fixture_dir(GetParam()) + file)) continue;
    auto g = test::load_golden(test::fixture_dir(GetParam()) + file);
    Session s(*model_);
    const auto& want = g.i32.at("gen_ids");
    EXPECT_EQ(greedy_generate(s, g.i32.at("gen_prompt"), int(want.size())), want) << file;
  }
}

TEST_P(FixtureTest, LongSequencePrefillAndChunkedDecode) {
  if (!has_file(test::fixture_dir(GetParam()) + "/golden_long.safetensors")) GTEST_SKIP() << "no golden_long";
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden_long.safetensors");
  const auto& ids = g.i32.at("input_ids");
  const auto& want = g.f32.at("logits");
  Session s(*model_);
  EXPECT_LE(test::rel_l2(s.forward(ids), want), kTol);
  // Prefill a prefix, then feed the rest in uneven pieces through the cache.
  s.reset();
  EXPECT_LE(test::rel_l2(test::logits_in_pieces(s, ids), want), kTol);
}

// The `moeflux logits` verb end to end: prefill, --decode, --generate.
TEST_P(FixtureTest, LogitsCommand) {
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  test::TempDir tmp;
  auto join = [](const std::vector<int32_t>& v) {
    std::string s;
    for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
  };
  for (const char* mode : {"", " --decode"}) {
    std::string out;
    const std::string cmd = test::moeflux_exe() + " logits --model " + test::fixture_dir(GetParam()) +
                            " --ids " + join(g.i32.at("input_ids")) + " --out " + tmp.file("l.safetensors") + mode;
    ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
    auto r = test::load_golden(tmp.file("l.safetensors"));
    EXPECT_LE(test::rel_l2(r.f32.at("logits"), g.f32.at("logits")), kTol) << mode;
  }
  std::string out;
  const std::string cmd = test::moeflux_exe() + " logits --model " + test::fixture_dir(GetParam()) + " --ids " +
                          join(g.i32.at("gen_prompt")) + " --generate 12 --out " + tmp.file("g.safetensors");
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  EXPECT_EQ(test::load_golden(tmp.file("g.safetensors")).i32.at("generated"), g.i32.at("gen_ids"));
}

// The shipped demo model against transformers on the same (dequantised 4-bit) weights.
TEST(DemoModel, MatchesTransformers) {
  auto model = load_model(std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4");
  auto g = test::load_golden(test::data_dir() + "/demo/golden.safetensors");
  Session s(*model);
  EXPECT_LE(test::rel_l2(s.forward(g.i32.at("input_ids")), g.f32.at("logits")), kTol);
  const auto& want = g.i32.at("gen_ids");
  EXPECT_EQ(greedy_generate(s, g.i32.at("gen_prompt"), int(want.size())), want);
}

INSTANTIATE_TEST_SUITE_P(Qwen3Moe, FixtureTest, ::testing::Values("qwen3_moe", "qwen3_moe/q4"), test::param_name);
INSTANTIATE_TEST_SUITE_P(Mixtral, FixtureTest, ::testing::Values("mixtral", "mixtral/q4"), test::param_name);
INSTANTIATE_TEST_SUITE_P(DeepseekV3, FixtureTest,
                         ::testing::Values("deepseek_v3", "deepseek_v3/q4", "deepseek_v3/fp8"), test::param_name);
// qwen3_next ships only in its q4 form: qwen3_5_moe_text covers the hybrids' Hub (bf16) layout.
INSTANTIATE_TEST_SUITE_P(Qwen3Next, FixtureTest, ::testing::Values("qwen3_next/q4"), test::param_name);
INSTANTIATE_TEST_SUITE_P(Qwen35MoeText, FixtureTest, ::testing::Values("qwen3_5_moe_text", "qwen3_5_moe_text/q4"),
                         test::param_name);
// Other shapes and seed (variants.json): tied embeddings, no renormalisation, other head
// ratios, dense first/last layers, a mixtral sliding window shorter than golden_long. In their
// q4 form only: the main fixtures above cover the bf16 and FP8 formats.
INSTANTIATE_TEST_SUITE_P(Variants, FixtureTest,
                         ::testing::Values("variants/qwen3_moe/q4", "variants/mixtral/q4", "variants/qwen3_next/q4",
                                           "variants/qwen3_5_moe_text/q4", "variants/deepseek_v3/q4"),
                         test::param_name);

}  // namespace
}  // namespace moeflux
