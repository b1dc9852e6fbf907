// The table's mixers and FFNs: GQA (window, output gate, q/k norm, partial RoPE, decode after
// a long prefill), MLA (naive and absorbed, with and without q_lora, interleaved RoPE, decode
// after a long prefill, many heads), GatedDeltaNet (separate and packed projections), SwiGLU, MoE (each RouteKind, shared experts with and without their
// gate, experts resident or streamed from an ExpertSource in windows). The mixers run steps of
// one sequence (a prefill chunk, decode tokens, another chunk) or of three at once (prefill
// and decode rows mixed in one call); their outputs are every step's, then the states' buffers.
#include <algorithm>
#include <cmath>
#include <random>

#include "backend/backend_op_cases.h"
#include "core/aligned.h"

namespace moeflux::test {

namespace {

constexpr double kTol = 1e-5;

std::string tokens(int64_t T) { return "_T" + std::to_string(T); }

// 1 + small noise: a norm weight.
std::vector<float> norm_weight(int64_t n, uint32_t seed) {
  auto w = randn(size_t(n), seed, 0.1f);
  for (float& v : w) v += 1.0f;
  return w;
}

// Rows each sequence adds at each step (0: not in that step).
using Steps = std::vector<std::vector<int64_t>>;

// One sequence: a prefill chunk, two decode tokens, a short chunk. Three: the first prefilled
// alone, then steps that mix its decode tokens with the others' chunks and decode tokens, one
// sequence sitting a step out.
Steps mixer_steps(int n_seqs, int64_t prefill = kPrefillT) {
  if (n_seqs == 1) return {{prefill}, {1}, {1}, {3}};
  return {{prefill, 0, 0}, {1, 7, 1}, {1, 0, 3}, {2, 1, 1}};
}

// A first chunk long enough that the GPU's decode attention splits each query's positions into
// slices (split-K: from 128 positions in the tiled kernels, 512 with a block per query head).
constexpr int64_t kLongPrefill = 2500;

std::string seqs_name(int n_seqs) { return n_seqs == 1 ? "" : "_" + std::to_string(n_seqs) + "seqs"; }

// Runs a stateful mixer, call(x, seqs, out), over steps of one or more sequences, each at its
// own positions 0, 1, ...: every step's output, then each state's buffers.
template <typename Spec, typename Call>
std::vector<float> run_steps(OpRun& r, const Spec& spec, const Steps& steps, Call call) {
  std::vector<std::unique_ptr<LayerState>> states;
  for (size_t i = 0; i < steps[0].size(); ++i) states.push_back(r.b.make_state(spec));
  std::vector<int64_t> pos(states.size(), 0);
  std::vector<float> out;
  uint32_t seed = 100;
  for (const auto& step : steps) {
    std::vector<SeqRows> seqs;
    int64_t R = 0;
    for (size_t i = 0; i < step.size(); ++i) {
      if (step[i] == 0) continue;
      seqs.push_back({R, step[i], pos[i], states[i].get()});
      R += step[i], pos[i] += step[i];
    }
    const Act x = r.act(R, spec.dim, randn(size_t(R * spec.dim), seed++)), y = r.act(R, spec.dim);
    call(x, std::span<const SeqRows>(seqs), y);
    for (float v : r.host(y)) out.push_back(v);
  }
  for (auto& st : states)
    for (const StateBuffer& b : st->buffers()) out.insert(out.end(), b.data->begin(), b.data->end());
  return out;
}

void add_gqa(std::vector<OpCase>& cases) {
  struct C {
    const char* name;
    WSpec f;
    int64_t dim, n_heads, n_kv_heads, head_dim, window;
    bool gated, qk_norm;
    double partial_rotary;
    int64_t prefill = kPrefillT;
  };
  for (const C& c : {C{"q4g32_qknorm", affine(4, 32), 64, 4, 2, 32, 0, false, true, 1.0},
                     C{"bf16_window3", dense(DType::BF16), 96, 4, 4, 16, 3, false, false, 1.0},
                     C{"q8g64_gated_qknorm_partial", affine(8, 64), 128, 4, 1, 64, 0, true, true, 0.25},
                     C{"fp8_window4_gated", fp8(128, 128), 96, 2, 2, 32, 4, true, true, 0.5},
                     C{"q4g64_mha", affine(4, 64), 128, 2, 2, 64, 0, false, false, 1.0},
                     C{"q4g32_long", affine(4, 32), 64, 4, 2, 32, 0, false, true, 1.0, kLongPrefill},
                     C{"bf16_window1000_gated_long", dense(DType::BF16), 96, 4, 4, 16, 1000, true, false, 1.0, kLongPrefill}})
    for (int n_seqs : {1, 3})
      cases.push_back({std::string("gqa_") + c.name + seqs_name(n_seqs), Op::GqaAttention, kTol, [c, n_seqs](OpRun& r) {
                         GqaSpec a;
                         a.dim = c.dim, a.n_heads = c.n_heads, a.n_kv_heads = c.n_kv_heads, a.head_dim = c.head_dim;
                         a.window = c.window, a.gated = c.gated;
                         a.wq = r.weight(c.f, c.n_heads * c.head_dim * (c.gated ? 2 : 1), c.dim, 51);
                         a.wk = r.weight(c.f, c.n_kv_heads * c.head_dim, c.dim, 52);
                         a.wv = r.weight(c.f, c.n_kv_heads * c.head_dim, c.dim, 53);
                         a.wo = r.weight(c.f, c.dim, c.n_heads * c.head_dim, 54);
                         if (c.qk_norm) a.q_norm = norm_weight(c.head_dim, 55), a.k_norm = norm_weight(c.head_dim, 56);
                         RopeConfig rc;
                         rc.partial_rotary_factor = c.partial_rotary;
                         a.rope = make_rope_table(rc, c.head_dim);
                         return run_steps(r, a, mixer_steps(n_seqs, c.prefill), [&](Act x, std::span<const SeqRows> seqs, Act y) {
                           r.b.gqa_attention(a, x, seqs, y);
                         });
                       }});
}

void add_mla(std::vector<OpCase>& cases) {
  struct C {
    WSpec f;
    MlaPath path;
    int64_t q_lora_rank;
    bool interleave;
    const char* suffix = "";
    int64_t H = 4, R = 32, P = 8, prefill = kPrefillT;
  };
  const int64_t dim = 64, nope = 16, vd = 16;
  // The last two: decode after a long prefill (the GPU's split-K), and more heads than a GPU block
  // takes with DeepSeek-V3's latent widths.
  for (const C& c : {C{affine(4, 32), MlaPath::Naive, 0, true}, C{affine(4, 32), MlaPath::Absorbed, 0, true},
                     C{dense(DType::BF16), MlaPath::Naive, 64, false}, C{dense(DType::BF16), MlaPath::Absorbed, 64, false},
                     C{fp8(128, 128), MlaPath::Naive, 64, true}, C{fp8(128, 128), MlaPath::Absorbed, 64, true},
                     C{affine(8, 32), MlaPath::Absorbed, 64, true},
                     C{affine(4, 32), MlaPath::Absorbed, 0, true, "_long", 4, 32, 8, kLongPrefill},
                     C{dense(DType::BF16), MlaPath::Absorbed, 0, true, "_h40r512", 40, 512, 64, 200}})
    for (int n_seqs : {1, 3})
      cases.push_back({std::string("mla_") + (c.path == MlaPath::Naive ? "naive_" : "absorbed_") + c.f.name() +
                           (c.q_lora_rank ? "_qlora" : "") + (c.interleave ? "_interleaved" : "") + c.suffix +
                           seqs_name(n_seqs),
                       Op::MlaAttention, kTol, [=](OpRun& r) {
                         const int64_t H = c.H, R = c.R, P = c.P;
                         MlaSpec a;
                         a.dim = dim, a.n_heads = H, a.q_lora_rank = c.q_lora_rank, a.kv_lora_rank = R;
                         a.qk_nope_dim = nope, a.qk_rope_dim = P, a.v_dim = vd, a.rope_interleave = c.interleave;
                         a.path = c.path;
                         a.scale = 1.0f / std::sqrt(float(nope + P)) * 1.2f;
                         if (c.q_lora_rank) {
                           a.wq_a = r.weight(c.f, c.q_lora_rank, dim, 61);
                           a.q_a_norm = norm_weight(c.q_lora_rank, 62);
                           a.wq_b = r.weight(c.f, H * (nope + P), c.q_lora_rank, 63);
                         } else {
                           a.wq = r.weight(c.f, H * (nope + P), dim, 64);
                         }
                         a.wkv_a = r.weight(c.f, R + P, dim, 65);
                         a.kv_a_norm = norm_weight(R, 66);
                         a.wkv_b = r.weight(c.f, H * (nope + vd), R, 67);
                         a.wo = r.weight(c.f, dim, H * vd, 68);
                         RopeConfig rc;
                         rc.type = "yarn", rc.factor = 4, rc.original_max_position_embeddings = 64, rc.mscale = 1;
                         rc.mscale_all_dim = 1;
                         a.rope = make_rope_table(rc, P);
                         return run_steps(r, a, mixer_steps(n_seqs, c.prefill), [&](Act x, std::span<const SeqRows> seqs, Act y) {
                           r.b.mla_attention(a, x, seqs, y);
                         });
                       }});
}

// Separate projections (qwen3_5_moe: qkv, z, b, a) or two packed ones with their rows in a
// shuffled order (qwen3_next's grouped qkvz and ba); small heads, and wide ones with a ragged
// v_dim.
void add_gdn(std::vector<OpCase>& cases) {
  struct C {
    WSpec f;
    bool packed;
    int64_t n_k_heads, n_v_heads, k_dim, v_dim;
  };
  for (const C& c : {C{dense(DType::BF16), false, 2, 4, 16, 8}, C{affine(4, 32), false, 2, 4, 16, 8},
                     C{affine(8, 32), true, 2, 4, 16, 8}, C{fp8(128, 128), true, 2, 4, 16, 8},
                     C{dense(DType::BF16), true, 1, 2, 128, 100}})
    for (int n_seqs : {1, 3})
      cases.push_back({"gdn_" + c.f.name() + (c.packed ? "_packed" : "_separate") + "_k" + std::to_string(c.k_dim) + "v" +
                           std::to_string(c.v_dim) + seqs_name(n_seqs),
                       Op::GatedDeltaNet, kTol, [c, n_seqs](OpRun& r) {
                         GdnSpec s;
                         s.dim = 64, s.n_k_heads = c.n_k_heads, s.n_v_heads = c.n_v_heads, s.k_dim = c.k_dim, s.v_dim = c.v_dim;
                         s.conv_kernel = 4;
                         const int64_t cd = s.conv_dim(), vd = s.value_dim();
                         std::vector<int64_t> rows = {cd, vd, s.n_v_heads, s.n_v_heads};
                         if (c.packed) rows = {cd + vd, 2 * s.n_v_heads};
                         std::vector<int32_t> dst(size_t(s.proj_dim()));
                         for (size_t i = 0; i < dst.size(); ++i) dst[i] = int32_t(i);
                         if (c.packed) {
                           std::shuffle(dst.begin(), dst.begin() + cd + vd, std::mt19937(71));
                           std::shuffle(dst.begin() + cd + vd, dst.end(), std::mt19937(72));
                         }
                         int64_t at = 0;
                         for (int64_t n : rows) {
                           s.in_proj.push_back({r.weight(c.f, n, s.dim, uint32_t(73 + at)),
                                                std::vector<int32_t>(dst.begin() + at, dst.begin() + at + n)});
                           at += n;
                         }
                         s.conv_w = randn(size_t(cd * s.conv_kernel), 74, 0.5f);
                         s.A_log = randn(size_t(s.n_v_heads), 75, 0.5f);
                         s.dt_bias = randn(size_t(s.n_v_heads), 76);
                         s.norm = norm_weight(s.v_dim, 77);
                         s.out_proj = r.weight(c.f, s.dim, vd, 78);
                         return run_steps(r, s, mixer_steps(n_seqs), [&](Act x, std::span<const SeqRows> seqs, Act y) {
                           r.b.gated_delta_net(s, x, seqs, y);
                         });
                       }});
}

constexpr int64_t kDim = 128, kHidden = 64;

SwiGlu swiglu_weights(OpRun& r, const WSpec& f, uint32_t seed, int64_t dim = kDim, int64_t hidden = kHidden) {
  return SwiGlu{r.weight(f, hidden, dim, seed), r.weight(f, hidden, dim, seed + 1), r.weight(f, dim, hidden, seed + 2)};
}

OpCase swiglu_case(const WSpec& f, int64_t dim, int64_t hidden, int64_t T) {
  return {"swiglu_" + f.name() + "_" + std::to_string(dim) + "x" + std::to_string(hidden) + tokens(T), Op::SwiGlu, kTol,
          [=](OpRun& r) {
            const SwiGlu s = swiglu_weights(r, f, 81, dim, hidden);
            const Act y = r.act(T, dim);
            r.b.swiglu(s, r.act(T, dim, randn(size_t(T * dim), 82)), y);
            return r.host(y);
          }};
}

void add_swiglu(std::vector<OpCase>& cases) {
  for (const WSpec& f : {dense(DType::BF16), affine(4, 64), affine(8, 32), affine(5, 64), fp8(128, 128)})
    for (int64_t T : {int64_t(1), int64_t(4), kPrefillT}) cases.push_back(swiglu_case(f, kDim, kHidden, T));
  // A Qwen3-30B-A3B expert: rows split over the threads.
  cases.push_back(swiglu_case(affine(4, 64), 2048, 768, 1));
}

// Expert records as a pack streams them: per expert, gate | up | down with each part 64-byte
// aligned. acquire copies a record into a slot of its own and runs the backend's transform on
// it; every other record is not ready at first (read in flight).
class TestSource final : public ExpertSource {
 public:
  struct Slot final : ExpertRef::Impl {
    AlignedVector<uint8_t> bytes;
    bool ready_now;
    bool ready() const override { return ready_now; }
    const uint8_t* wait() override { return bytes.data(); }
  };
  std::vector<AlignedVector<uint8_t>> records;  // by expert id
  RecordTransform transform;
  size_t win = 1;

  std::vector<ExpertRef> acquire(int, std::span<const int32_t> experts) override {
    std::vector<ExpertRef> refs;
    for (size_t i = 0; i < experts.size(); ++i) {
      auto slot = std::make_unique<Slot>();
      slot->bytes = records[size_t(experts[i])];
      slot->ready_now = i % 2 == 0;
      if (transform) transform(experts[i], slot->bytes.data());
      refs.emplace_back(std::move(slot));
    }
    return refs;
  }
  void prefetch(int, std::span<const int32_t>) override {}
  bool wants_prefetch() const override { return false; }
  size_t window(int) const override { return win; }
};

// Expert e's weights placed in a record as the source holds it; the views point at the same
// offsets in `image` (record_base), whose bytes are NaN codes and scales: only an op that
// computes with the fetched bytes gets ref's result.
SwiGlu place_expert(OpRun& r, const WSpec& f, uint32_t seed, AlignedVector<uint8_t>& rec, AlignedVector<uint8_t>& image,
                    int64_t dim = kDim, int64_t hidden = kHidden) {
  OwnedWeight* os[3] = {&r.raw(f, hidden, dim, seed), &r.raw(f, hidden, dim, seed + 1), &r.raw(f, dim, hidden, seed + 2)};
  size_t bytes = 0;
  for (OwnedWeight* o : os) bytes += o->data.size() + o->scales.size() + o->biases.size() + 3 * 64;
  rec.assign(bytes, 0), image.assign(bytes, 0xff);
  size_t at = 0;
  QWeight w[3];
  for (int i = 0; i < 3; ++i) {
    w[i] = os[i]->w;
    auto put = [&](const uint8_t*& p, const std::vector<uint8_t>& v) {
      if (!p) return;
      std::copy(v.begin(), v.end(), rec.begin() + ptrdiff_t(at));
      p = image.data() + at;
      at += (v.size() + 63) / 64 * 64;
    };
    put(w[i].data, os[i]->data);
    put(w[i].scales, os[i]->scales);
    put(w[i].biases, os[i]->biases);
    put(w[i].block_scales, os[i]->scales);
  }
  return SwiGlu{w[0], w[1], w[2]};
}

void add_moe(std::vector<OpCase>& cases) {
  struct C {
    const char* name;
    WSpec f;
    RouteKind kind;
    int64_t T;
    int n_shared;
    bool shared_gate;
    size_t window;  // 0: experts resident, else streamed in windows of this many
    int64_t dim = kDim, hidden = kHidden;
  };
  for (const C& c : {C{"softmax_topk_q4g32", affine(4, 32), RouteKind::SoftmaxTopK, 1, 0, false, 0},
                     C{"softmax_topk_q4g32", affine(4, 32), RouteKind::SoftmaxTopK, 6, 0, false, 0},
                     C{"softmax_topk_bf16_shared_gate", dense(DType::BF16), RouteKind::SoftmaxTopK, 1, 1, true, 0},
                     C{"softmax_topk_q4g64_shared_gate", affine(4, 64), RouteKind::SoftmaxTopK, 5, 1, true, 0},
                     C{"topk_softmax_q8g64", affine(8, 64), RouteKind::TopKSoftmax, 1, 0, false, 0},
                     C{"topk_softmax_q3g32", affine(3, 32), RouteKind::TopKSoftmax, 4, 0, false, 0},
                     C{"sigmoid_grouped_fp8_shared", fp8(128, 128), RouteKind::SigmoidGrouped, 1, 1, false, 0},
                     C{"sigmoid_grouped_q4g32_2shared", affine(4, 32), RouteKind::SigmoidGrouped, 4, 2, false, 0},
                     C{"softmax_topk_q4g32_streamed_w2", affine(4, 32), RouteKind::SoftmaxTopK, 1, 0, false, 2},
                     C{"softmax_topk_q4g64_streamed_w3", affine(4, 64), RouteKind::SoftmaxTopK, 6, 1, true, 3},
                     C{"topk_softmax_bf16_streamed_w1", dense(DType::BF16), RouteKind::TopKSoftmax, 3, 0, false, 1},
                     C{"sigmoid_grouped_fp8_streamed_w4", fp8(128, 128), RouteKind::SigmoidGrouped, 5, 1, false, 4},
                     C{"softmax_topk_q4g32_shared_gate", affine(4, 32), RouteKind::SoftmaxTopK, kPrefillT, 1, true, 0},
                     C{"sigmoid_grouped_q8g64", affine(8, 64), RouteKind::SigmoidGrouped, 3 * kPrefillT, 0, false, 0},
                     C{"topk_softmax_q4g64_streamed_w3", affine(4, 64), RouteKind::TopKSoftmax, 2 * kPrefillT, 1, false, 3},
                     // Experts with at least 16 pairs (some 33 or more: two tiles), which the cuda
                     // backend runs on tensor cores (mma_rows.cu), beside experts with fewer (q8g32,
                     // T 64: 12 to 19 pairs an expert); widths of whole 64-column stages and a half
                     // one (q8g32: dim 288, hidden 160).
                     C{"softmax_topk_q4g64_tc", affine(4, 64), RouteKind::SoftmaxTopK, 128, 0, false, 0, 320, 192},
                     C{"topk_softmax_q8g32_shared_gate_tc", affine(8, 32), RouteKind::TopKSoftmax, 64, 1, true, 0, 288, 160},
                     C{"sigmoid_grouped_q8g64_tc", affine(8, 64), RouteKind::SigmoidGrouped, 96, 0, false, 0, 256, 384},
                     C{"softmax_topk_q4g64_streamed_w3_tc", affine(4, 64), RouteKind::SoftmaxTopK, 128, 1, false, 3, 256, 128}})
    cases.push_back({std::string("moe_") + c.name + tokens(c.T), Op::Moe, kTol, [c](OpRun& r) {
                       const int64_t n_experts = 8;
                       MoeSpec& m = r.keep(std::make_unique<MoeSpec>());
                       m.dim = c.dim, m.n_experts = n_experts, m.n_experts_active = c.kind == RouteKind::SigmoidGrouped ? 3 : 2;
                       m.router = r.weight(dense(DType::BF16), n_experts, c.dim, 91);
                       m.route.kind = c.kind, m.route.n_experts = n_experts, m.route.k = m.n_experts_active;
                       m.route.renorm = c.T % 2 == 0;
                       m.route.grouped = GroupedRouteParams{n_experts, 4, 2, m.n_experts_active, true, 2.5f};
                       if (c.kind == RouteKind::SigmoidGrouped) m.route.bias = randn(size_t(n_experts), 92, 0.1f);
                       if (!c.window) {
                         for (int64_t e = 0; e < n_experts; ++e)
                           m.experts.push_back(swiglu_weights(r, c.f, uint32_t(200 + 3 * e), c.dim, c.hidden));
                       } else {
                         auto& src = r.keep(std::make_unique<TestSource>());
                         auto& images = r.keep(std::make_unique<std::vector<AlignedVector<uint8_t>>>(size_t(n_experts)));
                         src.records.resize(size_t(n_experts)), src.win = c.window;
                         for (int64_t e = 0; e < n_experts; ++e) {
                           const size_t i = size_t(e);
                           m.experts.push_back(place_expert(r, c.f, uint32_t(200 + 3 * e), src.records[i], images[i], c.dim, c.hidden));
                           m.record_base.push_back(images[i].data());
                         }
                         m.source = &src, m.source_layer = 0;
                         src.transform = r.b.expert_record_transform(m, /*all_cached=*/true);
                         m.prepared_records = bool(src.transform);
                       }
                       for (int i = 0; i < c.n_shared; ++i) m.shared.push_back(swiglu_weights(r, c.f, uint32_t(300 + 3 * i), c.dim, c.hidden));
                       if (c.shared_gate) m.shared_gate = r.weight(c.f, 1, c.dim, 93), m.has_shared_gate = true;
                       const Act y = r.act(c.T, c.dim);
                       r.b.moe(m, r.act(c.T, c.dim, randn(size_t(c.T * c.dim), 94)), y);
                       return r.host(y);
                     }});
}

}  // namespace

void add_block_cases(std::vector<OpCase>& cases) {
  add_gqa(cases);
  add_mla(cases);
  add_gdn(cases);
  add_swiglu(cases);
  add_moe(cases);
}

}  // namespace moeflux::test
