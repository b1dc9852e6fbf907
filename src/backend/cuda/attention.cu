// GQA on the device: per-head preparation of new tokens (q/gate split, q/k RMSNorm, RoPE,
// append to the KV cache) and causal attention with an online softmax, a block per (head,
// query) with its warps over interleaved cache positions.
#include <cmath>

#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kMaxHeadDim = 256, kPrepThreads = 64, kAttWarps = 4;

__global__ void gqa_prep_kernel(GqaDev a, const float* qg, const float* kn, const float* vn, int64_t pos0, int64_t len0,
                                float* q, float* gate, float* k, float* v) {
  __shared__ float vec[kMaxHeadDim];
  __shared__ float red[kPrepThreads / 32];
  const int64_t t = blockIdx.x;
  const int hd = a.head_dim, nq = a.n_heads, nkv = a.n_kv_heads;
  const bool is_q = int(blockIdx.y) < nq;
  const int h = is_q ? int(blockIdx.y) : int(blockIdx.y) - nq;
  const int qrow = a.gated ? 2 * hd : hd;
  const float* src = is_q ? qg + (t * nq + h) * qrow : kn + (t * nkv + h) * hd;
  float* dst = is_q ? q + (t * nq + h) * hd : k + ((len0 + t) * nkv + h) * hd;
  const float* nw = is_q ? a.q_norm : a.k_norm;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    const float x = src[i];
    vec[i] = x;
    ss += x * x;
    if (is_q && a.gated) gate[(t * nq + h) * hd + i] = src[hd + i];
    if (!is_q) v[((len0 + t) * nkv + h) * hd + i] = vn[(t * nkv + h) * hd + i];
  }
  if (nw) {
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = ss;
    __syncthreads();
    ss = 0.0f;
    for (int w = 0; w < kPrepThreads / 32; ++w) ss += red[w];
    const float inv = 1.0f / sqrtf(ss / float(hd) + a.norm_eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) vec[i] = vec[i] * inv * nw[i];
  }
  __syncthreads();
  const int half = a.rope.rot_dim / 2;
  const float pos = float(pos0 + t);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float ang = pos * a.rope.inv_freq[i];
    const float c = cosf(ang) * a.rope.attn_factor, s = sinf(ang) * a.rope.attn_factor;
    const float x1 = vec[i], x2 = vec[i + half];
    vec[i] = x1 * c - x2 * s;
    vec[i + half] = x2 * c + x1 * s;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < hd; i += blockDim.x) dst[i] = vec[i];
}

__global__ void __launch_bounds__(kAttWarps * 32)
    gqa_attend_kernel(GqaDev a, const float* q, const float* gate, const float* k, const float* v, int64_t len0,
                      float* att) {
  __shared__ float sm[kAttWarps], sl[kAttWarps], sacc[kAttWarps][kMaxHeadDim];
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x & 31, hd = a.head_dim;
  const int64_t t = blockIdx.y, idx = len0 + t;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int64_t first = a.window > 0 ? max(int64_t(0), idx + 1 - a.window) : 0;
  const float scale = 1.0f / sqrtf(float(hd));
  const int64_t stride = int64_t(a.n_kv_heads) * hd;
  const float* qh = q + (t * a.n_heads + h) * hd;
  float qv[kMaxHeadDim / 32], acc[kMaxHeadDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < hd ? qh[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t p = first + warp; p <= idx; p += kAttWarps) {
    const float* kp = k + p * stride + kvh * hd;
    const float* vp = v + p * stride + kvh * hd;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) s = fmaf(qv[i], kp[d], s);
    }
    s = warp_sum(s) * scale;
    const float mn = fmaxf(m, s), corr = expf(m - mn), e = expf(s - mn);
    l = l * corr + e;
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) acc[i] = acc[i] * corr + e * vp[d];
    }
    m = mn;
  }
  if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  float M = sm[0];
  for (int w = 1; w < kAttWarps; ++w) M = fmaxf(M, sm[w]);
  float den = 0.0f, f[kAttWarps];
  for (int w = 0; w < kAttWarps; ++w) {
    f[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M);
    den += sl[w] * f[w];
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f;
    for (int w = 0; w < kAttWarps; ++w) num += sacc[w][d] * f[w];
    float o = num / den;
    if (a.gated) o *= 1.0f / (1.0f + expf(-gate[(t * a.n_heads + h) * hd + d]));
    att[(t * a.n_heads + h) * hd + d] = o;
  }
}

}  // namespace

void gqa_prep(const GqaDev& a, const float* qg, const float* kn, const float* vn, int64_t T, int64_t pos0,
              int64_t len0, float* q, float* gate, float* k, float* v, cudaStream_t s) {
  MF_ASSERT(a.head_dim <= kMaxHeadDim);
  if (T == 0) return;
  gqa_prep_kernel<<<dim3(unsigned(T), unsigned(a.n_heads + a.n_kv_heads)), kPrepThreads, 0, s>>>(a, qg, kn, vn, pos0,
                                                                                              len0, q, gate, k, v);
  MF_CUDA_LAUNCHED("gqa_prep");
}

void gqa_attend(const GqaDev& a, const float* q, const float* gate, const float* k, const float* v, int64_t T,
                int64_t len0, float* att, cudaStream_t s) {
  MF_ASSERT(a.head_dim <= kMaxHeadDim);
  if (T == 0) return;
  gqa_attend_kernel<<<dim3(unsigned(a.n_heads), unsigned(T)), kAttWarps * 32, 0, s>>>(a, q, gate, k, v, len0, att);
  MF_CUDA_LAUNCHED("gqa_attend");
}

}  // namespace moeflux::cuda
