// Reference ops of GatedDeltaNet linear attention (qwen3_next, qwen3_5_moe): the causal
// depthwise conv1d step, L2 normalisation, softplus, one step of the gated delta rule and the
// gated RMSNorm. Scalar f32 loops, the spec for faster versions; tested in
// tests/ops/test_linear_attn_ref.cpp against independent formulas.
#pragma once
#include <cstdint>

namespace moeflux {

// transformers (and the FLA kernels it mirrors) L2-normalise GatedDeltaNet's q and k with this
// fixed epsilon.
constexpr float kGdnL2NormEps = 1e-6f;

// One step of a causal depthwise conv1d over `channels` channels with kernel size `kernel`.
// x (channels): the new input; w (channels, kernel): tap kernel-1 multiplies x, tap j < kernel-1
// multiplies the input kernel-1-j steps back; state (kernel - 1, channels): the previous
// kernel-1 inputs, oldest first (zeros before the sequence starts). out (channels) = conv, no
// activation. Shifts x into the state.
void causal_conv1d_step_ref(const float* x, const float* w, int64_t channels, int64_t kernel, float* state,
                            float* out);

// out (n) = x * rsqrt(sum(x^2) + eps); out may alias x.
void l2norm_ref(const float* x, int64_t n, float eps, float* out);

// log(1 + exp(x)), returning x above 20 as torch's softplus (beta 1, threshold 20).
float softplus_ref(float x);

// One token of the gated delta rule for one value head with state S (k_dim, v_dim), row-major:
//   S *= exp(g);  kv = S^T k;  delta = (v - kv) * beta;  S += k delta^T;  out = S^T q.
// q, k (k_dim) already L2-normalised (q also scaled); v, out (v_dim).
void gated_delta_step_ref(float* S, const float* q, const float* k, const float* v, float g, float beta,
                          int64_t k_dim, int64_t v_dim, float* out);

// out (n) = rmsnorm(x) * w * silu(z); out may alias x.
void rmsnorm_gated_ref(const float* x, const float* z, const float* w, int64_t n, float eps, float* out);

}  // namespace moeflux
