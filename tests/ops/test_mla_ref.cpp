// MLA reference pieces: row-range matvecs (dense, bf16, FP8 blocks cut mid-block) against the
// dequantised matrix in double, and absorbed attention (fold kv_b into query and output)
// against expanding every latent entry into per-head keys and values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "backend/ref/ref.h"
#include "util/random_weights.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using test::randn;

QWeight dense_f32(const std::vector<float>& w, int64_t rows, int64_t cols) {
  QWeight q;
  q.rows = rows, q.cols = cols, q.dtype = DType::F32;
  q.data = reinterpret_cast<const uint8_t*>(w.data());
  return q;
}

TEST(MlaRef, RowRangeMatvecsAllFormats) {
  const int64_t R = 11, C = 10;
  auto wf = randn(size_t(R * C), 1);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
  // FP8 with 4x4 blocks: the row ranges below start and end inside blocks.
  std::vector<uint8_t> w8(wf.size());
  std::mt19937 rng(9);
  for (auto& b : w8) {
    b = uint8_t(rng() & 0xff);
    if ((b & 0x7f) == 0x7f) b = 0x38;  // not NaN
  }
  std::vector<float> scales{0.5f, 2.0f, 1.5f, 0.25f, 3.0f, 1.0f, 0.75f, 1.25f, 2.5f};  // (3, 3)
  QWeight qs[3] = {dense_f32(wf, R, C), dense_f32(wf, R, C), {}};
  qs[1].dtype = DType::BF16, qs[1].data = reinterpret_cast<const uint8_t*>(wb.data());
  qs[2].format = WFormat::Fp8Block, qs[2].dtype = DType::F8_E4M3, qs[2].rows = R, qs[2].cols = C;
  qs[2].data = w8.data(), qs[2].block_rows = 4, qs[2].block_cols = 4, qs[2].sdtype = DType::F32;
  qs[2].block_scales = reinterpret_cast<const uint8_t*>(scales.data());
  for (const QWeight& q : qs) {
    std::vector<double> full(static_cast<size_t>(R * C));
    std::vector<float> row(static_cast<size_t>(C));
    for (int64_t r = 0; r < R; ++r) {
      dequant_row_ref(q, r, row.data());
      for (int64_t c = 0; c < C; ++c) full[size_t(r * C + c)] = row[size_t(c)];
    }
    const int64_t r0 = 3, n = 6;
    auto x = randn(size_t(C), 2), xt = randn(size_t(n), 3);
    std::vector<float> y(static_cast<size_t>(n)), yt(static_cast<size_t>(C));
    matvec_rows_ref(q, r0, n, x.data(), y.data());
    matvec_t_rows_ref(q, r0, n, xt.data(), yt.data());
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += full[size_t((r0 + r) * C + c)] * x[size_t(c)];
      EXPECT_NEAR(y[size_t(r)], s, 1e-4 * (1 + std::abs(s))) << q.describe();
    }
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += full[size_t((r0 + r) * C + c)] * xt[size_t(r)];
      EXPECT_NEAR(yt[size_t(c)], s, 1e-4 * (1 + std::abs(s))) << q.describe();
    }
  }
}

TEST(MlaRef, AbsorbedEqualsExpandedAttention) {
  const int64_t H = 3, nope = 8, P = 4, vd = 6, rank = 12, n_ctx = 7;
  const float scale = 0.3f;
  const int64_t kvd = nope + vd;
  auto wkvb = randn(size_t(H * kvd * rank), 4, 0.4f);
  const QWeight kvb = dense_f32(wkvb, H * kvd, rank);
  auto c = randn(size_t(n_ctx * rank), 5), kpe = randn(size_t(n_ctx * P), 6);
  auto qn = randn(size_t(H * nope), 7), qp = randn(size_t(H * P), 8);

  // Absorbed: q_c = W_kb^T q_nope; attend in latent space; out = W_vb ctx.
  std::vector<float> qc(static_cast<size_t>(H * rank)), ctx(static_cast<size_t>(H * rank)),
      out(static_cast<size_t>(H * vd));
  for (int64_t h = 0; h < H; ++h) matvec_t_rows_ref(kvb, h * kvd, nope, qn.data() + h * nope, qc.data() + h * rank);
  mla_attention_absorbed_ref(qc.data(), qp.data(), c.data(), kpe.data(), n_ctx, H, rank, P, scale, ctx.data());
  for (int64_t h = 0; h < H; ++h) matvec_rows_ref(kvb, h * kvd + nope, vd, ctx.data() + h * rank, out.data() + h * vd);

  // Expanded, in double: k_t = (W_kb c_t | k_pe_t), v_t = W_vb c_t.
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> p(static_cast<size_t>(n_ctx)), v(static_cast<size_t>(n_ctx * vd));
    double mx = -1e300, z = 0;
    for (int64_t t = 0; t < n_ctx; ++t) {
      double s = 0;
      for (int64_t d = 0; d < nope; ++d) {
        double k = 0;
        for (int64_t j = 0; j < rank; ++j)
          k += double(wkvb[size_t((h * kvd + d) * rank + j)]) * c[size_t(t * rank + j)];
        s += qn[size_t(h * nope + d)] * k;
      }
      for (int64_t d = 0; d < P; ++d) s += double(qp[size_t(h * P + d)]) * kpe[size_t(t * P + d)];
      p[size_t(t)] = s * scale;
      mx = std::max(mx, p[size_t(t)]);
      for (int64_t d = 0; d < vd; ++d) {
        double vv = 0;
        for (int64_t j = 0; j < rank; ++j)
          vv += double(wkvb[size_t((h * kvd + nope + d) * rank + j)]) * c[size_t(t * rank + j)];
        v[size_t(t * vd + d)] = vv;
      }
    }
    for (auto& x : p) z += (x = std::exp(x - mx));
    for (int64_t d = 0; d < vd; ++d) {
      double o = 0;
      for (int64_t t = 0; t < n_ctx; ++t) o += p[size_t(t)] / z * v[size_t(t * vd + d)];
      EXPECT_NEAR(out[size_t(h * vd + d)], o, 1e-5 * (1 + std::abs(o))) << "head " << h << " dim " << d;
    }
  }
}

}  // namespace
}  // namespace moeflux
