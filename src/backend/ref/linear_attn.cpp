// Reference GatedDeltaNet ops: conv1d step, l2norm, softplus, gated delta rule, gated RMSNorm.
#include "backend/ref/linear_attn.h"

#include <algorithm>
#include <cmath>

#include "backend/ref/ref.h"

namespace moeflux {

void causal_conv1d_step_ref(const float* x, const float* w, int64_t channels, int64_t kernel, float* state,
                            float* out) {
  const int64_t hist = kernel - 1;
  for (int64_t c = 0; c < channels; ++c) {
    const float* wc = w + c * kernel;
    float acc = wc[hist] * x[c];
    for (int64_t j = 0; j < hist; ++j) acc += wc[j] * state[j * channels + c];
    out[c] = acc;
  }
  if (hist == 0) return;
  std::copy(state + channels, state + hist * channels, state);  // drop the oldest row
  std::copy(x, x + channels, state + (hist - 1) * channels);
}

void l2norm_ref(const float* x, int64_t n, float eps, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
}

float softplus_ref(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void gated_delta_step_ref(float* S, const float* q, const float* k, const float* v, float g, float beta,
                          int64_t k_dim, int64_t v_dim, float* out) {
  const float decay = std::exp(g);
  for (int64_t i = 0; i < k_dim * v_dim; ++i) S[i] *= decay;
  // delta (v_dim) = (v - S^T k) * beta, kept in `out` until the read-out below.
  for (int64_t j = 0; j < v_dim; ++j) {
    float kv = 0.0f;
    for (int64_t i = 0; i < k_dim; ++i) kv += S[i * v_dim + j] * k[i];
    out[j] = (v[j] - kv) * beta;
  }
  for (int64_t i = 0; i < k_dim; ++i)
    for (int64_t j = 0; j < v_dim; ++j) S[i * v_dim + j] += k[i] * out[j];
  for (int64_t j = 0; j < v_dim; ++j) {
    float o = 0.0f;
    for (int64_t i = 0; i < k_dim; ++i) o += S[i * v_dim + j] * q[i];
    out[j] = o;
  }
}

void rmsnorm_gated_ref(const float* x, const float* z, const float* w, int64_t n, float eps, float* out) {
  rmsnorm_ref(x, w, n, eps, out);
  for (int64_t i = 0; i < n; ++i) out[i] *= silu_ref(z[i]);
}

}  // namespace moeflux
