// Sliding-window perplexity: every token after the first is scored once when windows overlap, a
// single window equals the NLL computed directly from the logits, bad windows are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "engine/perplexity.h"
#include "engine/session.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

TEST(Perplexity, SingleWindowEqualsDirectNll) {
  auto m = load_model(test::fixture_dir("qwen3_moe/q4"));
  auto g = test::load_golden(test::fixture_dir("qwen3_moe/q4") + "/golden_long.safetensors");
  std::vector<int32_t> ids(g.i32.at("input_ids").begin(), g.i32.at("input_ids").begin() + 40);
  const auto& logits = g.f32.at("logits");  // transformers' logits for the same ids
  const int64_t V = m->cfg.vocab_size;
  double nll = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(double(logits[t * size_t(V) + size_t(v)]));
    nll += std::log(z) - logits[t * size_t(V) + size_t(ids[t + 1])];
  }
  auto r = perplexity(*m, ids, 64, 64);
  EXPECT_EQ(r.n_scored, 39);
  EXPECT_EQ(r.n_windows, 1);
  EXPECT_NEAR(r.ppl, std::exp(nll / 39), 1e-3 * r.ppl);
  EXPECT_GT(r.ppl_err, 0);
}

TEST(Perplexity, EveryTokenScoredOnceForAnyStride) {
  auto m = load_model(test::fixture_dir("mixtral/q4"));
  auto g = test::load_golden(test::fixture_dir("mixtral/q4") + "/golden_long.safetensors");
  std::vector<int32_t> ids(g.i32.at("input_ids").begin(), g.i32.at("input_ids").begin() + 50);
  for (auto [ctx, stride] : {std::pair{16, 5}, {20, 1}, {64, 64}, {16, 15}}) {
    auto r = perplexity(*m, ids, ctx, stride);
    EXPECT_EQ(r.n_scored, 49) << ctx << "/" << stride;
  }
  // stride == ctx: windows do not overlap, and each window's first token has no context
  auto r = perplexity(*m, ids, 16, 16);
  EXPECT_EQ(r.n_windows, 4);
  EXPECT_EQ(r.n_scored, 49 - 3);
  // more context per token can only be compared loosely, but the two must be close
  auto a = perplexity(*m, ids, 16, 16), b = perplexity(*m, ids, 16, 4);
  EXPECT_LT(std::fabs(std::log(a.ppl / b.ppl)), 0.5);
}

TEST(Perplexity, RefusesBadWindows) {
  auto m = load_model(test::fixture_dir("mixtral/q4"));
  std::vector<int32_t> ids{1, 2, 3, 4};
  EXPECT_THROW(perplexity(*m, ids, 1, 1), Error);
  EXPECT_THROW(perplexity(*m, ids, 8, 9), Error);
  EXPECT_THROW(perplexity(*m, ids, 8, 0), Error);
  EXPECT_THROW(perplexity(*m, std::vector<int32_t>{1}, 8, 8), Error);
}

}  // namespace
}  // namespace moeflux
