// GatedDeltaNet on the CPU: projections batched over the T tokens, then the recurrence token by
// token (value heads over the threads).
#include "backend/cpu/blocks_cpu.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/ref/linear_attn.h"
#include "backend/ref/ref.h"

namespace moeflux::cpu {

void gated_delta_net(const GdnSpec& sp, const float* x, int64_t T, GdnState& s, float* out) {
  const int64_t cd = sp.conv_dim(), kd = sp.key_dim(), vd = sp.value_dim(), group = sp.n_v_heads / sp.n_k_heads;
  std::vector<float> proj(static_cast<size_t>(sp.proj_dim())), mixed(static_cast<size_t>(cd));
  const float* z = proj.data() + cd;
  const float* b = z + vd;
  const float* a = b + sp.n_v_heads;
  float* q = mixed.data();
  float* k = q + kd;
  const float* v = k + kd;
  // Input projections of all T tokens at once (each weight row read once per batch); the
  // recurrence below then walks the tokens in order.
  std::vector<std::vector<float>> projected(sp.in_proj.size());
  for (size_t i = 0; i < sp.in_proj.size(); ++i) {
    projected[i].resize(size_t(T * sp.in_proj[i].w.rows));
    matmul(sp.in_proj[i].w, x, T, projected[i].data());
  }
  std::vector<float> os(static_cast<size_t>(T * vd));
  for (int64_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < sp.in_proj.size(); ++i) {
      const auto& p = sp.in_proj[i];
      const float* pt = projected[i].data() + t * p.w.rows;
      for (int64_t r = 0; r < p.w.rows; ++r) proj[size_t(p.dst[size_t(r)])] = pt[r];
    }
    gdn_conv_qk_ref(sp, proj.data(), s.conv.data(), mixed.data());
    // Value heads over the threads: each owns its state and output.
    for_tokens(sp.n_v_heads, sp.k_dim * sp.v_dim * 8, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t kh = h / group;  // consecutive value heads share a key head
        const float g = gdn_decay_ref(sp, h, a[h]);
        const float beta = 1.0f / (1.0f + std::exp(-b[h]));
        float* oh = os.data() + t * vd + h * sp.v_dim;
        gated_delta_step(s.recurrent.data() + h * sp.k_dim * sp.v_dim, q + kh * sp.k_dim, k + kh * sp.k_dim, v + h * sp.v_dim, g,
                         beta, sp.k_dim, sp.v_dim, oh);
        rmsnorm_gated_ref(oh, z + h * sp.v_dim, sp.norm.data(), sp.v_dim, sp.norm_eps, oh);
      }
    });
  }
  matmul(sp.out_proj, os.data(), T, out);
}

}  // namespace moeflux::cpu
