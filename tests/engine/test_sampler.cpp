// Sampling: parameter validation, determinism per seed, greedy == temperature 0 == top-k 1,
// empirical frequencies against the softmax, the nucleus / min-p cut-offs, penalty formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/sampler.h"

namespace moeflux {
namespace {

std::vector<float> logits5() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.0f}; }

SamplingParams plain(float temperature) {
  SamplingParams p = SamplingParams::greedy();
  p.temperature = temperature;
  return p;
}

TEST(Sampler, Validation) {
  auto bad = [](auto edit, const char* needle) {
    SamplingParams p;
    edit(p);
    try {
      p.validate();
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad([](SamplingParams& p) { p.temperature = -0.5f; }, "temperature");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top-p");
  bad([](SamplingParams& p) { p.top_p = 1.5f; }, "top-p");
  bad([](SamplingParams& p) { p.min_p = -0.1f; }, "min-p");
  bad([](SamplingParams& p) { p.top_k = -3; }, "top-k");
  bad([](SamplingParams& p) { p.repeat_penalty = 0.0f; }, "repeat penalty");
  SamplingParams{}.validate();
}

TEST(Sampler, GreedyEqualsTemperatureZeroAndTopK1) {
  Sampler g(SamplingParams::greedy());
  auto l = logits5();
  EXPECT_EQ(g.sample(l, {}), 1);
  SamplingParams k1 = plain(1.5f);
  k1.top_k = 1;
  Sampler s(k1);
  for (int i = 0; i < 20; ++i) {
    auto l2 = logits5();
    EXPECT_EQ(s.sample(l2, {}), 1);
  }
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p = plain(1.0f);
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    auto l1 = logits5(), l2 = logits5(), l3 = logits5();
    ta.push_back(a.sample(l1, {}));
    tb.push_back(b.sample(l2, {}));
    tc.push_back(c.sample(l3, {}));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, FrequenciesFollowSoftmaxAtTemperature) {
  for (float temp : {1.0f, 0.5f}) {
    SamplingParams p = plain(temp);
    p.seed = 7;
    Sampler s(p);
    const int N = 40000;
    std::map<int32_t, int> hits;
    for (int i = 0; i < N; ++i) {
      auto l = logits5();
      ++hits[s.sample(l, {})];
    }
    auto l = logits5();
    double z = 0;
    for (float v : l) z += std::exp(double(v) / temp);
    for (int32_t t = 0; t < 5; ++t) {
      const double want = std::exp(double(l[size_t(t)]) / temp) / z;
      EXPECT_NEAR(double(hits[t]) / N, want, 4 * std::sqrt(want * (1 - want) / N) + 1e-3) << t << " T=" << temp;
    }
  }
}

TEST(Sampler, TopPAndMinPCutOffs) {
  // probabilities at T=1: token 1 0.553, 2 0.335, 0 0.075, 4 0.028, 3 0.010
  SamplingParams p = plain(1.0f);
  p.top_p = 0.75f;  // nucleus {1, 2}
  Sampler s(p);
  for (int i = 0; i < 500; ++i) {
    auto l = logits5();
    int32_t t = s.sample(l, {});
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  SamplingParams q = plain(1.0f);
  q.min_p = 0.1f;  // keeps p >= 0.1 * 0.553: {1, 2, 0}
  Sampler m(q);
  std::map<int32_t, int> hits;
  for (int i = 0; i < 3000; ++i) {
    auto l = logits5();
    ++hits[m.sample(l, {})];
  }
  EXPECT_EQ(hits.count(3) + hits.count(4), 0u);
  EXPECT_GT(hits[0], 0);
}

TEST(Sampler, PenaltyFormulas) {
  SamplingParams p = SamplingParams::greedy();
  p.repeat_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  std::vector<float> l{4.0f, -2.0f, 1.0f};
  std::vector<int32_t> hist{0, 0, 1, 7 /* out of vocabulary: ignored */};
  apply_penalties(l, hist, p);
  EXPECT_FLOAT_EQ(l[0], 4.0f / 2 - 0.5f - 0.25f * 2);
  EXPECT_FLOAT_EQ(l[1], -2.0f * 2 - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l[2], 1.0f);
  p.penalty_last_n = 1;  // only the last token (7, ignored) counts
  std::vector<float> l2{4.0f, -2.0f, 1.0f};
  apply_penalties(l2, hist, p);
  EXPECT_EQ(l2, (std::vector<float>{4.0f, -2.0f, 1.0f}));
}

// logit_bias: added before anything else; -100 bans a token, +10 lifts another over the rest;
// ids beyond the logits or negative, or a bias that is not finite, are errors.
TEST(Sampler, LogitBias) {
  SamplingParams p = SamplingParams::greedy();
  std::vector<float> logits{1, 2, 3};
  p.logit_bias = {{0, 10.0f}};
  EXPECT_EQ(Sampler(p).sample(logits, {}), 0);
  logits = {1, 2, 3};
  p.logit_bias = {{2, -100.0f}};
  EXPECT_EQ(Sampler(p).sample(logits, {}), 1);
  p.logit_bias = {{3, 1.0f}};
  logits = {1, 2, 3};
  EXPECT_THROW(Sampler(p).sample(logits, {}), Error);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(p.validate(), Error);
  p.logit_bias = {{1, NAN}};
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace moeflux
