// MLA forward: projections into the latent cache, then naive or absorbed attention over it
// (optimised CPU ops throughout). Tests: tests/model/test_deepseek_v3.cpp (both paths against
// the goldens and each other), tests/ops/test_mla_ref.cpp (the absorbed op).
#include "backend/cpu/blocks_cpu.h"

#include <cstring>

#include "core/error.h"
#include "backend/cpu/cpu_ops.h"

namespace moeflux::cpu {

namespace {
// (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...): transformers' rope_interleave view, so
// that the rotate-half RoPE then rotates the original (x_2i, x_2i+1) pairs.
void deinterleave(float* v, int64_t n) {
  std::vector<float> tmp(v, v + n);
  for (int64_t i = 0; i < n / 2; ++i) v[i] = tmp[size_t(2 * i)], v[i + n / 2] = tmp[size_t(2 * i + 1)];
}
}  // namespace

void attend_naive(const MlaSpec& a, const float* q, int64_t T, const LatentCache& lc, float* out);
void attend_absorbed(const MlaSpec& a, const float* q, int64_t T, const LatentCache& lc, float* out);

void mla_attention(const MlaSpec& a, const float* x, int64_t T, int64_t pos0, LatentCache& lc, float* out) {
  const int64_t qk = a.qk_head_dim(), R = a.kv_lora_rank, P = a.qk_rope_dim;
  // Projections of all T tokens at once (each weight row read once per batch).
  std::vector<float> q(static_cast<size_t>(T * a.n_heads * qk)), kv(static_cast<size_t>(T * (R + P)));
  if (a.q_lora_rank > 0) {
    std::vector<float> qa(static_cast<size_t>(T * a.q_lora_rank));
    matmul(a.wq_a, x, T, qa.data());
    for (int64_t t = 0; t < T; ++t)
      rmsnorm_ref(qa.data() + t * a.q_lora_rank, a.q_a_norm.data(), a.q_lora_rank, a.lora_norm_eps, qa.data() + t * a.q_lora_rank);
    matmul(a.wq_b, qa.data(), T, q.data());
  } else {
    matmul(a.wq, x, T, q.data());
  }
  matmul(a.wkv_a, x, T, kv.data());
  const int64_t len0 = lc.len();
  lc.c.resize(size_t((len0 + T) * R));
  lc.k_pe.resize(size_t((len0 + T) * P));
  std::vector<float> cs(static_cast<size_t>(a.rope.rot_dim));
  for (int64_t t = 0; t < T; ++t) {
    float* qt = q.data() + t * a.n_heads * qk;
    rope_angles(a.rope, pos0 + t, cs.data());  // once per position, for all heads
    for (int64_t h = 0; h < a.n_heads; ++h) {
      float* qpe = qt + h * qk + a.qk_nope_dim;
      if (a.rope_interleave) deinterleave(qpe, P);
      rope_apply(qpe, a.rope, cs.data());
    }
    const float* kvt = kv.data() + t * (R + P);
    float* ct = lc.c.data() + (len0 + t) * R;
    float* kt = lc.k_pe.data() + (len0 + t) * P;
    rmsnorm_ref(kvt, a.kv_a_norm.data(), R, a.lora_norm_eps, ct);
    std::memcpy(kt, kvt + R, size_t(P) * sizeof(float));
    if (a.rope_interleave) deinterleave(kt, P);
    rope_apply(kt, a.rope, cs.data());
  }
  if (a.path == MlaPath::Naive) attend_naive(a, q.data(), T, lc, out);
  else attend_absorbed(a, q.data(), T, lc, out);
}

void attend_naive(const MlaSpec& a, const float* q, int64_t T, const LatentCache& lc, float* out) {
  const int64_t qk = a.qk_head_dim(), kvd = a.qk_nope_dim + a.v_dim, P = a.qk_rope_dim;
  const int64_t n = lc.len(), first = lc.len() - T;
  // Expand the whole cache into per-head keys (k_nope | shared k_pe) and values.
  std::vector<float> k(static_cast<size_t>(n * a.n_heads * qk)), v(static_cast<size_t>(n * a.n_heads * a.v_dim)),
      kvb(static_cast<size_t>(n * a.n_heads * kvd)), att(static_cast<size_t>(T * a.n_heads * a.v_dim));
  matmul(a.wkv_b, lc.c.data(), n, kvb.data());
  for (int64_t s = 0; s < n; ++s) {
    const float* kvs = kvb.data() + s * a.n_heads * kvd;
    for (int64_t h = 0; h < a.n_heads; ++h) {
      float* kh = k.data() + (s * a.n_heads + h) * qk;
      std::memcpy(kh, kvs + h * kvd, size_t(a.qk_nope_dim) * sizeof(float));
      std::memcpy(kh + a.qk_nope_dim, lc.k_pe.data() + s * P, size_t(P) * sizeof(float));
      std::memcpy(v.data() + (s * a.n_heads + h) * a.v_dim, kvs + h * kvd + a.qk_nope_dim, size_t(a.v_dim) * sizeof(float));
    }
  }
  attention_causal(q, k.data(), v.data(), T, first, 0, a.n_heads, a.n_heads, qk, a.v_dim, a.scale, att.data());
  matmul(a.wo, att.data(), T, out);
}

void attend_absorbed(const MlaSpec& a, const float* q, int64_t T, const LatentCache& lc, float* out) {
  const int64_t qk = a.qk_head_dim(), kvd = a.qk_nope_dim + a.v_dim, R = a.kv_lora_rank, P = a.qk_rope_dim;
  const int64_t first = lc.len() - T;
  std::vector<float> qc(static_cast<size_t>(a.n_heads * R)), qpe(static_cast<size_t>(a.n_heads * P)),
      ctx(static_cast<size_t>(a.n_heads * R)), att(static_cast<size_t>(T * a.n_heads * a.v_dim));
  for (int64_t t = 0; t < T; ++t) {
    const float* qt = q + t * a.n_heads * qk;
    // q_c[h] = W_kb[h]^T q_nope[h]: scores against c equal q_nope . (W_kb[h] c) = q_nope . k_nope.
    matvec_t_row_blocks(a.wkv_b, a.n_heads, 0, kvd, a.qk_nope_dim, qt, qk, qc.data(), R);
    for (int64_t h = 0; h < a.n_heads; ++h)
      std::memcpy(qpe.data() + h * P, qt + h * qk + a.qk_nope_dim, size_t(P) * sizeof(float));
    mla_attention_absorbed(qc.data(), qpe.data(), lc.c.data(), lc.k_pe.data(), first + t + 1, a.n_heads, R, P, a.scale,
                           ctx.data());
    // sum_t p_t v_t = W_vb[h] (sum_t p_t c_t).
    matvec_row_blocks(a.wkv_b, a.n_heads, a.qk_nope_dim, kvd, a.v_dim, ctx.data(), R, att.data() + t * a.n_heads * a.v_dim,
                      a.v_dim);
  }
  matmul(a.wo, att.data(), T, out);
}

}  // namespace moeflux::cpu
