// GQA attention layer over a growing KV cache; projections batched over the T tokens.
#include "backend/cpu/blocks_cpu.h"

#include <algorithm>
#include <cmath>

#include "core/phase_timer.h"
#include "backend/cpu/batch_buffers.h"
#include "backend/cpu/cpu_ops.h"

namespace moeflux::cpu {

namespace {
// The cos / sin table of `pos` (rope_angles), kept from the last call on this thread: every
// layer of a decode step asks for the same position with the same table, and 64 cos and 64 sin
// are ~2 us of serial time a layer.
const float* rope_angles_at(const RopeTable& t, int64_t pos) {
  thread_local struct {
    int64_t pos = -1;
    RopeTable t;
    std::vector<float> cs;
  } last;
  if (pos != last.pos || t.rot_dim != last.t.rot_dim || t.attn_factor != last.t.attn_factor || t.inv_freq != last.t.inv_freq) {
    last.t = t, last.pos = pos;
    last.cs.resize(size_t(t.rot_dim));
    rope_angles(t, pos, last.cs.data());
  }
  return last.cs.data();
}
}  // namespace

void gqa_attention(const GqaSpec& a, const float* x, int64_t T, int64_t pos0, KvCache& kv, float* out) {
  const int64_t qd = a.n_heads * a.head_dim, kd = a.n_kv_heads * a.head_dim, len0 = kv.len();
  const int64_t qrow = a.gated ? 2 * a.head_dim : a.head_dim;  // per head: query [, gate]
  // Per-thread buffers (backend/cpu/batch_buffers.h) for decode and batches alike: every
  // element is written before it is read. Four fresh zero-filled vectors per layer were serial
  // time (dev decode: 2.9 -> 1.5 us a layer outside the mixer's regions; prefill: 17 ms a layer
  // of page faults once the MoE layer's buffers were kept).
  struct Buffers {
    std::vector<float> qg, q, gate, att;
  };
  thread_local Buffers buf;
  float* qg = grown(buf.qg, size_t(T * a.n_heads * qrow));
  float* q = grown(buf.q, size_t(T * qd));
  float* att = grown(buf.att, size_t(T * qd));
  float* gate = a.gated ? grown(buf.gate, size_t(T * qd)) : nullptr;
  PhaseTimer pt("attn.qkv");
  kv.k.resize(size_t((len0 + T) * kd));
  kv.v.resize(size_t((len0 + T) * kd));
  // Block b of head_dim rows of a token's projection: a head's query (into q, then q norm and
  // RoPE) or, gated, the gate that follows it (into gate).
  const int64_t q_blocks = a.n_heads * qrow / a.head_dim;
  auto q_block = [&](int64_t t, int64_t b, const float* cs) {
    const int64_t h = b * a.head_dim / qrow;
    const float* src = qg + t * a.n_heads * qrow + b * a.head_dim;
    if (a.gated && b % 2 == 1) return (void)std::copy_n(src, a.head_dim, gate + t * qd + h * a.head_dim);
    float* qh = q + t * qd + h * a.head_dim;
    std::copy_n(src, a.head_dim, qh);
    if (!a.q_norm.empty()) rmsnorm(qh, a.q_norm.data(), a.head_dim, a.norm_eps, qh);
    rope_apply(qh, a.rope, cs);
  };
  auto k_head = [&](int64_t t, int64_t h, const float* cs) {
    float* kh = kv.k.data() + (len0 + t) * kd + h * a.head_dim;
    if (!a.k_norm.empty()) rmsnorm(kh, a.k_norm.data(), a.head_dim, a.norm_eps, kh);
    rope_apply(kh, a.rope, cs);
  };
  // Project all T tokens at once (each weight row read once per batch), straight into the cache.
  if (T == 1) {
    // Decode: q, k and v in one parallel region; each thread finishes the heads it computed.
    const float* cs = rope_angles_at(a.rope, pos0);
    const QWeight* ws[3] = {&a.wq, &a.wk, &a.wv};
    float* ys[3] = {qg, kv.k.data() + len0 * kd, kv.v.data() + len0 * kd};
    matvec_multi_epilogue(3, ws, x, ys, a.head_dim, [&](int i, int64_t r0, int64_t r1) {
      for (int64_t b = r0 / a.head_dim; b < r1 / a.head_dim; ++b) {
        if (i == 0) q_block(0, b, cs);
        else if (i == 1) k_head(0, b, cs);
      }
    });
  } else {
    const QWeight* ws[3] = {&a.wq, &a.wk, &a.wv};
    float* ys[3] = {qg, kv.k.data() + len0 * kd, kv.v.data() + len0 * kd};
    matmul_multi(3, ws, x, T, ys);
    pt.next("attn.norm+rope");
    // Token by token over the threads.
    for_tokens(T, (a.n_heads + a.n_kv_heads) * a.head_dim * 24, [&](int64_t t0, int64_t t1) {
      std::vector<float> cs(static_cast<size_t>(a.rope.rot_dim));
      for (int64_t t = t0; t < t1; ++t) {
        rope_angles(a.rope, pos0 + t, cs.data());  // once per position, for all heads
        for (int64_t b = 0; b < q_blocks; ++b) q_block(t, b, cs.data());
        for (int64_t h = 0; h < a.n_kv_heads; ++h) k_head(t, h, cs.data());
      }
    });
  }
  // Attend: token t sees positions <= pos0 + t (within the sliding window, if any).
  pt.next("attn.core+o");
  const float scale = 1.0f / std::sqrt(float(a.head_dim));
  if (T == 1) {
    attention_project(q, kv.k.data(), kv.v.data(), len0, a.window, a.n_heads, a.n_kv_heads, a.head_dim, scale, gate, att,
                      a.wo, out);
  } else {
    attention_causal(q, kv.k.data(), kv.v.data(), T, len0, a.window, a.n_heads, a.n_kv_heads, a.head_dim, a.head_dim,
                     scale, att);
    if (a.gated) sigmoid_gate(gate, att, T * qd);
    matmul(a.wo, att, T, out);
  }
  for (std::vector<float>* v : {&buf.qg, &buf.q, &buf.gate, &buf.att}) release_if_large(*v);
}

}  // namespace moeflux::cpu

namespace moeflux::cpu {

void gqa_attention_seqs(const GqaSpec& a, const float* x, std::span<const SeqRows> seqs, float* out) {
  const int64_t qd = a.n_heads * a.head_dim, kd = a.n_kv_heads * a.head_dim;
  const int64_t qrow = a.gated ? 2 * a.head_dim : a.head_dim;  // per head: query [, gate]
  const int64_t R = seqs.back().row0 + seqs.back().rows;
  struct Buffers {
    std::vector<float> qg, k, v, q, gate, att;
  };
  thread_local Buffers buf;
  float* qg = grown(buf.qg, size_t(R * a.n_heads * qrow));
  float* kb = grown(buf.k, size_t(R * kd));
  float* vb = grown(buf.v, size_t(R * kd));
  float* q = grown(buf.q, size_t(R * qd));
  float* att = grown(buf.att, size_t(R * qd));
  float* gate = a.gated ? grown(buf.gate, size_t(R * qd)) : nullptr;
  PhaseTimer pt("attn.qkv");
  // The projections of every sequence's rows at once: each weight row read once per step.
  const QWeight* ws[3] = {&a.wq, &a.wk, &a.wv};
  float* ys[3] = {qg, kb, vb};
  matmul_multi(3, ws, x, R, ys);
  pt.next("attn.norm+rope");
  // Each sequence's cache grows by its rows; row r's sequence, and its position in the cache.
  std::vector<int32_t> seq_of(static_cast<size_t>(R));
  std::vector<int64_t> len0(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto& kv = static_cast<KvCache&>(*seqs[i].state);
    len0[i] = kv.len();
    kv.k.resize(size_t((len0[i] + seqs[i].rows) * kd));
    kv.v.resize(size_t((len0[i] + seqs[i].rows) * kd));
    std::fill(seq_of.begin() + seqs[i].row0, seq_of.begin() + seqs[i].row0 + seqs[i].rows, int32_t(i));
  }
  for_tokens(R, (a.n_heads + a.n_kv_heads) * a.head_dim * 24, [&](int64_t r0, int64_t r1) {
    std::vector<float> cs(static_cast<size_t>(a.rope.rot_dim));
    for (int64_t r = r0; r < r1; ++r) {
      const size_t i = size_t(seq_of[size_t(r)]);
      const int64_t t = r - seqs[i].row0;
      auto& kv = static_cast<KvCache&>(*seqs[i].state);
      rope_angles(a.rope, seqs[i].pos0 + t, cs.data());
      for (int64_t h = 0; h < a.n_heads; ++h) {
        const float* src = qg + r * a.n_heads * qrow + h * qrow;
        float* qh = q + r * qd + h * a.head_dim;
        std::copy_n(src, a.head_dim, qh);
        if (a.gated) std::copy_n(src + a.head_dim, a.head_dim, gate + r * qd + h * a.head_dim);
        if (!a.q_norm.empty()) rmsnorm(qh, a.q_norm.data(), a.head_dim, a.norm_eps, qh);
        rope_apply(qh, a.rope, cs.data());
      }
      float* kr = kv.k.data() + (len0[i] + t) * kd;
      std::copy_n(kb + r * kd, kd, kr);
      std::copy_n(vb + r * kd, kd, kv.v.data() + (len0[i] + t) * kd);
      for (int64_t h = 0; h < a.n_kv_heads; ++h) {
        float* kh = kr + h * a.head_dim;
        if (!a.k_norm.empty()) rmsnorm(kh, a.k_norm.data(), a.head_dim, a.norm_eps, kh);
        rope_apply(kh, a.rope, cs.data());
      }
    }
  });
  pt.next("attn.core+o");
  const float scale = 1.0f / std::sqrt(float(a.head_dim));
  std::vector<CausalSeq> cs(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& kv = static_cast<const KvCache&>(*seqs[i].state);
    cs[i] = {q + seqs[i].row0 * qd, kv.k.data(), kv.v.data(), seqs[i].rows, len0[i], att + seqs[i].row0 * qd};
  }
  attention_causal_seqs(cs.data(), int(cs.size()), a.window, a.n_heads, a.n_kv_heads, a.head_dim, a.head_dim, scale);
  if (a.gated) sigmoid_gate(gate, att, R * qd);
  matmul(a.wo, att, R, out);
  for (std::vector<float>* v : {&buf.qg, &buf.k, &buf.v, &buf.q, &buf.gate, &buf.att}) release_if_large(*v);
}

}  // namespace moeflux::cpu
