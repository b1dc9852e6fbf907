// GQA attention layer over a growing KV cache; projections batched over the T tokens.
#include "model/blocks/attention.h"

#include <cmath>

#include "core/phase_timer.h"
#include "ops/cpu/cpu_ops.h"

namespace moeflux {

void GqaAttention::forward(const float* x, int64_t T, int64_t pos0, LayerState& st, float* out) const {
  auto& kv = static_cast<KvCache&>(st);
  const int64_t qd = n_heads * head_dim, kd = n_kv_heads * head_dim, len0 = kv.len();
  const int64_t qrow = gated ? 2 * head_dim : head_dim;  // per head: query [, gate]
  std::vector<float> qg(static_cast<size_t>(T * n_heads * qrow)), q(static_cast<size_t>(T * qd)),
      gate(gated ? static_cast<size_t>(T * qd) : 0), att(static_cast<size_t>(T * qd));
  PhaseTimer pt("attn.qkv");
  kv.k.resize(size_t((len0 + T) * kd));
  kv.v.resize(size_t((len0 + T) * kd));
  // Project all T tokens at once (each weight row read once per batch), straight into the cache.
  if (T == 1) {  // decode: q, k and v in one parallel region
    const QWeight* ws[3] = {&wq, &wk, &wv};
    float* ys[3] = {qg.data(), kv.k.data() + len0 * kd, kv.v.data() + len0 * kd};
    matvec_multi(3, ws, x, ys);
  } else {
    matmul(wq, x, T, qg.data());
    matmul(wk, x, T, kv.k.data() + len0 * kd);
    matmul(wv, x, T, kv.v.data() + len0 * kd);
  }
  pt.next("attn.norm+rope");
  // Split q / gate, q / k norms and RoPE, token by token over the threads.
  for_tokens(T, (n_heads + n_kv_heads) * head_dim * 24, [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(static_cast<size_t>(rope.rot_dim));
    for (int64_t t = t0; t < t1; ++t) {
      float* qt = q.data() + t * qd;
      float* kt = kv.k.data() + (len0 + t) * kd;
      const float* qgt = qg.data() + t * n_heads * qrow;
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t d = 0; d < head_dim; ++d) {
          qt[h * head_dim + d] = qgt[h * qrow + d];
          if (gated) gate[size_t(t * qd + h * head_dim + d)] = qgt[h * qrow + head_dim + d];
        }
      rope_angles(rope, pos0 + t, cs.data());  // once per position, for all heads
      for (int64_t h = 0; h < n_heads; ++h) {
        if (!q_norm.empty()) rmsnorm_ref(qt + h * head_dim, q_norm.data(), head_dim, norm_eps, qt + h * head_dim);
        rope_apply(qt + h * head_dim, rope, cs.data());
      }
      for (int64_t h = 0; h < n_kv_heads; ++h) {
        if (!k_norm.empty()) rmsnorm_ref(kt + h * head_dim, k_norm.data(), head_dim, norm_eps, kt + h * head_dim);
        rope_apply(kt + h * head_dim, rope, cs.data());
      }
    }
  });
  // Attend: token t sees positions <= pos0 + t (within the sliding window, if any).
  pt.next("attn.core+o");
  const float scale = 1.0f / std::sqrt(float(head_dim));
  attention_causal(q.data(), kv.k.data(), kv.v.data(), T, len0, window, n_heads, n_kv_heads, head_dim, head_dim,
                   scale, att.data());
  if (gated)
    for (int64_t i = 0; i < T * qd; ++i) att[size_t(i)] *= 1.0f / (1.0f + std::exp(-gate[size_t(i)]));
  matmul(wo, att.data(), T, out);
}

}  // namespace moeflux
