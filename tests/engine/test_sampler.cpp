// Sampling: parameter validation, determinism per seed, greedy == temperature 0 == top-k 1,
// empirical frequencies against the softmax, the nucleus / min-p cut-offs, penalty formulas;
// sampling from a shortlist (a row's largest logits, the rest read on demand) draws the tokens
// sampling from the whole row draws, for every kind of parameters, reading the whole row only
// where the shortlist cannot decide (ties at its end).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "backend/backend.h"
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

// Rows of V logits: `levels` 0 for continuous values, else values on that many levels (ties).
std::vector<float> random_row(int64_t V, int levels, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> row(static_cast<size_t>(V));
  for (float& v : row) v = levels ? float(int(g() % uint32_t(levels))) * 0.5f : d(g);
  return row;
}

struct Drawn {
  std::vector<int32_t> whole, listed;  // the tokens of sample() and of sample_top()
  int full_reads = 0, steps = 0;       // sample_top's reads of the whole row
};

// Steps of both samplers over the same rows, each token joining the history.
Drawn draw_both(const SamplingParams& p, int64_t V, int levels, int steps) {
  Sampler whole(p), listed(p);
  Drawn d;
  std::vector<int32_t> history{3, 3, 17, int32_t(V - 1), 3};
  for (int i = 0; i < steps; ++i) {
    const std::vector<float> row = random_row(V, levels, uint32_t(100 + i));
    std::vector<float> a = row;
    const int32_t tw = whole.sample(a, history);
    const int64_t n = listed.shortlist(history, V);
    EXPECT_GT(n, 0);
    if (n == 0) return d;
    std::vector<float> vals(static_cast<size_t>(n));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    top_logits_host(row.data(), V, n, vals.data(), ids.data());
    const auto read = [&](std::span<const int32_t> want, float* out) {
      if (want.empty()) return ++d.full_reads, void(std::copy(row.begin(), row.end(), out));
      for (size_t j = 0; j < want.size(); ++j) out[j] = row[size_t(want[j])];
    };
    const int32_t tl = listed.sample_top(vals, ids, read, history, V);
    d.whole.push_back(tw), d.listed.push_back(tl), ++d.steps;
    history.push_back(tw);
  }
  return d;
}

TEST(Sampler, ShortlistDrawsWhatTheWholeRowDraws) {
  const int64_t V = 3000;
  std::vector<std::pair<std::string, SamplingParams>> kinds;
  kinds.emplace_back("greedy", SamplingParams::greedy());
  SamplingParams p;  // the defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.seed = 3;
  kinds.emplace_back("defaults", p);
  p.temperature = 1.7f, p.top_k = 200, p.top_p = 1.0f, p.min_p = 0.0f;
  kinds.emplace_back("wide", p);
  p = SamplingParams{};
  p.temperature = 1.3f, p.top_k = 5, p.repeat_penalty = 1.3f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.2f;
  p.penalty_last_n = 16, p.logit_bias = {{7, 5.0f}, {2999, -100.0f}, {7, 1.0f}};
  kinds.emplace_back("penalties and biases", p);
  SamplingParams g = SamplingParams::greedy();
  g.repeat_penalty = 0.5f, g.presence_penalty = -3.0f, g.logit_bias = {{11, 9.0f}};  // penalties that lift
  kinds.emplace_back("greedy, lifting penalties", g);
  for (const auto& [name, q] : kinds)
    for (int levels : {0, 40, 1}) {
      const Drawn d = draw_both(q, V, levels, 60);
      EXPECT_EQ(d.steps, 60) << name;
      EXPECT_EQ(d.whole, d.listed) << name << ", levels " << levels;
      // distinct logits: the list decides; one level: all logits equal, the k-th ties with the
      // list's last (greedy decides anyway)
      const int want_full = levels == 1 && q.temperature > 0 ? d.steps : 0;
      if (levels != 40) {
        EXPECT_EQ(d.full_reads, want_full) << name << ", levels " << levels;
      }
    }
}

// Logits that differ by one ulp tie once divided by the temperature (1.75 and the float above
// it, at 1.7): the lower ids below the list then come first, which only the whole row shows.
TEST(Sampler, ShortlistReadsTheRowWhereTheTemperatureMakesTies) {
  SamplingParams p = plain(1.7f);
  p.top_k = 1;
  const int64_t V = 300;
  std::vector<float> row(static_cast<size_t>(V), -5.0f);
  const float hi = std::nextafter(1.75f, 2.0f);
  ASSERT_EQ(1.75f / p.temperature, hi / p.temperature);
  for (int i = 0; i < 100; ++i) row[size_t(i)] = 1.75f;
  for (int i = 200; i < 240; ++i) row[size_t(i)] = hi;
  Sampler s(p);
  const int64_t n = s.shortlist({}, V);
  ASSERT_EQ(n, 17);
  std::vector<float> vals(static_cast<size_t>(n));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  top_logits_host(row.data(), V, n, vals.data(), ids.data());
  EXPECT_EQ(ids[0], 200);
  int full = 0;
  const auto read = [&](std::span<const int32_t> want, float* out) {
    ASSERT_TRUE(want.empty());
    ++full, std::copy(row.begin(), row.end(), out);
  };
  EXPECT_EQ(s.sample_top(vals, ids, read, {}, V), 0);
  EXPECT_EQ(full, 1);
}

TEST(Sampler, NoShortlistWhereTheWholeRowDecides) {
  SamplingParams p;
  p.top_k = 0;  // the softmax over every logit
  EXPECT_EQ(Sampler(p).shortlist({}, 3000), 0);
  p.top_k = 2990;  // the list would be the vocabulary
  EXPECT_EQ(Sampler(p).shortlist({}, 3000), 0);
  p.top_k = int(Sampler::kMaxShortlist);
  EXPECT_EQ(Sampler(p).shortlist({}, 100000), 0);
  p.top_k = 40;
  EXPECT_EQ(Sampler(p).shortlist({}, 100000), 56);  // k and a margin of 16
  p.logit_bias = {{5, 1.0f}, {6, -1.0f}};
  p.repeat_penalty = 1.1f;
  EXPECT_EQ(Sampler(p).shortlist(std::vector<int32_t>{5, 9, 9}, 100000), 56 + 3);  // and the touched tokens 5, 6, 9
  EXPECT_EQ(Sampler(SamplingParams::greedy()).shortlist({}, 100000), 1);
}

}  // namespace
}  // namespace moeflux
