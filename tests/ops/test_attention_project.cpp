// attention_project (decode's attention and output projection in one parallel region) against
// the ops it merges, run one after the other: attention_causal, the sigmoid gate, matvec; with
// wo in natural and in group-lane order.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "util/random_weights.h"

namespace moeflux {
namespace {

TEST(OpsCpu, AttentionProjectIsBitIdenticalToItsParts) {
  const int64_t n_heads = 8, n_kv_heads = 2, head_dim = 64, qd = n_heads * head_dim;
  // wo of 1024 x 512 4-bit codes (~290 KiB): large enough for the one-region path; also in
  // group-lane order (the integer paths' layout).
  const auto wn = test::random_affine(1024, qd, 4, 64, DType::BF16, 61), wl = test::in_group_lanes(wn);
  struct Case {
    int64_t len0, window;
    bool gated;
  };
  for (const Case c : {Case{0, 0, false}, Case{39, 0, true}, Case{70, 16, false}}) {
    const int64_t n_ctx = c.len0 + 1;
    const auto q = test::randn(size_t(qd), 1);
    const auto k = test::randn(size_t(n_ctx * n_kv_heads * head_dim), 2);
    const auto v = test::randn(size_t(n_ctx * n_kv_heads * head_dim), 3);
    const auto gate = test::randn(size_t(qd), 4);
    const float* gp = c.gated ? gate.data() : nullptr;
    const float scale = 1.0f / std::sqrt(float(head_dim));
    for (int threads : {1, 3, 4})
      for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Avx512Vnni})
        for (const test::OwnedWeight* w : {&wn, &wl}) {
          if (isa > cpu_isa_detected()) continue;
          const test::OwnedWeight& wo = *w;
          set_cpu_threads(threads);
          ScopedCpuIsa scoped(isa);
          std::vector<float> att_want(size_t(qd), NAN), want(size_t(wo.w.rows), NAN);
          attention_causal(q.data(), k.data(), v.data(), 1, c.len0, c.window, n_heads, n_kv_heads, head_dim, head_dim,
                           scale, att_want.data());
          if (gp)
            for (int64_t i = 0; i < qd; ++i) att_want[size_t(i)] *= 1.0f / (1.0f + std::exp(-gp[i]));
          matvec(wo.w, att_want.data(), want.data());

          std::vector<float> att(size_t(qd), NAN), out(size_t(wo.w.rows), NAN);
          ThreadPool::reset_profile();
          ThreadPool::set_profiling(true);
          attention_project(q.data(), k.data(), v.data(), c.len0, c.window, n_heads, n_kv_heads, head_dim, scale, gp,
                            att.data(), wo.w, out.data());
          ThreadPool::set_profiling(false);
          const std::string where = "len0 " + std::to_string(c.len0) + " threads " + std::to_string(threads) +
                                    " isa " + std::string(cpu_isa_name(isa)) + (w == &wl ? " lanes" : "");
          EXPECT_EQ(att, att_want) << where;
          EXPECT_EQ(out, want) << where;
          // One region on several threads (the attention's and the projection's merged).
          EXPECT_EQ(ThreadPool::profile().regions, threads > 1 ? 1u : 0u) << where;
        }
  }
  set_cpu_threads(0);
}

}  // namespace
}  // namespace moeflux
