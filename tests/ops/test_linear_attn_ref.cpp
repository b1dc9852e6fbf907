// GatedDeltaNet reference ops against independent double-precision formulas: the streamed conv1d
// step against a full causal convolution, the gated delta step against its matrix form
// S' = exp(g) (I - beta k k^T) S + beta k v^T, plus the delta rule's store-and-recall property.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/ref/linear_attn.h"
#include "util/random_weights.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using test::randn;

TEST(LinearAttnRef, Conv1dStepsEqualFullCausalConv) {
  for (int64_t K : {1, 2, 4}) {
    const int64_t C = 7, T = 11;
    auto x = randn(size_t(T * C), 1), w = randn(size_t(C * K), 2);
    std::vector<float> state(static_cast<size_t>((K - 1) * C), 0.0f), out(static_cast<size_t>(C));
    for (int64_t t = 0; t < T; ++t) {
      causal_conv1d_step_ref(x.data() + t * C, w.data(), C, K, state.data(), out.data());
      for (int64_t c = 0; c < C; ++c) {
        double want = 0;  // zero padding before the sequence
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= 0) want += double(w[size_t(c * K + j)]) * x[size_t(src * C + c)];
        }
        EXPECT_NEAR(out[size_t(c)], want, 1e-5) << "K " << K << " t " << t << " c " << c;
      }
    }
    for (int64_t r = 0; r < K - 1; ++r)  // the state holds the last K-1 inputs, oldest first
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(state[size_t(r * C + c)], x[size_t((T - (K - 1) + r) * C + c)]);
  }
}

TEST(LinearAttnRef, L2NormAndSoftplus) {
  auto x = randn(33, 3, 4.0f);
  std::vector<float> y(33);
  l2norm_ref(x.data(), 33, 1e-6f, y.data());
  double ss = 0, nx = 0;
  for (size_t i = 0; i < 33; ++i) ss += double(y[i]) * y[i], nx += double(x[i]) * x[i];
  EXPECT_NEAR(ss, nx / (nx + 1e-6), 1e-5);
  for (size_t i = 0; i < 33; ++i) EXPECT_NEAR(y[i], x[i] / std::sqrt(nx + 1e-6), 1e-6);
  std::vector<float> zero(5, 0.0f), zout(5, 1.0f);
  l2norm_ref(zero.data(), 5, 1e-6f, zout.data());  // eps keeps a zero vector finite
  for (float v : zout) EXPECT_EQ(v, 0.0f);
  for (float v : {-30.0f, -3.0f, -0.5f, 0.0f, 0.7f, 5.0f, 19.5f})
    EXPECT_NEAR(softplus_ref(v), std::log1p(std::exp(double(v))), 1e-6 * std::max(1.0, double(v)));
  EXPECT_EQ(softplus_ref(25.0f), 25.0f);  // torch's threshold: identity above 20
}

TEST(LinearAttnRef, GatedDeltaStepEqualsMatrixForm) {
  const int64_t dk = 6, dv = 5, T = 8;
  std::vector<float> S(static_cast<size_t>(dk * dv), 0.0f), out(static_cast<size_t>(dv));
  std::vector<double> Sd(static_cast<size_t>(dk * dv), 0.0);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    auto q = randn(size_t(dk), 10 + uint32_t(t)), k = randn(size_t(dk), 30 + uint32_t(t)),
         v = randn(size_t(dv), 50 + uint32_t(t));
    l2norm_ref(q.data(), dk, 1e-6f, q.data());
    l2norm_ref(k.data(), dk, 1e-6f, k.data());
    const float g = -2.0f * u01(rng), beta = u01(rng);
    gated_delta_step_ref(S.data(), q.data(), k.data(), v.data(), g, beta, dk, dv, out.data());
    // S' = exp(g) (I - beta k k^T) S + beta k v^T
    std::vector<double> next(Sd.size());
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j) {
        double acc = 0;
        for (int64_t m = 0; m < dk; ++m)
          acc += ((i == m ? 1.0 : 0.0) - double(beta) * k[size_t(i)] * k[size_t(m)]) * Sd[size_t(m * dv + j)];
        next[size_t(i * dv + j)] = std::exp(double(g)) * acc + double(beta) * k[size_t(i)] * v[size_t(j)];
      }
    Sd = next;
    for (int64_t j = 0; j < dv; ++j) {
      double o = 0;
      for (int64_t i = 0; i < dk; ++i) o += Sd[size_t(i * dv + j)] * q[size_t(i)];
      EXPECT_NEAR(out[size_t(j)], o, 1e-5) << "t " << t;
    }
  }
  for (size_t i = 0; i < S.size(); ++i) EXPECT_NEAR(S[i], Sd[i], 1e-5);
}

TEST(LinearAttnRef, DeltaRuleStoresAndOverwrites) {
  // No decay, beta 1, orthonormal keys: reading key i returns the last value written to it.
  const int64_t dk = 4, dv = 3;
  std::vector<float> S(static_cast<size_t>(dk * dv), 0.0f), out(static_cast<size_t>(dv));
  auto e = [&](int64_t i) {
    std::vector<float> v(static_cast<size_t>(dk), 0.0f);
    v[size_t(i)] = 1.0f;
    return v;
  };
  std::vector<std::vector<float>> vals{randn(3, 60), randn(3, 61), randn(3, 62)};
  for (int64_t i = 0; i < 3; ++i)
    gated_delta_step_ref(S.data(), e(i).data(), e(i).data(), vals[size_t(i)].data(), 0.0f, 1.0f, dk, dv, out.data());
  auto v1b = randn(3, 63);
  gated_delta_step_ref(S.data(), e(1).data(), e(1).data(), v1b.data(), 0.0f, 1.0f, dk, dv, out.data());
  EXPECT_LE(test::rel_l2(out, v1b), 1e-6);
  vals[1] = v1b;
  for (int64_t i = 0; i < 3; ++i) {  // reads with beta 0 leave the state unchanged
    std::vector<float> zero(static_cast<size_t>(dv), 0.0f);
    gated_delta_step_ref(S.data(), e(i).data(), e(i).data(), zero.data(), 0.0f, 0.0f, dk, dv, out.data());
    EXPECT_LE(test::rel_l2(out, vals[size_t(i)]), 1e-6) << i;
  }
}

TEST(LinearAttnRef, RmsNormGated) {
  const int64_t n = 37;
  auto x = randn(size_t(n), 70), z = randn(size_t(n), 71), w = randn(size_t(n), 72);
  std::vector<float> out(static_cast<size_t>(n));
  rmsnorm_gated_ref(x.data(), z.data(), w.data(), n, 1e-6f, out.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-6);
  for (int64_t i = 0; i < n; ++i) {
    const double zi = z[size_t(i)], want = x[size_t(i)] * inv * w[size_t(i)] * zi / (1.0 + std::exp(-zi));
    EXPECT_NEAR(out[size_t(i)], want, 1e-5);
  }
}

}  // namespace
}  // namespace moeflux
