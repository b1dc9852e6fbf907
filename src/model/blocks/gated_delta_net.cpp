// GatedDeltaNet forward over its recurrent state (reference path, one token at a time).
#include "model/blocks/gated_delta_net.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/ref/linear_attn.h"
#include "ops/ref/ref.h"

namespace moeflux {

namespace {
// transformers (and the FLA kernels it mirrors) L2-normalise q and k with this fixed epsilon.
constexpr float kL2NormEps = 1e-6f;
}  // namespace

void GdnState::clear() {
  std::fill(conv.begin(), conv.end(), 0.0f);
  std::fill(recurrent.begin(), recurrent.end(), 0.0f);
}

void GatedDeltaNet::forward(const float* x, int64_t T, int64_t /*pos0*/, LayerState& st, float* out) const {
  auto& s = static_cast<GdnState&>(st);
  const int64_t cd = conv_dim(), kd = key_dim(), vd = value_dim(), group = n_v_heads / n_k_heads;
  std::vector<float> proj(static_cast<size_t>(proj_dim())), mixed(static_cast<size_t>(cd));
  const float* z = proj.data() + cd;
  const float* b = z + vd;
  const float* a = b + n_v_heads;
  float* q = mixed.data();
  float* k = q + kd;
  const float* v = k + kd;
  const float q_scale = 1.0f / std::sqrt(float(k_dim));
  // Input projections of all T tokens at once (each weight row read once per batch); the
  // recurrence below then walks the tokens in order.
  std::vector<std::vector<float>> projected(in_proj.size());
  for (size_t i = 0; i < in_proj.size(); ++i) {
    projected[i].resize(size_t(T * in_proj[i].w.rows));
    matmul(in_proj[i].w, x, T, projected[i].data());
  }
  std::vector<float> os(static_cast<size_t>(T * vd));
  for (int64_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < in_proj.size(); ++i) {
      const auto& p = in_proj[i];
      const float* pt = projected[i].data() + t * p.w.rows;
      for (int64_t r = 0; r < p.w.rows; ++r) proj[size_t(p.dst[size_t(r)])] = pt[r];
    }
    causal_conv1d_step_ref(proj.data(), conv_w.data(), cd, conv_kernel, s.conv.data(), mixed.data());
    for (auto& m : mixed) m = silu_ref(m);
    for (int64_t h = 0; h < n_k_heads; ++h) {
      l2norm_ref(q + h * k_dim, k_dim, kL2NormEps, q + h * k_dim);
      l2norm_ref(k + h * k_dim, k_dim, kL2NormEps, k + h * k_dim);
      for (int64_t i = 0; i < k_dim; ++i) q[h * k_dim + i] *= q_scale;
    }
    // Value heads over the threads: each owns its state and output.
    for_tokens(n_v_heads, k_dim * v_dim * 8, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t kh = h / group;  // consecutive value heads share a key head
        const float g = -std::exp(A_log[size_t(h)]) * softplus_ref(a[h] + dt_bias[size_t(h)]);
        const float beta = 1.0f / (1.0f + std::exp(-b[h]));
        float* oh = os.data() + t * vd + h * v_dim;
        gated_delta_step(s.recurrent.data() + h * k_dim * v_dim, q + kh * k_dim, k + kh * k_dim, v + h * v_dim, g,
                         beta, k_dim, v_dim, oh);
        rmsnorm_gated_ref(oh, z + h * v_dim, norm.data(), v_dim, norm_eps, oh);
      }
    });
  }
  matmul(out_proj, os.data(), T, out);
}

}  // namespace moeflux
