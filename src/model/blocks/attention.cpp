// GQA attention layer over a growing KV cache (reference path).
#include "model/blocks/attention.h"
#include "ops/cpu/cpu_ops.h"

#include <cmath>

namespace moeflux {

void GqaAttention::forward(const float* x, int64_t T, int64_t pos0, LayerState& st, float* out) const {
  auto& kv = static_cast<KvCache&>(st);
  const int64_t qd = n_heads * head_dim, kd = n_kv_heads * head_dim, len0 = kv.len();
  const int64_t qrow = gated ? 2 * head_dim : head_dim;  // per head: query [, gate]
  std::vector<float> qg(static_cast<size_t>(n_heads * qrow)), q(static_cast<size_t>(T * qd)),
      gate(gated ? static_cast<size_t>(T * qd) : 0), att(static_cast<size_t>(qd));
  kv.k.resize(size_t((len0 + T) * kd));
  kv.v.resize(size_t((len0 + T) * kd));
  // Project and rotate all T tokens first, then attend: token t sees positions <= pos0 + t.
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * dim;
    float* qt = q.data() + t * qd;
    float* kt = kv.k.data() + (len0 + t) * kd;
    float* vt = kv.v.data() + (len0 + t) * kd;
    matvec(wq, xt, qg.data());
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t d = 0; d < head_dim; ++d) {
        qt[h * head_dim + d] = qg[size_t(h * qrow + d)];
        if (gated) gate[size_t(t * qd + h * head_dim + d)] = qg[size_t(h * qrow + head_dim + d)];
      }
    matvec(wk, xt, kt);
    matvec(wv, xt, vt);
    for (int64_t h = 0; h < n_heads; ++h) {
      if (!q_norm.empty()) rmsnorm_ref(qt + h * head_dim, q_norm.data(), head_dim, norm_eps, qt + h * head_dim);
      rope_ref(qt + h * head_dim, rope, pos0 + t);
    }
    for (int64_t h = 0; h < n_kv_heads; ++h) {
      if (!k_norm.empty()) rmsnorm_ref(kt + h * head_dim, k_norm.data(), head_dim, norm_eps, kt + h * head_dim);
      rope_ref(kt + h * head_dim, rope, pos0 + t);
    }
  }
  const float scale = 1.0f / std::sqrt(float(head_dim));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n_ctx = len0 + t + 1;
    const int64_t first = window > 0 && n_ctx > window ? n_ctx - window : 0;
    attention(q.data() + t * qd, kv.k.data() + first * kd, kv.v.data() + first * kd, n_ctx - first,
                  n_heads, n_kv_heads, head_dim, head_dim, scale, att.data());
    if (gated)
      for (int64_t i = 0; i < qd; ++i) att[size_t(i)] *= 1.0f / (1.0f + std::exp(-gate[size_t(t * qd + i)]));
    matvec(wo, att.data(), out + t * dim);
  }
}

}  // namespace moeflux
