// Reference pieces of multi-head latent attention (MLA): matvecs over a row range of a weight
// (to fold kv_b_proj's per-head blocks into the query and the output without materialising
// them) and absorbed attention over the latent cache. Tested in tests/ops/test_mla_ref.cpp
// against expanding the cache into per-head keys and values.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "backend/ref/ref.h"

namespace moeflux {

void matvec_rows_ref(const QWeight& w, int64_t r0, int64_t n, const float* x, float* y) {
  MF_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= w.rows);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < n; ++r) {
    dequant_row_ref(w, r0 + r, row.data());
    float acc = 0.0f;
    for (int64_t c = 0; c < w.cols; ++c) acc += row[size_t(c)] * x[c];
    y[r] = acc;
  }
}

void matvec_t_rows_ref(const QWeight& w, int64_t r0, int64_t n, const float* x, float* y) {
  MF_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= w.rows);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t c = 0; c < w.cols; ++c) y[c] = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    dequant_row_ref(w, r0 + r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) y[c] += row[size_t(c)] * x[r];
  }
}

void mla_attention_absorbed_ref(const float* q_c, const float* q_pe, const float* c, const float* k_pe,
                                int64_t n_ctx, int64_t n_heads, int64_t rank, int64_t rope_dim, float scale,
                                float* out) {
  std::vector<float> p(static_cast<size_t>(n_ctx));
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* qc = q_c + h * rank;
    const float* qp = q_pe + h * rope_dim;
    for (int64_t t = 0; t < n_ctx; ++t) {
      const float* ct = c + t * rank;
      const float* kt = k_pe + t * rope_dim;
      float s = 0.0f;
      for (int64_t d = 0; d < rank; ++d) s += qc[d] * ct[d];
      for (int64_t d = 0; d < rope_dim; ++d) s += qp[d] * kt[d];
      p[size_t(t)] = s * scale;
    }
    softmax_ref(p.data(), n_ctx);
    float* oh = out + h * rank;
    for (int64_t d = 0; d < rank; ++d) oh[d] = 0.0f;
    for (int64_t t = 0; t < n_ctx; ++t) {
      const float* ct = c + t * rank;
      for (int64_t d = 0; d < rank; ++d) oh[d] += p[size_t(t)] * ct[d];
    }
  }
}

}  // namespace moeflux
