// RefBackend: each op spelled out with the reference ops, one token at a time, in the order
// that defines its result (experts summed in ascending id, products rounded before the add).
#include "backend/ref/ref_backend.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "backend/ref/linear_attn.h"
#include "backend/ref/ref.h"
#include "core/error.h"

namespace moeflux {

namespace {

void expect_host(std::initializer_list<Act> acts) {
  for (const Act& a : acts) MF_ASSERT(a.device == Device::Host);
}

std::vector<float> floats(int64_t n) { return std::vector<float>(static_cast<size_t>(n)); }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// y (T, w.rows) = x (T, w.cols) W^T, a token at a time.
void matmul_ref(const QWeight& w, const float* x, int64_t T, float* y) {
  for (int64_t t = 0; t < T; ++t) matvec_ref(w, x + t * w.cols, y + t * w.rows);
}

// out (s.down.rows) = down (silu(gate x) * (up x)) of one token.
void swiglu_token(const SwiGlu& s, const float* x, float* out) {
  std::vector<float> g = floats(s.gate.rows), u = floats(s.up.rows);
  matvec_ref(s.gate, x, g.data());
  matvec_ref(s.up, x, u.data());
  swiglu_ref(g.data(), u.data(), s.gate.rows, g.data());
  matvec_ref(s.down, g.data(), out);
}

// (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...): transformers' rope_interleave view, so
// that the rotate-half RoPE then rotates the original (x_2i, x_2i+1) pairs.
void deinterleave(float* v, int64_t n) {
  const std::vector<float> tmp(v, v + n);
  for (int64_t i = 0; i < n / 2; ++i) v[i] = tmp[size_t(2 * i)], v[i + n / 2] = tmp[size_t(2 * i + 1)];
}

// MLA attention of one query over the n_ctx cached positions, expanding every cached c with
// kv_b into per-head keys (k_nope | shared k_pe) and values. q (n_heads, qk_head_dim) roped;
// att (n_heads, v_dim).
void mla_attend_naive(const MlaSpec& a, const float* q, const LatentCache& lc, int64_t n_ctx, float* att) {
  const int64_t qk = a.qk_head_dim(), kvd = a.qk_nope_dim + a.v_dim, P = a.qk_rope_dim;
  std::vector<float> k = floats(n_ctx * a.n_heads * qk), v = floats(n_ctx * a.n_heads * a.v_dim),
                     kvb = floats(a.n_heads * kvd);
  for (int64_t s = 0; s < n_ctx; ++s) {
    matvec_ref(a.wkv_b, lc.c.data() + s * a.kv_lora_rank, kvb.data());
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const float* kvh = kvb.data() + h * kvd;
      float* kh = k.data() + (s * a.n_heads + h) * qk;
      std::copy_n(kvh, a.qk_nope_dim, kh);
      std::copy_n(lc.k_pe.data() + s * P, P, kh + a.qk_nope_dim);
      std::copy_n(kvh + a.qk_nope_dim, a.v_dim, v.data() + (s * a.n_heads + h) * a.v_dim);
    }
  }
  attention_ref(q, k.data(), v.data(), n_ctx, a.n_heads, a.n_heads, qk, a.v_dim, a.scale, att);
}

// The same in the latent space: q_c[h] = W_kb[h]^T q_nope[h] (so q_c . c = q_nope . k_nope),
// attention over (c, k_pe), then att[h] = W_vb[h] ctx[h] (= sum_t p_t v_t).
void mla_attend_absorbed(const MlaSpec& a, const float* q, const LatentCache& lc, int64_t n_ctx, float* att) {
  const int64_t qk = a.qk_head_dim(), kvd = a.qk_nope_dim + a.v_dim, R = a.kv_lora_rank, P = a.qk_rope_dim;
  std::vector<float> qc = floats(a.n_heads * R), qpe = floats(a.n_heads * P), ctx = floats(a.n_heads * R);
  for (int64_t h = 0; h < a.n_heads; ++h) {
    matvec_t_rows_ref(a.wkv_b, h * kvd, a.qk_nope_dim, q + h * qk, qc.data() + h * R);
    std::copy_n(q + h * qk + a.qk_nope_dim, P, qpe.data() + h * P);
  }
  mla_attention_absorbed_ref(qc.data(), qpe.data(), lc.c.data(), lc.k_pe.data(), n_ctx, a.n_heads, R, P, a.scale,
                             ctx.data());
  for (int64_t h = 0; h < a.n_heads; ++h)
    matvec_rows_ref(a.wkv_b, h * kvd + a.qk_nope_dim, a.v_dim, ctx.data() + h * R, att + h * a.v_dim);
}

// One sequence's rows x at positions pos0 .. through GQA attention over its cache kv.
void gqa_seq(const GqaSpec& a, Act x, int64_t pos0, KvCache& kv, Act out) {
  const int64_t hd = a.head_dim, qd = a.n_heads * hd, kd = a.n_kv_heads * hd;
  const int64_t qrow = a.gated ? 2 * hd : hd;  // per head: query [, gate]
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> qg = floats(a.n_heads * qrow), q = floats(qd), gate = floats(qd), att = floats(qd);
  for (int64_t t = 0; t < x.rows; ++t) {
    const int64_t pos = pos0 + t, len = kv.len();  // this token lands at cache index len
    kv.k.resize(size_t((len + 1) * kd));
    kv.v.resize(size_t((len + 1) * kd));
    float* k = kv.k.data() + len * kd;
    matvec_ref(a.wq, x.row(t), qg.data());
    matvec_ref(a.wk, x.row(t), k);
    matvec_ref(a.wv, x.row(t), kv.v.data() + len * kd);
    for (int64_t h = 0; h < a.n_heads; ++h) {
      float* qh = q.data() + h * hd;
      std::copy_n(qg.data() + h * qrow, hd, qh);
      if (a.gated) std::copy_n(qg.data() + h * qrow + hd, hd, gate.data() + h * hd);
      if (!a.q_norm.empty()) rmsnorm_ref(qh, a.q_norm.data(), hd, a.norm_eps, qh);
      rope_ref(qh, a.rope, pos);
    }
    for (int64_t h = 0; h < a.n_kv_heads; ++h) {
      float* kh = k + h * hd;
      if (!a.k_norm.empty()) rmsnorm_ref(kh, a.k_norm.data(), hd, a.norm_eps, kh);
      rope_ref(kh, a.rope, pos);
    }
    // Cache indices [first, len]: the last `window` of them when there is a window.
    const int64_t first = a.window > 0 ? std::max<int64_t>(0, len + 1 - a.window) : 0;
    attention_ref(q.data(), kv.k.data() + first * kd, kv.v.data() + first * kd, len + 1 - first, a.n_heads,
                  a.n_kv_heads, hd, hd, scale, att.data());
    if (a.gated)
      for (int64_t i = 0; i < qd; ++i) att[size_t(i)] *= sigmoid(gate[size_t(i)]);
    matvec_ref(a.wo, att.data(), out.row(t));
  }
}

// One sequence's rows x at positions pos0 .. through MLA over its latent cache lc.
void mla_seq(const MlaSpec& a, Act x, int64_t pos0, LatentCache& lc, Act out) {
  const int64_t qk = a.qk_head_dim(), R = a.kv_lora_rank, P = a.qk_rope_dim;
  std::vector<float> q = floats(a.n_heads * qk), qa = floats(a.q_lora_rank), kv = floats(R + P),
                     att = floats(a.n_heads * a.v_dim);
  for (int64_t t = 0; t < x.rows; ++t) {
    const int64_t pos = pos0 + t, len = lc.len();
    if (a.q_lora_rank > 0) {
      matvec_ref(a.wq_a, x.row(t), qa.data());
      rmsnorm_ref(qa.data(), a.q_a_norm.data(), a.q_lora_rank, a.lora_norm_eps, qa.data());
      matvec_ref(a.wq_b, qa.data(), q.data());
    } else {
      matvec_ref(a.wq, x.row(t), q.data());
    }
    for (int64_t h = 0; h < a.n_heads; ++h) {
      float* qpe = q.data() + h * qk + a.qk_nope_dim;
      if (a.rope_interleave) deinterleave(qpe, P);
      rope_ref(qpe, a.rope, pos);
    }
    matvec_ref(a.wkv_a, x.row(t), kv.data());
    lc.c.resize(size_t((len + 1) * R));
    lc.k_pe.resize(size_t((len + 1) * P));
    float* kpe = lc.k_pe.data() + len * P;
    rmsnorm_ref(kv.data(), a.kv_a_norm.data(), R, a.lora_norm_eps, lc.c.data() + len * R);
    std::copy_n(kv.data() + R, P, kpe);
    if (a.rope_interleave) deinterleave(kpe, P);
    rope_ref(kpe, a.rope, pos);
    if (a.path == MlaPath::Naive) mla_attend_naive(a, q.data(), lc, len + 1, att.data());
    else mla_attend_absorbed(a, q.data(), lc, len + 1, att.data());
    matvec_ref(a.wo, att.data(), out.row(t));
  }
}

// One sequence's rows x through GatedDeltaNet, its state s carried from token to token.
void gdn_seq(const GdnSpec& sp, Act x, GdnState& s, Act out) {
  const int64_t cd = sp.conv_dim(), kd = sp.key_dim(), vd = sp.value_dim(), group = sp.n_v_heads / sp.n_k_heads;
  // proj: [q | k | v | z | b | a] (GdnProjection); mixed: the conv's q | k | v.
  std::vector<float> proj = floats(sp.proj_dim()), mixed = floats(cd), o = floats(vd);
  const float* z = proj.data() + cd;
  const float* b = z + vd;
  const float* a = b + sp.n_v_heads;
  float* q = mixed.data();
  float* k = q + kd;
  const float* v = k + kd;
  for (int64_t t = 0; t < x.rows; ++t) {
    for (const GdnProjection& p : sp.in_proj) {
      std::vector<float> y = floats(p.w.rows);
      matvec_ref(p.w, x.row(t), y.data());
      for (int64_t r = 0; r < p.w.rows; ++r) proj[size_t(p.dst[size_t(r)])] = y[size_t(r)];
    }
    gdn_conv_qk_ref(sp, proj.data(), s.conv.data(), mixed.data());
    for (int64_t h = 0; h < sp.n_v_heads; ++h) {
      const int64_t kh = h / group;  // consecutive value heads share a key head
      const float g = gdn_decay_ref(sp, h, a[h]);
      float* oh = o.data() + h * sp.v_dim;
      gated_delta_step_ref(s.recurrent.data() + h * sp.k_dim * sp.v_dim, q + kh * sp.k_dim, k + kh * sp.k_dim,
                           v + h * sp.v_dim, g, sigmoid(b[h]), sp.k_dim, sp.v_dim, oh);
      rmsnorm_gated_ref(oh, z + h * sp.v_dim, sp.norm.data(), sp.v_dim, sp.norm_eps, oh);
    }
    matvec_ref(sp.out_proj, o.data(), out.row(t));
  }
}

}  // namespace

void RefBackend::embed(const QWeight& table, std::span<const int32_t> ids, Act out) {
  expect_host({out});
  for (size_t t = 0; t < ids.size(); ++t) dequant_row_ref(table, ids[t], out.row(int64_t(t)));
}

void RefBackend::add_rms_norm(Act x, const Act* y, const float* w, float eps, Act h) {
  expect_host({x, h});
  for (int64_t t = 0; t < x.rows; ++t) {
    if (y)
      for (int64_t i = 0; i < x.cols; ++i) x.row(t)[i] += y->row(t)[i];
    rmsnorm_ref(x.row(t), w, x.cols, eps, h.row(t));
  }
}

void RefBackend::add(Act x, Act y) {
  expect_host({x, y});
  for (size_t i = 0; i < x.size(); ++i) x.data[i] += y.data[i];
}

void RefBackend::rope(const RopeTable& t, int64_t head_dim, int64_t pos0, Act x) {
  expect_host({x});
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t h = 0; h < x.cols / head_dim; ++h) rope_ref(x.row(r) + h * head_dim, t, pos0 + r);
}

void RefBackend::matmul(std::span<const QWeight* const> ws, Act x, std::span<const Act> ys) {
  MF_ASSERT(ws.size() == ys.size());
  expect_host({x});
  for (size_t i = 0; i < ws.size(); ++i) {
    expect_host({ys[i]});
    matmul_ref(*ws[i], x.data, x.rows, ys[i].data);
  }
}

void RefBackend::gqa_attention(const GqaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  expect_host({x, out});
  for (const SeqRows& s : seqs)
    gqa_seq(a, x.rows_at(s.row0, s.rows), s.pos0, static_cast<KvCache&>(*s.state), out.rows_at(s.row0, s.rows));
}

void RefBackend::mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  expect_host({x, out});
  for (const SeqRows& s : seqs)
    mla_seq(a, x.rows_at(s.row0, s.rows), s.pos0, static_cast<LatentCache&>(*s.state), out.rows_at(s.row0, s.rows));
}

void RefBackend::gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  expect_host({x, out});
  for (const SeqRows& s : seqs)
    gdn_seq(a, x.rows_at(s.row0, s.rows), static_cast<GdnState&>(*s.state), out.rows_at(s.row0, s.rows));
}

void RefBackend::swiglu(const SwiGlu& s, Act x, Act out) {
  expect_host({x, out});
  for (int64_t t = 0; t < x.rows; ++t) swiglu_token(s, x.row(t), out.row(t));
}

void RefBackend::moe(const MoeSpec& m, Act x, Act out) {
  expect_host({x, out});
  // Records from a source are read as stored: this backend has no RecordTransform.
  MF_ASSERT(!m.prepared_records);
  const int64_t T = x.rows, K = m.n_experts_active, dim = m.dim;
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  std::vector<float> wt = floats(T * K), logits = floats(m.n_experts);
  for (int64_t t = 0; t < T; ++t) {
    matvec_ref(m.router, x.row(t), logits.data());
    route_ref(m.route, logits.data(), ids.data() + t * K, wt.data() + t * K);
  }
  std::vector<int32_t> used = ids;
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  // ys[e] (T, dim): expert e's output for the tokens routed to it (the other rows unused).
  std::vector<std::vector<float>> ys(static_cast<size_t>(m.n_experts));
  auto run = [&](int32_t e, const SwiGlu& s) {
    ys[size_t(e)] = floats(T * dim);
    for (int64_t t = 0; t < T; ++t)
      if (std::find(ids.begin() + t * K, ids.begin() + (t + 1) * K, e) != ids.begin() + (t + 1) * K)
        swiglu_token(s, x.row(t), ys[size_t(e)].data() + t * dim);
  };
  if (!m.source) {
    for (int32_t e : used) run(e, m.experts[size_t(e)]);
  } else {
    // The source's windows, each expert's record bytes as fetched. No prefetch of the next
    // layer: it is advisory, a matter of speed.
    const size_t win = m.source->window(m.source_layer);
    MF_ASSERT(win >= 1);
    for (size_t i0 = 0; i0 < used.size(); i0 += win) {
      const std::span<const int32_t> part(used.data() + i0, std::min(win, used.size() - i0));
      std::vector<ExpertRef> refs = m.source->acquire(m.source_layer, part);
      MF_ASSERT(refs.size() == part.size());
      for (size_t j = 0; j < part.size(); ++j) {
        const int32_t e = part[j];
        const uint8_t* bytes = refs[j].wait();
        const SwiGlu& s = m.experts[size_t(e)];
        const uint8_t* base = m.record_base[size_t(e)];
        run(e, rebased(s, base, bytes));
        refs[j].release();
      }
    }
  }
  // out[t] = sum of w * y over its experts in ascending id (k order among repeats), each
  // product rounded before it is added.
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.row(t);
    std::fill(o, o + dim, 0.0f);
    for (int32_t e : used)
      for (int64_t k = 0; k < K; ++k) {
        if (ids[size_t(t * K + k)] != e) continue;
        const float w = wt[size_t(t * K + k)];
        const float* y = ys[size_t(e)].data() + t * dim;
        for (int64_t i = 0; i < dim; ++i) {
          const float p = w * y[i];
          o[i] += p;
        }
      }
  }
  // Shared experts, scaled by sigmoid(shared_gate x) when gated.
  std::vector<float> ye = floats(dim);
  for (int64_t t = 0; t < T; ++t) {
    float scale = 1.0f;
    if (m.has_shared_gate) {
      matvec_ref(m.shared_gate, x.row(t), &scale);
      scale = sigmoid(scale);
    }
    for (const SwiGlu& s : m.shared) {
      swiglu_token(s, x.row(t), ye.data());
      for (int64_t i = 0; i < dim; ++i) out.row(t)[i] += scale * ye[size_t(i)];
    }
  }
}

void RefBackend::logits(const QWeight& head, Act x, float* logits) {
  expect_host({x});
  matmul_ref(head, x.data, x.rows, logits);
}

}  // namespace moeflux
