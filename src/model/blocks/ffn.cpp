// SwiGLU MLP and mixture-of-experts forward (reference path).
#include "model/blocks/ffn.h"

#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/ref/ref.h"

namespace moeflux {

void SwiGlu::apply(const float* x, float* out) const {
  std::vector<float> g(static_cast<size_t>(gate.rows)), u(static_cast<size_t>(up.rows));
  matvec(gate, x, g.data());
  matvec(up, x, u.data());
  swiglu_ref(g.data(), u.data(), gate.rows, g.data());
  matvec(down, g.data(), out);
}

void DenseMlp::forward(const float* x, int64_t T, float* out) const {
  for (int64_t t = 0; t < T; ++t) mlp.apply(x + t * dim, out + t * dim);
}

void MoeFfn::forward(const float* x, int64_t T, float* out) const {
  std::vector<float> logits(static_cast<size_t>(n_experts)), w(static_cast<size_t>(n_experts_active)), y(static_cast<size_t>(dim));
  std::vector<int32_t> ids(static_cast<size_t>(n_experts_active));
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    for (int64_t i = 0; i < dim; ++i) ot[i] = 0.0f;
    matvec(router, xt, logits.data());
    route(logits.data(), ids.data(), w.data());
    for (int64_t k = 0; k < n_experts_active; ++k) {
      experts[size_t(ids[k])].apply(xt, y.data());
      for (int64_t i = 0; i < dim; ++i) ot[i] += w[k] * y[i];
    }
    if (shared.empty()) continue;
    float scale = 1.0f;
    if (has_shared_gate) {
      float g = 0.0f;
      matvec(shared_gate, xt, &g);
      scale = 1.0f / (1.0f + std::exp(-g));
    }
    for (const auto& s : shared) {
      s.apply(xt, y.data());
      for (int64_t i = 0; i < dim; ++i) ot[i] += scale * y[i];
    }
  }
}

}  // namespace moeflux
