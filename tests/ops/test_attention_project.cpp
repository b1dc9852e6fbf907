// attention_project (decode's attention and output projection in one parallel region) against
// the ops it merges, run one after the other: attention_causal, the sigmoid gate, matvec; with
// wo in natural and in group-lane order.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "backend/cpu/cpu_ops.h"
#include "util/random_weights.h"
#include "util/test_util.h"

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

// Wider att, prepared for wo in units of 16 groups by the attention items that finish them
// (where the kernels prepare x in pieces): heads that straddle units (96 columns against units
// of 512) and units that end in a partial block, and whole aligned blocks; the bits of the parts
// run one after the other. An infinity in one head's values sends wo to the float path, as
// matvec does.
TEST(OpsCpu, AttentionProjectPreparesAttInUnits) {
  struct Shape {
    int64_t n_heads, n_kv_heads, head_dim;
    int group_size;
  };
  for (const Shape sh : {Shape{12, 4, 96, 32}, Shape{16, 4, 128, 64}})
    for (bool inf : {false, true}) {
      const int64_t qd = sh.n_heads * sh.head_dim, len0 = 21, n_ctx = len0 + 1;
      const auto wn = test::random_affine(512, qd, 4, sh.group_size, DType::BF16, 71), wl = test::in_group_lanes(wn);
      const auto q = test::randn(size_t(qd), 5);
      const auto k = test::randn(size_t(n_ctx * sh.n_kv_heads * sh.head_dim), 6);
      auto v = test::randn(size_t(n_ctx * sh.n_kv_heads * sh.head_dim), 7);
      if (inf) v[size_t(len0 * sh.n_kv_heads * sh.head_dim + 3)] = INFINITY;  // kv head 0's last position
      const float scale = 1.0f / std::sqrt(float(sh.head_dim));
      for (int threads : {2, 5, 16})
        for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512Vnni})
          for (const test::OwnedWeight* w : {&wn, &wl}) {
            if (isa > cpu_isa_detected()) continue;
            set_cpu_threads(threads);
            ScopedCpuIsa scoped(isa);
            std::vector<float> att_want(size_t(qd), NAN), want(size_t(w->w.rows), NAN);
            attention_causal(q.data(), k.data(), v.data(), 1, len0, 0, sh.n_heads, sh.n_kv_heads, sh.head_dim,
                             sh.head_dim, scale, att_want.data());
            matvec(w->w, att_want.data(), want.data());
            std::vector<float> att(size_t(qd), NAN), out(size_t(w->w.rows), NAN);
            attention_project(q.data(), k.data(), v.data(), len0, 0, sh.n_heads, sh.n_kv_heads, sh.head_dim, scale,
                              nullptr, att.data(), w->w, out.data());
            const std::string where = "head_dim " + std::to_string(sh.head_dim) + " threads " +
                                      std::to_string(threads) + " isa " + std::string(cpu_isa_name(isa)) +
                                      (w == &wl ? " lanes" : "") + (inf ? " inf" : "");
            EXPECT_EQ(test::first_difference(att, att_want), -1) << where;
            EXPECT_EQ(test::first_difference(out, want), -1) << where;
            if (inf) {
              EXPECT_TRUE(std::isinf(att[3]) || std::isnan(att[3])) << where;  // the infinity did reach att
            }
          }
    }
  set_cpu_threads(0);
}

}  // namespace
}  // namespace moeflux
