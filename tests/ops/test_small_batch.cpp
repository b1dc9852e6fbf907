// Small batches (matmul of T <= kSmallBatch tokens, a decode step of several sequences) give
// each token its own matvec's bits at every ISA level, for group-lane weights (which the
// Avx512Vnni level runs several tokens per pass over, Kernels::matvec_rows_tokens) and natural
// ones, with a partial last block of groups (768 columns), on 1 and 2 threads; a token with a
// non-finite value takes the float path alone. Batched experts of 2 to 5 tokens (21 at
// Avx512Vnni) in group-lane order give each token its one-token expert's bits, and the
// attention of several sequences in one region each sequence's own. Past kSmallBatch the VNNI
// tiles of prefill give group-lane weights the same bits, and with two digits (fast prefill)
// stay within the left-out digit's bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_pool.h"
#include "util/random_weights.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

// Row t of matmul(w, x, T) against matvec(w, x_t), at every level (or only_vnni: the
// Avx512Vnni level, if the CPU has it) and 1 / 2 threads.
void expect_tokens_as_matvec(const QWeight& w, const std::vector<float>& x, int64_t T, const char* what,
                             bool only_vnni = false) {
  for (CpuIsa isa : test::cpu_isas_available())
    for (int threads : {1, 2}) {
      if (only_vnni && isa != CpuIsa::Avx512Vnni) continue;
      ScopedCpuIsa scoped(isa);
      set_cpu_threads(threads);
      std::vector<float> y(size_t(T * w.rows), NAN);
      matmul(w, x.data(), T, y.data());
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> one(size_t(w.rows), NAN);
        matvec(w, x.data() + t * w.cols, one.data());
        const std::vector<float> row(y.begin() + t * w.rows, y.begin() + (t + 1) * w.rows);
        EXPECT_EQ(test::first_difference(row, one), -1)
            << what << " T " << T << " token " << t << " isa " << cpu_isa_name(isa) << " threads " << threads;
      }
    }
  set_cpu_threads(0);
}

TEST(SmallBatch, EachTokenGetsItsMatvecBits) {
  const test::OwnedWeight q = test::random_affine(300, 2048, 4, 64, DType::BF16, 11);
  const test::OwnedWeight down = test::random_affine(261, 768, 4, 64, DType::BF16, 12);
  const test::OwnedWeight q_lanes = test::in_group_lanes(q), down_lanes = test::in_group_lanes(down);
  for (int64_t T : {int64_t(2), int64_t(3), int64_t(5), int64_t(8), kSmallBatch}) {
    const auto x = test::randn(size_t(T * 2048), uint32_t(20 + T)), xd = test::randn(size_t(T * 768), uint32_t(40 + T));
    expect_tokens_as_matvec(q.w, x, T, "natural 2048");
    expect_tokens_as_matvec(q_lanes.w, x, T, "lanes 2048");
    expect_tokens_as_matvec(down_lanes.w, xd, T, "lanes 768");
  }
}

// Past kSmallBatch (a prefill), 4-bit group-lane weights at Avx512Vnni run the tiles of rows
// x tokens (kernels_avx512_vnni_tile.cpp), whose last tiles hold 1 to 3 tokens: still each
// token's matvec bits. A non-finite token sends the batch's rows token by token.
TEST(SmallBatch, PrefillTilesGiveEachTokenItsMatvecBits) {
  const test::OwnedWeight q_lanes = test::in_group_lanes(test::random_affine(300, 2048, 4, 64, DType::BF16, 11));
  const test::OwnedWeight down_lanes = test::in_group_lanes(test::random_affine(261, 768, 4, 64, DType::BF16, 12));
  for (int64_t T : {int64_t(6), int64_t(7), int64_t(21), int64_t(40)}) {
    const auto x = test::randn(size_t(T * 2048), uint32_t(60 + T)), xd = test::randn(size_t(T * 768), uint32_t(80 + T));
    expect_tokens_as_matvec(q_lanes.w, x, T, "lanes 2048", /*only_vnni=*/true);
    expect_tokens_as_matvec(down_lanes.w, xd, T, "lanes 768", /*only_vnni=*/true);
  }
  auto x = test::randn(size_t(21 * 2048), 15);
  x[size_t(9 * 2048 + 7)] = INFINITY;
  expect_tokens_as_matvec(q_lanes.w, x, 21, "inf in token 9 of 21", /*only_vnni=*/true);
}

// Two digits (set_tile_digits(2): the prefill steps of CpuOptions::fast_prefill) leave x's
// lowest digit out of the tiles: each token's row then differs from its matvec by at most
// 128 sum_g dx_g sum_{c in g} |s_g code_c| (dx_g = max|x_g| / (127 * 2^16), the digit's weight),
// plus float rounding; zero biases make |w_c| that term. The rows do differ (the path ran), and
// three digits are back at the matvec's bits.
TEST(SmallBatch, TwoDigitTilesStayWithinTheLeftOutDigit) {
  if (cpu_isa_detected() < CpuIsa::Avx512Vnni) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  test::OwnedWeight natural = test::random_affine(300, 2048, 4, 64, DType::BF16, 19);
  std::fill(natural.biases.begin(), natural.biases.end(), uint8_t(0));
  const test::OwnedWeight lanes = test::in_group_lanes(natural);
  const int64_t T = 21, cols = 2048, gs = 64;
  const auto x = test::randn(size_t(T * cols), 23);
  ScopedCpuIsa scoped(CpuIsa::Avx512Vnni);
  std::vector<float> y(size_t(T * 300), NAN);
  set_tile_digits(2);
  matmul(lanes.w, x.data(), T, y.data());
  set_tile_digits(3);
  std::vector<float> wrow(static_cast<size_t>(cols));
  int64_t differ = 0;
  double worst = 0;  // the largest difference over its bound
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * cols;
    std::vector<float> one(300, NAN);
    matvec(lanes.w, xt, one.data());
    for (int64_t r = 0; r < 300; ++r) {
      dequant_row_ref(natural.w, r, wrow.data());
      double bound = 0, mag = 0;
      for (int64_t g = 0; g < cols / gs; ++g) {
        double xmax = 0, wsum = 0;
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c) {
          xmax = std::max(xmax, double(std::fabs(xt[c])));
          wsum += std::fabs(wrow[size_t(c)]);
          mag += std::fabs(double(wrow[size_t(c)]) * xt[c]);
        }
        bound += 128.0 * xmax / (127.0 * 65536.0) * wsum;
      }
      const double d = std::fabs(double(y[size_t(t * 300 + r)]) - one[size_t(r)]);
      EXPECT_LE(d, bound + 1e-6 * mag) << "token " << t << " row " << r;
      differ += d > 0;
      worst = std::max(worst, d / bound);
    }
  }
  EXPECT_GT(differ, T * 300 / 2);
  std::printf("two digits: %lld of %lld rows differ from the matvec, at most %.3f of the bound\n", (long long)differ,
              (long long)(T * 300), worst);
  expect_tokens_as_matvec(lanes.w, x, T, "three digits again", /*only_vnni=*/true);
}

TEST(SmallBatch, ANonFiniteTokenTakesTheFloatPathAlone) {
  const test::OwnedWeight w = test::in_group_lanes(test::random_affine(64, 2048, 4, 64, DType::BF16, 13));
  auto x = test::randn(size_t(4 * 2048), 14);
  x[size_t(2 * 2048 + 100)] = INFINITY;
  expect_tokens_as_matvec(w.w, x, 4, "inf in token 2");
}

TEST(SmallBatch, ExpertsOfSeveralTokensGiveEachTokenItsBits) {
  const int64_t hidden = 768, dim = 2048;
  const test::OwnedWeight g = test::in_group_lanes(test::random_affine(hidden, dim, 4, 64, DType::BF16, 15));
  const test::OwnedWeight u = test::in_group_lanes(test::random_affine(hidden, dim, 4, 64, DType::BF16, 16));
  const test::OwnedWeight d = test::in_group_lanes(test::random_affine(dim, hidden, 4, 64, DType::BF16, 17));
  const QWeight *gp = &g.w, *up = &u.w, *dp = &d.w;
  // 21 tokens: past kSmallBatch, only the Avx512Vnni level's tiles keep the matvec's bits.
  for (int64_t T : {int64_t(2), int64_t(3), int64_t(5), int64_t(21)}) {
    const auto x = test::randn(size_t(T * dim), uint32_t(18 + T));
    for (CpuIsa isa : test::cpu_isas_available()) {
      if (T > kSmallBatch && isa != CpuIsa::Avx512Vnni) continue;
      ScopedCpuIsa scoped(isa);
      std::vector<float> y(size_t(T * dim), NAN);
      const float* xp = x.data();
      float* yp = y.data();
      swiglu_experts_batch(1, &gp, &up, &dp, &xp, &T, &yp);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> one(size_t(dim), NAN);
        const int64_t one_token = 1;
        const float* xt = x.data() + t * dim;
        float* ot = one.data();
        swiglu_experts_batch(1, &gp, &up, &dp, &xt, &one_token, &ot);
        const std::vector<float> row(y.begin() + t * dim, y.begin() + (t + 1) * dim);
        EXPECT_EQ(test::first_difference(row, one), -1) << "T " << T << " token " << t << " isa " << cpu_isa_name(isa);
      }
    }
  }
}

// A decode step's attention over several sequences' caches in one region gives each sequence
// attention_causal's bits, for contexts of different lengths and a prefill chunk among them.
TEST(SmallBatch, AttentionOfSeveralSequencesIsPerSequence) {
  const int64_t n_heads = 8, n_kv = 2, hd = 64, qd = n_heads * hd, kd = n_kv * hd;
  const int64_t T[3] = {1, 3, 1}, len0[3] = {0, 17, 40};
  std::vector<std::vector<float>> q, k, v, alone, together;
  std::vector<CausalSeq> seqs;
  for (int i = 0; i < 3; ++i) {
    q.push_back(test::randn(size_t(T[i] * qd), uint32_t(30 + i)));
    k.push_back(test::randn(size_t((len0[i] + T[i]) * kd), uint32_t(40 + i)));
    v.push_back(test::randn(size_t((len0[i] + T[i]) * kd), uint32_t(50 + i)));
    alone.emplace_back(size_t(T[i] * qd), NAN), together.emplace_back(size_t(T[i] * qd), NAN);
  }
  for (int i = 0; i < 3; ++i)
    seqs.push_back(
        {q[size_t(i)].data(), k[size_t(i)].data(), v[size_t(i)].data(), T[i], len0[i], together[size_t(i)].data()});
  for (CpuIsa isa : test::cpu_isas_available())
    for (int threads : {1, 3}) {
      ScopedCpuIsa scoped(isa);
      set_cpu_threads(threads);
      attention_causal_seqs(seqs.data(), 3, 0, n_heads, n_kv, hd, hd, 0.125f);
      for (int i = 0; i < 3; ++i) {
        attention_causal(q[size_t(i)].data(), k[size_t(i)].data(), v[size_t(i)].data(), T[i], len0[i], 0, n_heads, n_kv,
                         hd, hd, 0.125f, alone[size_t(i)].data());
        EXPECT_EQ(test::first_difference(together[size_t(i)], alone[size_t(i)]), -1)
            << "sequence " << i << " isa " << cpu_isa_name(isa) << " threads " << threads;
      }
    }
  set_cpu_threads(0);
}

}  // namespace
}  // namespace moeflux
