// SwiGLU MLP and mixture-of-experts forward; tokens of a batch are grouped by expert.
#include "model/blocks/ffn.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/ref/ref.h"

namespace moeflux {

void SwiGlu::apply(const float* x, float* out) const { apply_batch(x, 1, out); }

void SwiGlu::apply_batch(const float* x, int64_t T, float* out) const {
  if (T == 1) return swiglu_expert(gate, up, down, x, out);  // gate + up in one parallel region
  std::vector<float> g(static_cast<size_t>(T * gate.rows)), u(static_cast<size_t>(T * up.rows));
  matmul(gate, x, T, g.data());
  matmul(up, x, T, u.data());
  swiglu_ref(g.data(), u.data(), T * gate.rows, g.data());
  matmul(down, g.data(), T, out);
}

void DenseMlp::forward(const float* x, int64_t T, float* out) const { mlp.apply_batch(x, T, out); }

void MoeFfn::forward(const float* x, int64_t T, float* out) const {
  const int64_t K = n_experts_active;
  std::vector<float> logits(static_cast<size_t>(T * n_experts)), w(static_cast<size_t>(T * K));
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  matmul(router, x, T, logits.data());
  for (int64_t t = 0; t < T; ++t) route(logits.data() + t * n_experts, ids.data() + t * K, w.data() + t * K);
  // Group the batch by expert so that each routed expert's weights are read once per batch.
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(n_experts));
  for (int64_t i = 0; i < T * K; ++i) by_expert[size_t(ids[size_t(i)])].emplace_back(i / K, w[size_t(i)]);
  std::fill(out, out + T * dim, 0.0f);
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto& toks = by_expert[size_t(e)];
    if (toks.empty()) continue;
    const int64_t n = int64_t(toks.size());
    xe.resize(size_t(n * dim));
    ye.resize(size_t(n * dim));
    for (int64_t j = 0; j < n; ++j) std::copy_n(x + toks[size_t(j)].first * dim, dim, xe.data() + j * dim);
    experts[size_t(e)].apply_batch(xe.data(), n, ye.data());
    for (int64_t j = 0; j < n; ++j) {
      float* ot = out + toks[size_t(j)].first * dim;
      const float wt = toks[size_t(j)].second;
      for (int64_t i = 0; i < dim; ++i) ot[i] += wt * ye[size_t(j * dim + i)];
    }
  }
  if (shared.empty()) return;
  std::vector<float> scale(static_cast<size_t>(T), 1.0f);
  if (has_shared_gate) {
    matmul(shared_gate, x, T, scale.data());
    for (auto& g : scale) g = 1.0f / (1.0f + std::exp(-g));
  }
  ye.resize(size_t(T * dim));
  for (const auto& s : shared) {
    s.apply_batch(x, T, ye.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < dim; ++i) out[t * dim + i] += scale[size_t(t)] * ye[size_t(t * dim + i)];
  }
}

}  // namespace moeflux
