// Reference causal GQA attention for one query position over a KV cache.
#include <cmath>
#include <vector>

#include "backend/ref/ref.h"

namespace moeflux {

void attention_ref(const float* q, const float* k, const float* v, int64_t n_ctx, int64_t n_heads,
                   int64_t n_kv_heads, int64_t head_dim, int64_t v_dim, float scale, float* out) {
  const int64_t group = n_heads / n_kv_heads;
  std::vector<float> p(static_cast<size_t>(n_ctx));
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t kvh = h / group;
    const float* qh = q + h * head_dim;
    for (int64_t t = 0; t < n_ctx; ++t) {
      const float* kt = k + (t * n_kv_heads + kvh) * head_dim;
      float s = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) s += qh[d] * kt[d];
      p[t] = s * scale;
    }
    softmax_ref(p.data(), n_ctx);
    float* oh = out + h * v_dim;
    for (int64_t d = 0; d < v_dim; ++d) oh[d] = 0.0f;
    for (int64_t t = 0; t < n_ctx; ++t) {
      const float* vt = v + (t * n_kv_heads + kvh) * v_dim;
      for (int64_t d = 0; d < v_dim; ++d) oh[d] += p[t] * vt[d];
    }
  }
}

}  // namespace moeflux
