// Reference ops against independent double-precision formulas on random inputs, plus the
// properties that pin their conventions (RoPE pairing and relative-position invariance,
// top-k tie order, router normalisation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/ref/ref.h"
#include "util/random_weights.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using test::randn;

TEST(OpsRef, RmsNorm) {
  for (int64_t n : {1, 7, 128, 1000}) {
    auto x = randn(size_t(n), 1), w = randn(size_t(n), 2);
    std::vector<float> out(static_cast<size_t>(n));
    rmsnorm_ref(x.data(), w.data(), n, 1e-6f, out.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-6);
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] = float(x[size_t(i)] * inv * w[size_t(i)]);
    EXPECT_LE(test::rel_l2(out, want), 1e-6) << n;
  }
}

TEST(OpsRef, SoftmaxAndSwiglu) {
  auto x = randn(50, 3, 5.0f);
  auto p = x;
  softmax_ref(p.data(), 50);
  double z = 0;
  for (float v : x) z += std::exp(double(v));
  for (size_t i = 0; i < 50; ++i) EXPECT_NEAR(p[i], std::exp(double(x[i])) / z, 1e-6);
  auto g = randn(20, 4), u = randn(20, 5);
  std::vector<float> o(20);
  swiglu_ref(g.data(), u.data(), 20, o.data());
  for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(o[i], g[i] / (1 + std::exp(-double(g[i]))) * u[i], 1e-6);
}

TEST(OpsRef, TopKOrderAndTies) {
  std::vector<float> x{0.5f, 2.0f, 2.0f, -1.0f, 3.0f, 0.5f};
  std::vector<int32_t> ids(4);
  topk_ref(x.data(), 6, 4, ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 1, 2, 0}));  // ties go to the lower index
}

TEST(OpsRef, Routers) {
  std::vector<float> logits{1.0f, 3.0f, 0.0f, 2.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  route_softmax_topk_ref(logits.data(), 4, 2, /*renorm=*/false, ids.data(), w.data());
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(0.0) + std::exp(2.0);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
  route_softmax_topk_ref(logits.data(), 4, 2, /*renorm=*/true, ids.data(), w.data());
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
  EXPECT_NEAR(w[0] / w[1], std::exp(1.0), 1e-5);
  route_topk_softmax_ref(logits.data(), 4, 2, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
}

TEST(OpsRef, RopeRotateHalfPairsAndRelativePosition) {
  RopeConfig rc;
  rc.theta = 10000.0;
  for (double partial : {1.0, 0.25}) {
    rc.partial_rotary_factor = partial;
    const int64_t hd = 64;
    RopeTable t = make_rope_table(rc, hd);
    EXPECT_EQ(t.rot_dim, int64_t(hd * partial));
    // Against the formula: x_i' = x_i cos - x_{i+h} sin, x_{i+h}' = x_{i+h} cos + x_i sin.
    auto x = randn(size_t(hd), 6);
    auto y = x;
    rope_ref(y.data(), t, 17);
    const int64_t h = t.rot_dim / 2;
    for (int64_t i = 0; i < h; ++i) {
      const double f = std::pow(10000.0, -2.0 * double(i) / double(t.rot_dim)), a = 17 * f;
      EXPECT_NEAR(y[size_t(i)], x[size_t(i)] * std::cos(a) - x[size_t(i + h)] * std::sin(a), 1e-4);
      EXPECT_NEAR(y[size_t(i + h)], x[size_t(i + h)] * std::cos(a) + x[size_t(i)] * std::sin(a), 1e-4);
    }
    for (int64_t i = t.rot_dim; i < hd; ++i) EXPECT_EQ(y[size_t(i)], x[size_t(i)]);  // pass-through part
    // q(m) . k(n) depends on m - n only.
    auto q = randn(size_t(hd), 7), k = randn(size_t(hd), 8);
    auto dot_at = [&](int64_t m, int64_t n) {
      auto a = q, b = k;
      rope_ref(a.data(), t, m);
      rope_ref(b.data(), t, n);
      double s = 0;
      for (int64_t i = 0; i < hd; ++i) s += double(a[size_t(i)]) * b[size_t(i)];
      return s;
    };
    EXPECT_NEAR(dot_at(5, 2), dot_at(103, 100), 1e-3);
  }
}

TEST(OpsRef, YarnTableInterpolatesBetweenExtrapolationAndInterpolation) {
  RopeConfig rc;
  rc.type = "yarn";
  rc.theta = 10000.0;
  rc.factor = 40.0;
  rc.original_max_position_embeddings = 4096;
  rc.mscale = 1.0;
  rc.mscale_all_dim = 1.0;
  RopeTable t = make_rope_table(rc, 64);
  EXPECT_FLOAT_EQ(t.attn_factor, 1.0f);  // mscale / mscale_all_dim
  EXPECT_NEAR(t.inv_freq[0], 1.0, 1e-6);  // high-frequency dims keep their frequency
  const double last = std::pow(10000.0, -62.0 / 64.0) / 40.0;
  EXPECT_NEAR(t.inv_freq.back(), last, last * 1e-5);  // low-frequency dims are interpolated
}

TEST(OpsRef, AttentionGqaAgainstNaive) {
  const int64_t n_ctx = 9, H = 4, KV = 2, D = 16, VD = 8;
  auto q = randn(size_t(H * D), 9), k = randn(size_t(n_ctx * KV * D), 10), v = randn(size_t(n_ctx * KV * VD), 11);
  std::vector<float> out(static_cast<size_t>(H * VD));
  attention_ref(q.data(), k.data(), v.data(), n_ctx, H, KV, D, VD, 0.25f, out.data());
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / KV);
    std::vector<double> s(static_cast<size_t>(n_ctx));
    double mx = -1e30, z = 0;
    for (int64_t t = 0; t < n_ctx; ++t) {
      double d = 0;
      for (int64_t i = 0; i < D; ++i) d += double(q[size_t(h * D + i)]) * k[size_t((t * KV + g) * D + i)];
      s[size_t(t)] = d * 0.25;
      mx = std::max(mx, s[size_t(t)]);
    }
    for (auto& x : s) z += (x = std::exp(x - mx));
    for (int64_t i = 0; i < VD; ++i) {
      double o = 0;
      for (int64_t t = 0; t < n_ctx; ++t) o += s[size_t(t)] / z * v[size_t((t * KV + g) * VD + i)];
      EXPECT_NEAR(out[size_t(h * VD + i)], o, 1e-5);
    }
  }
}

TEST(OpsRef, DenseMatvecAllFloatTypes) {
  const int64_t R = 13, C = 67;
  auto w = randn(size_t(R * C), 12), x = randn(size_t(C), 13);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  for (DType dt : {DType::F32, DType::BF16}) {
    QWeight q;
    q.rows = R, q.cols = C, q.dtype = dt;
    q.data = dt == DType::F32 ? reinterpret_cast<const uint8_t*>(w.data()) : reinterpret_cast<const uint8_t*>(wb.data());
    std::vector<float> y(static_cast<size_t>(R));
    matvec_ref(q, x.data(), y.data());
    for (int64_t r = 0; r < R; ++r) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c)
        s += double(dt == DType::F32 ? w[size_t(r * C + c)] : bf16_to_f32(wb[size_t(r * C + c)])) * x[size_t(c)];
      EXPECT_NEAR(y[size_t(r)], s, 1e-4);
    }
  }
}

}  // namespace
}  // namespace moeflux
