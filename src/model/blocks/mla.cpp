// MLA forward: projections into the latent cache, then naive or absorbed attention over it
// (optimised CPU ops throughout). Tests: tests/model/test_deepseek_v3.cpp (both paths against
// the goldens and each other), tests/ops/test_mla_ref.cpp (the absorbed op).
#include "model/blocks/mla.h"

#include <cstring>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"

namespace moeflux {

MlaPath parse_mla_path(const std::string& s, const std::string& what) {
  if (s == "naive") return MlaPath::Naive;
  if (s == "absorbed") return MlaPath::Absorbed;
  fail(what, ": unknown MLA path '", s, "' (naive or absorbed)");
}

const char* mla_path_name(MlaPath p) { return p == MlaPath::Naive ? "naive" : "absorbed"; }

namespace {
// (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...): transformers' rope_interleave view, so
// that the rotate-half RoPE then rotates the original (x_2i, x_2i+1) pairs.
void deinterleave(float* v, int64_t n) {
  std::vector<float> tmp(v, v + n);
  for (int64_t i = 0; i < n / 2; ++i) v[i] = tmp[size_t(2 * i)], v[i + n / 2] = tmp[size_t(2 * i + 1)];
}
}  // namespace

void MlaAttention::forward(const float* x, int64_t T, int64_t pos0, LayerState& st, float* out) const {
  auto& lc = static_cast<LatentCache&>(st);
  const int64_t qk = qk_head_dim(), R = kv_lora_rank, P = qk_rope_dim;
  // Projections of all T tokens at once (each weight row read once per batch).
  std::vector<float> q(static_cast<size_t>(T * n_heads * qk)), kv(static_cast<size_t>(T * (R + P)));
  if (q_lora_rank > 0) {
    std::vector<float> qa(static_cast<size_t>(T * q_lora_rank));
    matmul(wq_a, x, T, qa.data());
    for (int64_t t = 0; t < T; ++t)
      rmsnorm_ref(qa.data() + t * q_lora_rank, q_a_norm.data(), q_lora_rank, lora_norm_eps, qa.data() + t * q_lora_rank);
    matmul(wq_b, qa.data(), T, q.data());
  } else {
    matmul(wq, x, T, q.data());
  }
  matmul(wkv_a, x, T, kv.data());
  const int64_t len0 = lc.len();
  lc.c.resize(size_t((len0 + T) * R));
  lc.k_pe.resize(size_t((len0 + T) * P));
  std::vector<float> cs(static_cast<size_t>(rope.rot_dim));
  for (int64_t t = 0; t < T; ++t) {
    float* qt = q.data() + t * n_heads * qk;
    rope_angles(rope, pos0 + t, cs.data());  // once per position, for all heads
    for (int64_t h = 0; h < n_heads; ++h) {
      float* qpe = qt + h * qk + qk_nope_dim;
      if (rope_interleave) deinterleave(qpe, P);
      rope_apply(qpe, rope, cs.data());
    }
    const float* kvt = kv.data() + t * (R + P);
    float* ct = lc.c.data() + (len0 + t) * R;
    float* kt = lc.k_pe.data() + (len0 + t) * P;
    rmsnorm_ref(kvt, kv_a_norm.data(), R, lora_norm_eps, ct);
    std::memcpy(kt, kvt + R, size_t(P) * sizeof(float));
    if (rope_interleave) deinterleave(kt, P);
    rope_apply(kt, rope, cs.data());
  }
  if (path == MlaPath::Naive) attend_naive(q.data(), T, lc, out);
  else attend_absorbed(q.data(), T, lc, out);
}

void MlaAttention::attend_naive(const float* q, int64_t T, const LatentCache& lc, float* out) const {
  const int64_t qk = qk_head_dim(), kvd = qk_nope_dim + v_dim, P = qk_rope_dim;
  const int64_t n = lc.len(), first = lc.len() - T;
  // Expand the whole cache into per-head keys (k_nope | shared k_pe) and values.
  std::vector<float> k(static_cast<size_t>(n * n_heads * qk)), v(static_cast<size_t>(n * n_heads * v_dim)),
      kvb(static_cast<size_t>(n * n_heads * kvd)), att(static_cast<size_t>(T * n_heads * v_dim));
  matmul(wkv_b, lc.c.data(), n, kvb.data());
  for (int64_t s = 0; s < n; ++s) {
    const float* kvs = kvb.data() + s * n_heads * kvd;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* kh = k.data() + (s * n_heads + h) * qk;
      std::memcpy(kh, kvs + h * kvd, size_t(qk_nope_dim) * sizeof(float));
      std::memcpy(kh + qk_nope_dim, lc.k_pe.data() + s * P, size_t(P) * sizeof(float));
      std::memcpy(v.data() + (s * n_heads + h) * v_dim, kvs + h * kvd + qk_nope_dim, size_t(v_dim) * sizeof(float));
    }
  }
  attention_causal(q, k.data(), v.data(), T, first, 0, n_heads, n_heads, qk, v_dim, scale, att.data());
  matmul(wo, att.data(), T, out);
}

void MlaAttention::attend_absorbed(const float* q, int64_t T, const LatentCache& lc, float* out) const {
  const int64_t qk = qk_head_dim(), kvd = qk_nope_dim + v_dim, R = kv_lora_rank, P = qk_rope_dim;
  const int64_t first = lc.len() - T;
  std::vector<float> qc(static_cast<size_t>(n_heads * R)), qpe(static_cast<size_t>(n_heads * P)),
      ctx(static_cast<size_t>(n_heads * R)), att(static_cast<size_t>(T * n_heads * v_dim));
  for (int64_t t = 0; t < T; ++t) {
    const float* qt = q + t * n_heads * qk;
    // q_c[h] = W_kb[h]^T q_nope[h]: scores against c equal q_nope . (W_kb[h] c) = q_nope . k_nope.
    matvec_t_row_blocks(wkv_b, n_heads, 0, kvd, qk_nope_dim, qt, qk, qc.data(), R);
    for (int64_t h = 0; h < n_heads; ++h)
      std::memcpy(qpe.data() + h * P, qt + h * qk + qk_nope_dim, size_t(P) * sizeof(float));
    mla_attention_absorbed(qc.data(), qpe.data(), lc.c.data(), lc.k_pe.data(), first + t + 1, n_heads, R, P, scale,
                           ctx.data());
    // sum_t p_t v_t = W_vb[h] (sum_t p_t c_t).
    matvec_row_blocks(wkv_b, n_heads, qk_nope_dim, kvd, v_dim, ctx.data(), R, att.data() + t * n_heads * v_dim,
                      v_dim);
  }
  matmul(wo, att.data(), T, out);
}

int set_mla_path(Model& m, MlaPath path) {
  int n = 0;
  for (auto& l : m.layers)
    if (auto* a = dynamic_cast<MlaAttention*>(l.mixer.get())) a->path = path, ++n;
  return n;
}

}  // namespace moeflux
