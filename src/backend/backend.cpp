// The Backend defaults shared by the host backends: host activations and host states.
#include "backend/backend.h"

#include <algorithm>
#include <cmath>
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
