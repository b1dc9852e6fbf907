// CudaBackend's blocks: GQA over device KV caches, SwiGLU, the routed MoE (resident experts as
// one device table per layer; streamed experts copied to the device window by window), and
// the mixers that still run on the host.
#include <algorithm>
#include <optional>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/expert_records.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/gdn_state.cuh"
#include "backend/cuda/kv_cache.cuh"

namespace moeflux {

using namespace cuda;

void CudaBackend::gqa_attention(const GqaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  if (replaying()) {
    for (const SeqRows& s : seqs) static_cast<KvCacheDev&>(*s.state).grew(s.rows);
    return;
  }
  const Stage st(*this, "attention");
  const int64_t R = x.rows, hd = a.head_dim, qd = a.n_heads * hd, kd = a.n_kv_heads * hd;
  const int64_t qgd = a.gated ? 2 * qd : qd;
  Scratch sc(*pool_);
  float* qg = sc.get<float>(size_t(R * qgd));
  float* kn = sc.get<float>(size_t(R * kd));
  float* vn = sc.get<float>(size_t(R * kd));
  float* q = sc.get<float>(size_t(R * qd));
  float* gate = a.gated ? sc.get<float>(size_t(R * qd)) : nullptr;
  float* att = sc.get<float>(size_t(R * qd));
  const DW qkv[3] = {dw(a.wq), dw(a.wk), dw(a.wv)};
  float* const qkv_out[3] = {qg, kn, vn};
  mm(qkv, x.data, R, qkv_out);
  GqaDev g;
  g.n_heads = int32_t(a.n_heads), g.n_kv_heads = int32_t(a.n_kv_heads), g.head_dim = int32_t(hd);
  g.window = int32_t(a.window), g.gated = a.gated, g.norm_eps = a.norm_eps;
  g.q_norm = dvec(a.q_norm), g.k_norm = dvec(a.k_norm);
  g.rope = RopeDev{dvec(a.rope.inv_freq), int32_t(a.rope.rot_dim), a.rope.attn_factor};
  const int32_t* pos = positions(seqs, sc);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqRows& s = seqs[i];
    auto& kv = static_cast<KvCacheDev&>(*s.state);
    if (s.pos0 != kv.len()) fail("cuda backend: a sequence at position ", s.pos0, " has ", kv.len(), " cached positions");
    kv.reserve(s.pos0 + s.rows);
    gqa_prep(g, qg + s.row0 * qgd, kn + s.row0 * kd, vn + s.row0 * kd, s.rows, pos + i, q + s.row0 * qd,
             gate ? gate + s.row0 * qd : nullptr, kv.k(), kv.v(), stream_);
    const int splits = gqa_splits(g, s.rows, kv.capacity(), flash_attention_);
    float* part = splits > 1 ? sc.get<float>(size_t(gqa_part_floats(g, s.rows, splits))) : nullptr;
    gqa_attend(g, q + s.row0 * qd, gate ? gate + s.row0 * qd : nullptr, kv.k(), kv.v(), s.rows, pos + i,
               kv.capacity(), att + s.row0 * qd, stream_, splits, part, flash_attention_);
    kv.grew(s.rows);
  }
  mm(dw(a.wo), att, R, out.data);
}

void CudaBackend::host_mixer(Act x, Act out, const std::function<void(Act, Act)>& run) {
  step_recordable_ = false;
  const Stage st(*this, "attention (host)");
  std::vector<float> xh(x.size()), oh(out.size());
  to_host(x, xh.data());
  run(Act{xh.data(), x.rows, x.cols, Device::Host}, Act{oh.data(), out.rows, out.cols, Device::Host});
  from_host(oh.data(), out);
}

bool CudaBackend::mla_on_device(const MlaSpec& a) const { return mla_fits(mla_dev(a)); }
bool CudaBackend::gdn_on_device(const GdnSpec& a) const { return device_gdn_ && gdn_fits(gdn_dev(a)); }

MlaDev CudaBackend::mla_dev(const MlaSpec& a) const {
  MlaDev m;
  m.n_heads = int32_t(a.n_heads), m.nope = int32_t(a.qk_nope_dim), m.rope_dim = int32_t(a.qk_rope_dim);
  m.v_dim = int32_t(a.v_dim), m.rank = int32_t(a.kv_lora_rank), m.interleave = a.rope_interleave;
  m.scale = a.scale, m.eps = a.lora_norm_eps;
  return m;
}

// Both paths run in the latent space here (Naive equals Absorbed up to float rounding).
void CudaBackend::mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  if (!mla_on_device(a)) {
    host_mixer(x, out, [&](Act xh, Act oh) { host_->mla_attention(a, xh, seqs, oh); });
    return;
  }
  if (replaying()) {
    for (const SeqRows& s : seqs) static_cast<KvCacheDev&>(*s.state).grew(s.rows);
    return;
  }
  const Stage st(*this, "attention");
  MlaDev m = mla_dev(a);
  m.kv_a_norm = dvec(a.kv_a_norm);
  m.rope = RopeDev{dvec(a.rope.inv_freq), int32_t(a.rope.rot_dim), a.rope.attn_factor};
  const int64_t R = x.rows, H = a.n_heads, qk = a.qk_head_dim(), rank = a.kv_lora_rank, P = a.qk_rope_dim;
  Scratch sc(*pool_);
  float* q = sc.get<float>(size_t(R * H * qk));
  if (a.q_lora_rank > 0) {
    float* qa = sc.get<float>(size_t(R * a.q_lora_rank));
    mm(dw(a.wq_a), x.data, R, qa);
    cuda::add_rms_norm(qa, nullptr, dvec(a.q_a_norm), a.lora_norm_eps, qa, R, a.q_lora_rank, stream_);
    mm(dw(a.wq_b), qa, R, q);
  } else {
    mm(dw(a.wq), x.data, R, q);
  }
  float* kv = sc.get<float>(size_t(R * (rank + P)));
  mm(dw(a.wkv_a), x.data, R, kv);
  float* qpe = sc.get<float>(size_t(R * H * P));
  float* qc = sc.get<float>(size_t(R * H * rank));
  float* ctx = sc.get<float>(size_t(R * H * rank));
  float* att = sc.get<float>(size_t(R * H * a.v_dim));
  const DW kvb = dw(a.wkv_b);
  mla_absorb_q(m, kvb, q, R, qc, stream_);
  const int32_t* pos = positions(seqs, sc);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqRows& s = seqs[i];
    auto& lc = static_cast<KvCacheDev&>(*s.state);
    if (s.pos0 != lc.len()) fail("cuda backend: a sequence at position ", s.pos0, " has ", lc.len(), " cached positions");
    lc.reserve(s.pos0 + s.rows);
    mla_prep(m, q + s.row0 * H * qk, kv + s.row0 * (rank + P), s.rows, pos + i, qpe + s.row0 * H * P, lc.k(), lc.v(),
             stream_);
    const int splits = mla_splits(m, s.rows, lc.capacity());
    float* part = splits > 1 ? sc.get<float>(size_t(mla_part_floats(m, s.rows, splits))) : nullptr;
    mla_attend(m, qc + s.row0 * H * rank, qpe + s.row0 * H * P, lc.k(), lc.v(), s.rows, pos + i,
               ctx + s.row0 * H * rank, stream_, splits, part);
    lc.grew(s.rows);
  }
  mla_unabsorb(m, kvb, ctx, R, att, stream_);
  mm(dw(a.wo), att, R, out.data);
}

GdnDev CudaBackend::gdn_dev(const GdnSpec& a) const {
  GdnDev g;
  g.n_k_heads = int32_t(a.n_k_heads), g.n_v_heads = int32_t(a.n_v_heads), g.k_dim = int32_t(a.k_dim);
  g.v_dim = int32_t(a.v_dim), g.conv_kernel = int32_t(a.conv_kernel), g.norm_eps = a.norm_eps;
  return g;
}

void CudaBackend::gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  if (!gdn_on_device(a)) {
    host_mixer(x, out, [&](Act xh, Act oh) { host_->gated_delta_net(a, xh, seqs, oh); });
    return;
  }
  if (replaying()) return;
  const Stage st(*this, "attention");
  GdnDev g = gdn_dev(a);
  g.conv_w = dvec(a.conv_w), g.A_log = dvec(a.A_log), g.dt_bias = dvec(a.dt_bias), g.norm = dvec(a.norm);
  const int64_t R = x.rows, P = a.proj_dim(), vd = a.value_dim();
  Scratch sc(*pool_);
  float* proj = sc.get<float>(size_t(R * P));
  for (const GdnProjection& p : a.in_proj) {
    float* y = sc.get<float>(size_t(R * p.w.rows));
    mm(dw(p.w), x.data, R, y);
    const auto* dst = static_cast<const int32_t*>(mirror_.get(p.dst.data(), p.dst.size() * sizeof(int32_t)));
    gdn_scatter(y, R, p.w.rows, dst, P, proj, stream_);
  }
  float* o = sc.get<float>(size_t(R * vd));
  float* conv_next = sc.get<float>(size_t(std::max<int64_t>(1, (a.conv_kernel - 1) * a.conv_dim())));
  for (const SeqRows& s : seqs) {
    auto& st_dev = static_cast<GdnStateDev&>(*s.state);
    gdn_heads(g, proj + s.row0 * P, s.rows, st_dev.conv(), conv_next, st_dev.recurrent(), o + s.row0 * vd, stream_);
  }
  mm(dw(a.out_proj), o, R, out.data);
}

void CudaBackend::swiglu_rows(const SwiGlu& s, const float* x, int64_t T, float* out) {
  Scratch sc(*pool_);
  float* g = sc.get<float>(size_t(T * s.gate.rows));
  float* u = sc.get<float>(size_t(T * s.up.rows));
  const DW gu[2] = {dw(s.gate), dw(s.up)};
  float* const gu_out[2] = {g, u};
  mm(gu, x, T, gu_out);
  silu_mul(g, u, g, T * s.gate.rows, stream_);
  mm(dw(s.down), g, T, out);
}

void CudaBackend::swiglu(const SwiGlu& s, Act x, Act out) {
  if (replaying()) return;
  const Stage st(*this, "dense ffn");
  swiglu_rows(s, x.data, x.rows, out.data);
}

namespace {

// Device copies of n views spaced `bytes` apart when they are (one stacked tensor: one copy),
// else one by one.
std::vector<const uint8_t*> mirror_views(Mirror& mirror, const std::vector<const uint8_t*>& ps, size_t bytes) {
  std::vector<const uint8_t*> out(ps.size(), nullptr);
  bool stacked = !ps.empty() && ps[0];
  for (size_t i = 1; stacked && i < ps.size(); ++i) stacked = ps[i] == ps[0] + i * bytes;
  if (stacked) {
    const auto* base = static_cast<const uint8_t*>(mirror.get(ps[0], ps.size() * bytes));
    for (size_t i = 0; i < ps.size(); ++i) out[i] = base + i * bytes;
  } else {
    for (size_t i = 0; i < ps.size(); ++i) out[i] = static_cast<const uint8_t*>(mirror.get(ps[i], bytes));
  }
  return out;
}

}  // namespace

const CudaBackend::ExpertTable& CudaBackend::expert_table(const MoeSpec& m) {
  ExpertTable& t = tables_[&m];
  if (t.table && t.experts_data == m.experts[0].gate.data) return t;
  const size_t E = m.experts.size();
  std::vector<DW> host(3 * E);
  const QWeight* first[3] = {&m.experts[0].gate, &m.experts[0].up, &m.experts[0].down};
  for (int j = 0; j < 3; ++j) {
    auto of = [&](size_t e) -> const QWeight& {
      return j == 0 ? m.experts[e].gate : j == 1 ? m.experts[e].up : m.experts[e].down;
    };
    const QWeight& w0 = *first[j];
    const int fmt = cuda_fmt(w0);
    std::vector<const uint8_t*> data(E), scales(E), biases(E);
    for (size_t e = 0; e < E; ++e) {
      const QWeight& w = of(e);
      if (cuda_fmt(w) != fmt || w.rows != w0.rows || w.cols != w0.cols)
        fail(m.prefix, ": experts of different formats or shapes are not supported by the cuda backend");
      data[e] = w.data;
      scales[e] = w.format == WFormat::Fp8Block ? w.block_scales : w.scales;
      biases[e] = w.biases;
    }
    const DW proto = dw_view(w0);
    const size_t sb = scale_bytes(w0);
    const auto dd = mirror_views(mirror_, data, w0.data_bytes());
    const auto ds = sb ? mirror_views(mirror_, scales, sb) : std::vector<const uint8_t*>(E, nullptr);
    const auto db = w0.biases ? mirror_views(mirror_, biases, sb) : std::vector<const uint8_t*>(E, nullptr);
    for (size_t e = 0; e < E; ++e) {
      DW d = proto;
      d.data = dd[e], d.scales = ds[e], d.biases = db[e];
      host[3 * e + size_t(j)] = d;
    }
    (j == 2 ? t.fmt_down : t.fmt_gate_up) = fmt;
    if (j == 0) t.wide_gate_up = wide_rows(proto);
    if (j == 1) t.wide_gate_up = t.wide_gate_up && wide_rows(proto);
    if (j == 2) t.wide_down = wide_rows(proto);
    if (j == 1 && fmt != cuda_fmt(*first[0])) fail(m.prefix, ": gate and up experts differ in format");
  }
  t.vec_gate_up = vec_rows(host[1]) ? vec_group(host[0]) : 0, t.vec_down = vec_group(host[2]);
  if (!t.table) MF_CUDA(cudaMalloc(&t.table, host.size() * sizeof(DW)));
  MF_CUDA(cudaMemcpy(t.table, host.data(), host.size() * sizeof(DW), cudaMemcpyHostToDevice));
  t.experts_data = m.experts[0].gate.data;
  return t;
}

void CudaBackend::moe_streamed(const MoeSpec& m, const float* x, int64_t T, const int32_t* ids_dev,
                               const PairTiles& pt, float* h, float* y) {
  const int64_t K = m.n_experts_active, E = m.n_experts, hidden = m.experts[0].gate.rows;
  std::vector<int32_t> ids(size_t(T * K));
  MF_CUDA(cudaMemcpyAsync(ids.data(), ids_dev, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));
  std::vector<int32_t> used = ids;
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  const int fmt_gu = cuda_fmt(m.experts[0].gate), fmt_d = cuda_fmt(m.experts[0].down);
  size_t extent = 0;
  for (int32_t e : used) extent = std::max(extent, record_extent(m.experts[size_t(e)], m.record_base[size_t(e)]));
  extent = (extent + 255) / 256 * 256;
  const size_t win = std::max<size_t>(1, std::min(m.source->window(m.source_layer), used.size()));
  Scratch sc(*pool_);
  uint8_t* staging = sc.get<uint8_t>(win * extent);
  DW* table = sc.get<DW>(size_t(3 * E));
  std::vector<DW> host(size_t(3 * E));
  const DW gate0 = dw_view(m.experts[0].gate), up0 = dw_view(m.experts[0].up), down0 = dw_view(m.experts[0].down);
  // Records keep their tensors 64-byte aligned and the staging copies start 256-byte aligned.
  const bool wide_gu = wide_ && wide_rows(gate0) && wide_rows(up0), wide_d = wide_ && wide_rows(down0);
  const int64_t vec_gu = vec_rows(up0) ? vec_group(gate0) : 0, vec_d = vec_group(down0);
  for (size_t i0 = 0; i0 < used.size(); i0 += win) {
    const std::span<const int32_t> part(used.data() + i0, std::min(win, used.size() - i0));
    std::vector<ExpertRef> refs = m.source->acquire(m.source_layer, part);
    MF_ASSERT(refs.size() == part.size());
    std::fill(host.begin(), host.end(), DW{});
    for (size_t j = 0; j < part.size(); ++j) {
      const int32_t e = part[j];
      const SwiGlu& s = m.experts[size_t(e)];
      const uint8_t* base = m.record_base[size_t(e)];
      const uint8_t* bytes = refs[j].wait();
      uint8_t* dst = staging + j * extent;
      MF_CUDA(cudaMemcpyAsync(dst, bytes, record_extent(s, base), cudaMemcpyHostToDevice, stream_));
      refs[j].release();  // the pageable copy is staged when the call returns
      const SwiGlu d = rebased(s, base, dst);  // the views at the same offsets of the staged copy
      host[size_t(3 * e)] = on_device(gate0, d.gate);
      host[size_t(3 * e + 1)] = on_device(up0, d.up);
      host[size_t(3 * e + 2)] = on_device(down0, d.down);
    }
    MF_CUDA(cudaMemcpyAsync(table, host.data(), host.size() * sizeof(DW), cudaMemcpyHostToDevice, stream_));
    experts_gate_up(table, fmt_gu, wide_gu, vec_gu, hidden, m.dim, x, int32_t(K), pt, h, *pool_, stream_);
    experts_down(table, fmt_d, wide_d, vec_d, hidden, m.dim, h, int32_t(K), pt, y, *pool_, stream_);
    MF_CUDA(cudaStreamSynchronize(stream_));  // `host` and the staging are reused by the next window
  }
}

bool CudaBackend::tc_experts(const MoeSpec& m) const {
  if (!tc_prefill_) return false;
  const DW gate0 = dw_view(m.experts[0].gate), up0 = dw_view(m.experts[0].up), down0 = dw_view(m.experts[0].down);
  return tc_rows(gate0) && tc_rows(up0) && tc_rows(down0);
}

void CudaBackend::moe(const MoeSpec& m, Act x, Act out) {
  MF_ASSERT(!m.prepared_records);  // this backend has no RecordTransform
  const int64_t T = x.rows, K = m.n_experts_active, E = m.n_experts, dim = m.dim;
  if (replaying()) {  // the graph's small step leaves its routed ids for admit_routed()
    if (auto it = tiers_by_spec_.find(&m); m.source && it != tiers_by_spec_.end() && it->second && T <= kTierRows)
      it->second->pairs = T * K, ++tier_reads_.small_steps;
    return;
  }
  DeviceTier* tier = m.source && step_arm_ != 1 ? device_tier(m) : nullptr;
  if (m.source && !(tier && T <= kTierRows)) step_recordable_ = false;  // it waits for the host's reads
  const int64_t hidden = m.experts[0].gate.rows, pairs = T * K, tiles_max = max_tiles(pairs, E);
  Scratch sc(*pool_);
  std::optional<Stage> st(std::in_place, *this, "router");
  float* logits = sc.get<float>(size_t(T * E));
  mm(dw(m.router), x.data, T, logits);
  RouteDev r;
  r.kind = int32_t(m.route.kind), r.n_experts = int32_t(E), r.k = int32_t(K), r.renorm = m.route.renorm;
  if (m.route.kind == RouteKind::SigmoidGrouped) {
    r.renorm = m.route.grouped.renorm, r.scaling = m.route.grouped.scaling;
    r.n_group = int32_t(m.route.grouped.n_group), r.topk_group = int32_t(m.route.grouped.topk_group);
    r.bias = dvec(m.route.bias);
  }
  int32_t* ids = sc.get<int32_t>(size_t(pairs));
  float* weights = sc.get<float>(size_t(pairs));
  int32_t* order = sc.get<int32_t>(size_t(pairs));
  int32_t* sorted = sc.get<int32_t>(size_t(pairs));
  int32_t* tiles = sc.get<int32_t>(size_t(tiles_max * kTileFields));
  int32_t* n_tiles = sc.get<int32_t>(1);
  PairTiles pt;
  pt.pairs = pairs, pt.sorted = sorted, pt.tiles = tiles, pt.n_tiles = n_tiles, pt.tiles_max = tiles_max;
  int32_t *tc_tiles = nullptr, *n_tc = nullptr;
  if (tc_experts(m) && T >= kTcRows) {  // an expert has at most T pairs
    pt.tc_max = max_tc_tiles(pairs, E);
    tc_tiles = sc.get<int32_t>(size_t(pt.tc_max * kTileFields)), n_tc = sc.get<int32_t>(1);
    pt.tc_tiles = tc_tiles, pt.n_tc = n_tc;
  }
  // A small step through a tier leaves its routed ids for admit_routed(), written by the router
  // into the tier's mapped buffer. One token's pairs are grouped by the router too.
  const bool one = T == 1 && !tc_tiles;
  const TilesOut one_tiles{sorted, tiles, n_tiles};  // tiles_max >= K: max_tiles
  route(r, logits, T, ids, weights, order, stream_, tier && T <= kTierRows ? tier->ids_mapped : nullptr,
        one ? &one_tiles : nullptr);
  if (!one) group_pairs(ids, pairs, int32_t(E), kTcRows, sorted, tiles, n_tiles, tc_tiles, n_tc, stream_);
  float* h = sc.get<float>(size_t(pairs * hidden));
  float* y = sc.get<float>(size_t(pairs * dim));
  st.reset(), st.emplace(*this, "experts");
  if (!m.source) {
    const ExpertTable& t = expert_table(m);
    experts_gate_up(t.table, t.fmt_gate_up, wide_ && t.wide_gate_up, t.vec_gate_up, hidden, dim, x.data, int32_t(K), pt,
                    h, *pool_, stream_);
    experts_down(t.table, t.fmt_down, wide_ && t.wide_down, t.vec_down, hidden, dim, h, int32_t(K), pt, y, *pool_,
                 stream_);
  } else if (tier) {
    moe_tier(*tier, m, x.data, T, ids, pt, h, y);
  } else {
    if (opt_.expert_cache.empty() && m.source_layer >= opt_.cpu_moe_layers)
      moe_streamed(m, x.data, T, ids, pt, h, y);
    else
      moe_cached(m, x.data, T, ids, pt, h, y);
  }
  st.reset(), st.emplace(*this, "combine");
  combine(y, weights, order, T, int32_t(K), dim, out.data, stream_);
  if (m.shared.empty()) return;
  st.reset(), st.emplace(*this, "shared experts");
  float* gate = nullptr;
  if (m.has_shared_gate) {
    gate = sc.get<float>(size_t(T));
    mm(dw(m.shared_gate), x.data, T, gate);
  }
  float* ye = sc.get<float>(size_t(T * dim));
  for (const SwiGlu& s : m.shared) {
    swiglu_rows(s, x.data, T, ye);
    add_scaled_rows(out.data, ye, gate, m.has_shared_gate, T, dim, stream_);
  }
}

}  // namespace moeflux
