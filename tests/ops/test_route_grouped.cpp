// The DeepSeek-V3 "noaux_tc" router against a brute force over subsets (the kept groups are the
// topk_group-subset with the largest group-score sum, the experts the k-subset with the largest
// masked choice sum), plus cases pinning each rule: group limit, bias for selection only,
// renormalisation and scaling, and transformers' zero (not -inf) for dropped groups.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "backend/ref/ref.h"

namespace moeflux {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Best subset of `size` indices of 0..n-1 under `value(mask)`.
template <typename F>
uint64_t best_subset(int n, int size, F value) {
  uint64_t best = 0;
  double best_v = -1e300;
  // Every mask with `size` bits set, in increasing order (Gosper's next-combination step).
  for (uint64_t m = (uint64_t(1) << size) - 1; m < (uint64_t(1) << n);) {
    const double v = value(m);
    if (v > best_v) best_v = v, best = m;
    const uint64_t low = m & -m, ripple = m + low;
    m = ripple | (((m ^ ripple) >> 2) / low);
  }
  return best;
}

void check_against_brute_force(const GroupedRouteParams& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.5f), bd(0.0f, 0.3f);
  const int n = int(p.n_experts), per = int(p.n_experts / p.n_group);
  std::vector<float> logits(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
  for (auto& x : logits) x = nd(rng);
  for (auto& x : bias) x = bd(rng);
  std::vector<int32_t> ids(static_cast<size_t>(p.k));
  std::vector<float> w(static_cast<size_t>(p.k));
  route_sigmoid_grouped_ref(logits.data(), bias.data(), p, ids.data(), w.data());

  std::vector<double> s(static_cast<size_t>(n)), choice(static_cast<size_t>(n));
  for (size_t e = 0; e < size_t(n); ++e) s[e] = sigmoid(logits[e]), choice[e] = s[e] + bias[e];
  std::vector<double> gscore(static_cast<size_t>(p.n_group), -1e300);
  for (int g = 0; g < int(p.n_group); ++g)
    for (int i = 0; i < per; ++i)
      for (int j = i + 1; j < per; ++j)
        gscore[size_t(g)] = std::max(gscore[size_t(g)], choice[size_t(g * per + i)] + choice[size_t(g * per + j)]);
  const uint64_t groups = best_subset(int(p.n_group), int(p.topk_group), [&](uint64_t m) {
    double v = 0;
    for (int g = 0; g < int(p.n_group); ++g)
      if (m >> g & 1) v += gscore[size_t(g)];
    return v;
  });
  const uint64_t experts = best_subset(n, int(p.k), [&](uint64_t m) {
    double v = 0;
    for (int e = 0; e < n; ++e)
      if (m >> e & 1) v += (groups >> (e / per) & 1) ? choice[size_t(e)] : 0.0;
    return v;
  });
  std::set<int32_t> want, got(ids.begin(), ids.end());
  double sum = 0;
  for (int e = 0; e < n; ++e)
    if (experts >> e & 1) want.insert(e), sum += s[size_t(e)];
  ASSERT_EQ(got, want) << "seed " << seed;
  for (int64_t i = 0; i < p.k; ++i) {
    const double wi = s[size_t(ids[size_t(i)])] / (p.renorm ? sum : 1.0) * p.scaling;
    EXPECT_NEAR(w[size_t(i)], wi, 1e-6 * std::max(1.0, wi));
  }
}

TEST(RouteGrouped, AgainstBruteForce) {
  const GroupedRouteParams cases[] = {
      {16, 4, 2, 4, true, 2.5f}, {32, 8, 3, 3, true, 1.0f}, {12, 3, 3, 5, false, 1.5f},
      {8, 1, 1, 2, true, 1.0f},  {20, 5, 1, 4, false, 16.0f},
  };
  for (const auto& p : cases)
    for (uint32_t seed = 1; seed <= 20; ++seed) check_against_brute_force(p, seed);
}

TEST(RouteGrouped, GroupLimitBeatsASingleStrongExpert) {
  // Group 0 has the best expert but a weak second; group 1 two good ones: only group 1 is kept.
  const std::vector<float> logits{5, -5, -5, -5, 1, 1, -5, -5};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  route_sigmoid_grouped_ref(logits.data(), nullptr, {8, 2, 1, 2, true, 1.0f}, ids.data(), w.data());
  EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()), (std::set<int32_t>{4, 5}));
  EXPECT_NEAR(w[0], 0.5, 1e-6);
  EXPECT_NEAR(w[1], 0.5, 1e-6);
}

TEST(RouteGrouped, BiasSelectsButDoesNotWeight) {
  const std::vector<float> logits{0.0f, 0.1f, 0.0f, 0.0f}, bias{0.5f, 0.0f, 0.0f, 0.0f};
  std::vector<int32_t> ids(1);
  std::vector<float> w(1);
  route_sigmoid_grouped_ref(logits.data(), bias.data(), {4, 1, 1, 1, false, 2.5f}, ids.data(), w.data());
  EXPECT_EQ(ids[0], 0);                             // chosen through the bias
  EXPECT_NEAR(w[0], sigmoid(0.0) * 2.5, 1e-6);      // weighted without it
  route_sigmoid_grouped_ref(logits.data(), bias.data(), {4, 1, 1, 1, true, 2.5f}, ids.data(), w.data());
  EXPECT_NEAR(w[0], 2.5, 1e-6);  // renormalised over one expert, then scaled
}

TEST(RouteGrouped, DroppedGroupsScoreZeroAsInTransformers) {
  // Group 0 (experts 0, 1) is kept; expert 1's bias makes its choice score negative, so an
  // expert of the dropped group 1, masked to 0.0, outranks it (masked_fill(..., 0.0) in HF).
  const std::vector<float> logits{3.0f, 0.0f, -4.0f, -4.0f}, bias{0.0f, -1.0f, 0.0f, 0.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  route_sigmoid_grouped_ref(logits.data(), bias.data(), {4, 2, 1, 2, false, 1.0f}, ids.data(), w.data());
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 2);  // the lower id among the two zero-scored dropped experts
  EXPECT_NEAR(w[1], sigmoid(-4.0), 1e-6);
}

}  // namespace
}  // namespace moeflux
