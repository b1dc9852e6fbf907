// route_experts_combined (decode's router, routing and experts in one parallel region) against
// the ops it merges, run one after the other: matvec(router), the route, then
// swiglu_experts_combined over the chosen experts in ascending id. Routers in bf16 (the
// converter's) and in the experts' own layout (x shared); experts in natural and group-lane
// order; a route with a repeated id and experts of mixed layouts (not fused: false); an x with
// an infinity (x prepared in pieces meets it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/ref/ref.h"
#include "util/random_weights.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

constexpr int64_t kExperts = 16, kHidden = 128, kDim = 2048;  // 32 groups of x: two 16-group pieces
constexpr int kActive = 4;

struct Experts {
  std::vector<test::OwnedWeight> g, u, d;
  std::vector<const QWeight*> gp, up, dp;  // by id
};

Experts make_experts(bool lanes, uint32_t seed) {
  Experts e;
  for (int64_t i = 0; i < kExperts; ++i) {
    auto w = [&](int64_t rows, int64_t cols, uint32_t s) {
      auto o = test::random_affine(rows, cols, 4, 64, DType::BF16, s);
      if (lanes) return test::in_group_lanes(o);
      return o;  // moved: its view points into its own buffers (a copy's would not)
    };
    e.g.push_back(w(kHidden, kDim, seed + uint32_t(3 * i)));
    e.u.push_back(w(kHidden, kDim, seed + uint32_t(3 * i + 1)));
    e.d.push_back(w(kDim, kHidden, seed + uint32_t(3 * i + 2)));
  }
  for (int64_t i = 0; i < kExperts; ++i)
    e.gp.push_back(&e.g[size_t(i)].w), e.up.push_back(&e.u[size_t(i)].w), e.dp.push_back(&e.d[size_t(i)].w);
  return e;
}

void softmax_topk(const float* logits, int32_t* ids, float* w) {
  route_softmax_topk_ref(logits, kExperts, kActive, true, ids, w);
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> w, out;
  bool fused = false;
};

// The parts one after the other.
Routed parts(const QWeight& router, const Experts& e, const std::vector<float>& x, const RouteFn& route) {
  Routed r{std::vector<int32_t>(kActive), std::vector<float>(kActive), std::vector<float>(size_t(kDim), NAN), true};
  std::vector<float> logits(static_cast<size_t>(kExperts));
  matvec(router, x.data(), logits.data());
  route(logits.data(), r.ids.data(), r.w.data());
  std::vector<int> order(kActive);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return r.ids[size_t(a)] < r.ids[size_t(b)]; });
  std::vector<const QWeight*> g, u, d;
  std::vector<float> wt;
  for (int j : order) {
    const size_t id = size_t(r.ids[size_t(j)]);
    g.push_back(e.gp[id]), u.push_back(e.up[id]), d.push_back(e.dp[id]), wt.push_back(r.w[size_t(j)]);
  }
  swiglu_experts_combined(kActive, g.data(), u.data(), d.data(), x.data(), wt.data(), r.out.data());
  return r;
}

Routed merged(const QWeight& router, const Experts& e, const std::vector<float>& x, const RouteFn& route) {
  Routed r{std::vector<int32_t>(kActive, -1), std::vector<float>(kActive, NAN), std::vector<float>(size_t(kDim), NAN)};
  r.fused = route_experts_combined(router, x.data(), route, kActive, e.gp.data(), e.up.data(), e.dp.data(),
                                   r.ids.data(), r.w.data(), r.out.data());
  return r;
}

// NaN-aware equality (an infinity in x gives NaN rows on both sides).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) ? !std::isnan(b[i]) : a[i] != b[i]) return false;
  return true;
}

TEST(OpsCpu, RoutedExpertsAreBitIdenticalToRouterRouteAndFusedExperts) {
  const Experts natural = make_experts(false, 300), lanes = make_experts(true, 400);
  const auto router_bf16 = test::random_dense(kExperts, kDim, DType::BF16, 500);
  const auto router_q4 = test::random_affine(kExperts, kDim, 4, 64, DType::BF16, 501);
  const auto router_q4_lanes = test::in_group_lanes(router_q4);
  auto x_inf = test::randn(size_t(kDim), 503);
  x_inf[1500] = INFINITY;  // in the second 16-group piece
  struct Case {
    const char* name;
    const test::OwnedWeight* router;
    const Experts* experts;
    std::vector<float> x;
  };
  const std::vector<Case> cases = {
      {"bf16 router, natural experts", &router_bf16, &natural, test::randn(size_t(kDim), 502)},
      {"bf16 router, lane experts", &router_bf16, &lanes, test::randn(size_t(kDim), 504)},
      {"q4 router, natural experts (x shared)", &router_q4, &natural, test::randn(size_t(kDim), 505)},
      {"lane router, lane experts (x shared)", &router_q4_lanes, &lanes, test::randn(size_t(kDim), 506)},
      {"bf16 router, lane experts, infinite x", &router_bf16, &lanes, x_inf},
  };
  for (const Case& c : cases)
    for (int threads : {1, 3, 5}) {
      set_cpu_threads(threads);
      for (CpuIsa isa : test::cpu_isas_available()) {
        ScopedCpuIsa scoped(isa);
        const std::string at = std::string(c.name) + " isa " + std::string(cpu_isa_name(isa)) + " threads " + std::to_string(threads);
        const Routed want = parts(c.router->w, *c.experts, c.x, softmax_topk);
        const Routed got = merged(c.router->w, *c.experts, c.x, softmax_topk);
        EXPECT_TRUE(got.fused) << at;
        EXPECT_EQ(got.ids, want.ids) << at;
        EXPECT_TRUE(same_bits(got.w, want.w)) << at;  // NaN for the infinite x, which the router sees too
        EXPECT_TRUE(same_bits(got.out, want.out)) << at;
        const auto nan = std::count_if(got.out.begin(), got.out.end(), [](float v) { return std::isnan(v); });
        EXPECT_EQ(nan > 0, !std::isfinite(c.x[1500])) << at;  // the infinity reached the output, or no NaN
      }
    }
  set_cpu_threads(0);
}

// A choice that cannot run fused: the routing is returned and out is left alone.
TEST(OpsCpu, RoutedExpertsReturnTheRoutingWhenNotFused) {
  Experts e = make_experts(false, 600);
  const auto router = test::random_dense(kExperts, kDim, DType::BF16, 700);
  const auto x = test::randn(size_t(kDim), 701);
  // Expert 5's up in 8 bits: any choice with it is of mixed layouts.
  const auto up8 = test::random_affine(kHidden, kDim, 8, 64, DType::BF16, 702);
  Experts mixed = make_experts(false, 600);
  mixed.up[5] = &up8.w;
  const RouteFn repeated = [](const float*, int32_t* ids, float* w) {
    for (int j = 0; j < kActive; ++j) ids[j] = j == 2 ? 1 : j, w[j] = 0.25f;
  };
  const RouteFn with5 = [](const float*, int32_t* ids, float* w) {
    for (int j = 0; j < kActive; ++j) ids[j] = int32_t(2 + 3 * j) % int32_t(kExperts), w[j] = 0.5f + float(j);
  };
  for (int threads : {1, 3}) {
    set_cpu_threads(threads);
    for (const auto& [name, route, experts] : {std::tuple{"repeated id", &repeated, &e}, std::tuple{"mixed", &with5, &mixed}}) {
      const Routed got = merged(router.w, *experts, x, *route);
      EXPECT_FALSE(got.fused) << name << " threads " << threads;
      std::vector<int32_t> ids(kActive);
      std::vector<float> w(kActive);
      (*route)(nullptr, ids.data(), w.data());
      EXPECT_EQ(got.ids, ids) << name;
      EXPECT_EQ(got.w, w) << name;
      EXPECT_TRUE(std::all_of(got.out.begin(), got.out.end(), [](float v) { return std::isnan(v); })) << name;
    }
  }
  set_cpu_threads(0);
}

// The router without allocations gives route_softmax_topk_ref's ids and bits: random logits,
// logits with many ties (the order then falls to the lower id), every k up to the fast path's
// limit and past it, and more experts than the fast path holds.
TEST(OpsCpu, RouteSoftmaxTopkMatchesTheReference) {
  struct Case { int64_t n, k; bool ties; };
  int cases = 0;
  for (const Case c : {Case{128, 8, false}, Case{128, 8, true}, Case{16, 1, false}, Case{16, 16, true}, Case{512, 10, false},
                       Case{512, 64, true}, Case{128, 65, false}, Case{1500, 8, true}, Case{3, 0, false}})
    for (bool renorm : {false, true})
      for (uint32_t seed = 0; seed < 4; ++seed) {
        auto logits = test::randn(size_t(c.n), 800 + seed);
        if (c.ties)
          for (float& x : logits) x = std::round(x * 2.0f);  // a handful of distinct values
        std::vector<int32_t> want_ids(size_t(c.k)), got_ids(size_t(c.k), -1);
        std::vector<float> want_w(size_t(c.k)), got_w(size_t(c.k), NAN);
        route_softmax_topk_ref(logits.data(), c.n, c.k, renorm, want_ids.data(), want_w.data());
        route_softmax_topk(logits.data(), c.n, c.k, renorm, got_ids.data(), got_w.data());
        EXPECT_EQ(got_ids, want_ids) << "n " << c.n << " k " << c.k << " ties " << c.ties << " seed " << seed;
        EXPECT_EQ(got_w, want_w) << "n " << c.n << " k " << c.k << " ties " << c.ties << " seed " << seed;
        ++cases;
      }
  EXPECT_EQ(cases, 9 * 2 * 4);
}

}  // namespace
}  // namespace moeflux
