// The Backend defaults shared by the host backends: host activations and host states.
#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/ref/linear_attn.h"
#include "core/error.h"

namespace moeflux {

const char* device_name(Device d) { return d == Device::Host ? "host" : "cuda"; }

const char* op_name(Op op) {
  switch (op) {
    case Op::Embed: return "embed";
    case Op::RmsNorm: return "rms_norm";
    case Op::Add: return "add";
    case Op::Rope: return "rope";
    case Op::Matmul: return "matmul";
    case Op::GqaAttention: return "gqa_attention";
    case Op::MlaAttention: return "mla_attention";
    case Op::GatedDeltaNet: return "gated_delta_net";
    case Op::SwiGlu: return "swiglu";
    case Op::Moe: return "moe";
    case Op::Logits: return "logits";
  }
  return "?";
}

std::string Backend::fact(const std::string& key) const {
  for (const auto& [k, v] : facts())
    if (k == key) return v;
  return "";
}

bool Backend::ab_switch(const std::string& name) const { fail(this->name(), " backend: no A/B switch named ", name); }

void Backend::set_ab_switch(const std::string& name, bool) { fail(this->name(), " backend: no A/B switch named ", name); }

uint64_t logit_order_key(float v, int32_t id) {
  uint32_t u = 0;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) == 0) u = 0;  // -0 as +0
  const uint32_t k = (u & 0x7fffffffu) > 0x7f800000u ? 0u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return uint64_t(k) << 32 | (0xffffffffu - uint32_t(id));
}

void top_logits_host(const float* row, int64_t V, int64_t n, float* vals, int32_t* ids) {
  MF_ASSERT(n >= 1 && n <= V);
  std::vector<uint64_t> key(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) key[size_t(i)] = logit_order_key(row[i], int32_t(i));
  std::partial_sort(key.begin(), key.begin() + n, key.end(), std::greater<>());
  for (int64_t i = 0; i < n; ++i) ids[i] = int32_t(0xffffffffu - uint32_t(key[size_t(i)])), vals[i] = row[ids[i]];
}

void Backend::logits_top(const QWeight& head, Act x, int64_t n, int pass, float* vals, int32_t* ids) {
  MF_ASSERT(pass >= 0 && n >= 1 && n <= head.rows);
  if (kept_.size() <= size_t(pass)) kept_.resize(size_t(pass) + 1);
  KeptPass& k = kept_[size_t(pass)];
  k.rows = x.rows, k.cols = head.rows;
  k.logits.resize(size_t(k.rows * k.cols));
  logits(head, x, k.logits.data());
  for (int64_t r = 0; r < k.rows; ++r) top_logits_host(k.logits.data() + r * k.cols, k.cols, n, vals + r * n, ids + r * n);
}

void Backend::kept_logits(int pass, int64_t row, std::span<const int32_t> ids, float* out) {
  if (pass < 0 || size_t(pass) >= kept_.size() || row < 0 || row >= kept_[size_t(pass)].rows)
    fail("kept_logits: no row ", row, " of a kept head pass ", pass);
  const KeptPass& k = kept_[size_t(pass)];
  const float* r = k.logits.data() + row * k.cols;
  if (ids.empty()) return void(std::copy(r, r + k.cols, out));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= k.cols) fail("kept_logits: token ", ids[i], " outside the head's ", k.cols, " rows");
    out[i] = r[ids[i]];
  }
}

void GdnState::clear() {
  std::fill(conv.begin(), conv.end(), 0.0f);
  std::fill(recurrent.begin(), recurrent.end(), 0.0f);
}

SwiGlu rebased(const SwiGlu& s, const uint8_t* from, const uint8_t* to) {
  auto move = [&](QWeight w) {
    for (const uint8_t** p : {&w.data, &w.scales, &w.biases, &w.block_scales})
      if (*p) *p = to + (*p - from);
    return w;
  };
  return SwiGlu{move(s.gate), move(s.up), move(s.down)};
}

void gdn_conv_qk_ref(const GdnSpec& sp, const float* proj, float* conv_state, float* mixed) {
  const int64_t cd = sp.conv_dim(), kd = sp.key_dim();
  causal_conv1d_step_ref(proj, sp.conv_w.data(), cd, sp.conv_kernel, conv_state, mixed);
  for (int64_t i = 0; i < cd; ++i) mixed[i] = silu_ref(mixed[i]);
  float *q = mixed, *k = mixed + kd;
  const float q_scale = 1.0f / std::sqrt(float(sp.k_dim));
  for (int64_t h = 0; h < sp.n_k_heads; ++h) {
    l2norm_ref(q + h * sp.k_dim, sp.k_dim, kGdnL2NormEps, q + h * sp.k_dim);
    l2norm_ref(k + h * sp.k_dim, sp.k_dim, kGdnL2NormEps, k + h * sp.k_dim);
    for (int64_t i = 0; i < sp.k_dim; ++i) q[h * sp.k_dim + i] *= q_scale;
  }
}

float gdn_decay_ref(const GdnSpec& sp, int64_t h, float a) {
  return -std::exp(sp.A_log[size_t(h)]) * softplus_ref(a + sp.dt_bias[size_t(h)]);
}

void route_ref(const RouterSpec& r, const float* logits, int32_t* ids, float* weights) {
  switch (r.kind) {
    case RouteKind::SoftmaxTopK: return route_softmax_topk_ref(logits, r.n_experts, r.k, r.renorm, ids, weights);
    case RouteKind::TopKSoftmax: return route_topk_softmax_ref(logits, r.n_experts, r.k, ids, weights);
    case RouteKind::SigmoidGrouped:
      return route_sigmoid_grouped_ref(logits, r.bias.empty() ? nullptr : r.bias.data(), r.grouped, ids, weights);
  }
}

namespace {
class HostActBuffer final : public ActBuffer {
 public:
  explicit HostActBuffer(size_t floats) : ActBuffer(nullptr, floats, Device::Host), v_(floats) { data_ = v_.data(); }

 private:
  std::vector<float> v_;
};
}  // namespace

bool Backend::prepare_weight(QWeight&, int64_t, bool) const { return false; }

RecordTransform Backend::expert_record_transform(const MoeSpec&, bool) const { return nullptr; }

std::unique_ptr<LayerState> Backend::make_state(const GqaSpec& a) const {
  return std::make_unique<KvCache>(a.n_kv_heads, a.head_dim, a.head_dim);
}

std::unique_ptr<LayerState> Backend::make_state(const MlaSpec& a) const {
  return std::make_unique<LatentCache>(a.kv_lora_rank, a.qk_rope_dim);
}

std::unique_ptr<LayerState> Backend::make_state(const GdnSpec& a) const {
  return std::make_unique<GdnState>(a.conv_kernel - 1, a.conv_dim(), a.n_v_heads, a.k_dim, a.v_dim);
}

std::unique_ptr<ActBuffer> Backend::alloc(size_t floats) const {
  MF_ASSERT(device() == Device::Host);
  return std::make_unique<HostActBuffer>(floats);
}

void Backend::to_host(Act x, float* out) const {
  MF_ASSERT(x.device == Device::Host);
  std::copy_n(x.data, x.size(), out);
}

void Backend::from_host(const float* in, Act x) const {
  MF_ASSERT(x.device == Device::Host);
  std::copy_n(in, x.size(), x.data);
}

}  // namespace moeflux
