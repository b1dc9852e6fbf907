// Reference matvec, RMSNorm, SwiGLU, softmax and top-k.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "backend/ref/ref.h"

namespace moeflux {

void matvec_ref(const QWeight& w, const float* x, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequant_row_ref(w, r, row.data());
    float acc = 0.0f;
    for (int64_t c = 0; c < w.cols; ++c) acc += row[c] * x[c];
    y[r] = acc;
  }
}

void rmsnorm_ref(const float* x, const float* w, int64_t n, float eps, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

float silu_ref(float x) { return x / (1.0f + std::exp(-x)); }

void swiglu_ref(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_ref(gate[i]) * up[i];
}

void softmax_ref(float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += (x[i] = std::exp(x[i] - m));
  for (int64_t i = 0; i < n; ++i) x[i] /= s;
}

void topk_ref(const float* x, int64_t n, int64_t k, int32_t* ids) {
  MF_ASSERT(k >= 0 && k <= n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return x[a] > x[b] || (x[a] == x[b] && a < b);
  });
  std::copy(idx.begin(), idx.begin() + k, ids);
}

void route_softmax_topk_ref(const float* logits, int64_t n_experts, int64_t k, bool renorm,
                            int32_t* ids, float* weights) {
  std::vector<float> p(logits, logits + n_experts);
  softmax_ref(p.data(), n_experts);
  topk_ref(p.data(), n_experts, k, ids);
  float s = 0.0f;
  for (int64_t i = 0; i < k; ++i) s += (weights[i] = p[ids[i]]);
  if (renorm)
    for (int64_t i = 0; i < k; ++i) weights[i] /= s;
}

void route_topk_softmax_ref(const float* logits, int64_t n_experts, int64_t k, int32_t* ids,
                            float* weights) {
  topk_ref(logits, n_experts, k, ids);
  for (int64_t i = 0; i < k; ++i) weights[i] = logits[ids[i]];
  softmax_ref(weights, k);
}

}  // namespace moeflux
