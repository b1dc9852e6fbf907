// Prompt cache files (run --prompt-cache): a sequence's snapshot, checkpoints included, written
// and read back whole; a sequence restored from the file continues exactly as the original;
// the model identity tells models apart; malformed files are errors naming the file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <span>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_cases.h"
#include "engine/prompt_cache.h"
#include "format/safetensors.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

class PromptCache : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptCache, RoundTripContinuesAsTheOriginal) {
  auto m = test::load(GetParam());
  const auto ids = test::base_ids(GetParam(), *m);
  Engine engine(*m);
  auto step = [&](Sequence& s, size_t from, size_t to) {
    const StepItem it{&s, std::span<const int32_t>(ids).subspan(from, to - from), {}};
    return engine.step({&it, 1})[0];
  };
  auto s = engine.new_sequence();
  step(*s, 0, 6);
  s->checkpoint();
  step(*s, 6, 9);
  s->checkpoint();
  test::TempDir tmp;
  const std::string path = tmp.path() + "/prompt.cache";
  const Sequence::Snapshot snap = s->save();
  save_prompt_cache(path, snap, model_identity(*m));
  const PromptCacheFile f = load_prompt_cache(path);
  EXPECT_EQ(f.identity, model_identity(*m));
  EXPECT_EQ(f.snapshot.tokens, snap.tokens);
  EXPECT_EQ(f.snapshot.layers, snap.layers);
  ASSERT_EQ(f.snapshot.checkpoints.size(), snap.checkpoints.size());
  for (size_t c = 0; c < snap.checkpoints.size(); ++c) {
    EXPECT_EQ(f.snapshot.checkpoints[c].pos, snap.checkpoints[c].pos);
    EXPECT_EQ(f.snapshot.checkpoints[c].layers, snap.checkpoints[c].layers);
  }
  auto r = engine.new_sequence();
  r->restore(f.snapshot);
  EXPECT_EQ(r->checkpoint_positions(), s->checkpoint_positions());
  EXPECT_EQ(test::first_difference(step(*r, 9, 12), step(*s, 9, 12)), -1);
  // Back to the first checkpoint (a recurrent model) or any position, then on.
  EXPECT_EQ(r->rewind(7), s->recurrent() ? 6 : 7);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PromptCache, ::testing::Values("qwen3_moe/q4", "qwen3_next/q4", "deepseek_v3/q4"),
                         [](const auto& info) { return test::safe_name(info.param); });

TEST(PromptCacheFile, ModelIdentityTellsModelsApart) {
  const auto a = test::load("qwen3_moe"), b = test::load("qwen3_moe/q4"), c = test::load("qwen3_moe");
  EXPECT_EQ(model_identity(*a), model_identity(*c));
  EXPECT_NE(model_identity(*a), model_identity(*b));
}

TEST(PromptCacheFile, MalformedFilesAreErrorsNamingTheFile) {
  test::TempDir tmp;
  const std::string path = tmp.path() + "/x.cache";
  auto expect_error = [&](const std::string& needle) {
    try {
      load_prompt_cache(path);
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  std::ofstream(path) << "not a cache at all";
  expect_error(path);
  write_safetensors(path, {out_i32("tokens", {1}, {5})});
  expect_error("not a moeflux prompt cache");
  const std::map<std::string, std::string> meta{{"format", "moeflux-prompt-cache"}, {"version", "1"}, {"model", "m"},
                                                {"checkpoints", ""}};
  auto with = [&](std::vector<OutTensor> t, std::map<std::string, std::string> md) { write_safetensors(path, t, md); };
  auto meta_with = [&](const std::string& k, const std::string& v) {
    auto md = meta;
    md[k] = v;
    return md;
  };
  with({out_i32("tokens", {1}, {5})}, meta_with("version", "9"));
  expect_error("version '9'");
  with({out_i32("tokens", {1}, {5})}, meta_with("checkpoints", "3,x"));
  expect_error("malformed checkpoint positions");
  with({out_f32("state.0.0", {1}, {1.0f})}, meta);
  expect_error("no 'tokens'");
  with({out_i32("tokens", {1}, {5}), out_f32("state.1.0", {1}, {1.0f})}, meta);
  expect_error("skips a layer");
  with({out_i32("tokens", {1}, {5}), out_f32("state.0.1", {1}, {1.0f})}, meta);
  expect_error("skips a buffer");
  with({out_i32("tokens", {1}, {5}), out_f32("weights", {1}, {1.0f})}, meta);
  expect_error("unexpected tensor 'weights'");
  with({out_i32("tokens", {1}, {5}), out_f32("checkpoint.0.0.0", {1}, {1.0f})}, meta);
  expect_error("unexpected tensor 'checkpoint.0.0.0'");  // no checkpoint positions given
  with({out_i32("tokens", {1}, {5}), out_i32("state.0.0", {1}, {1})}, meta);
  expect_error("is not F32");
  with({out_f32("tokens", {1}, {5.0f})}, meta);
  expect_error("'tokens' is not I32");
  // A valid file cut short.
  with({out_i32("tokens", {2}, {5, 6}), out_f32("state.0.0", {4}, {1, 2, 3, 4})}, meta);
  const std::string whole = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  EXPECT_NO_THROW(load_prompt_cache(path));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() - 3);
  expect_error(path);
}

}  // namespace
}  // namespace moeflux
