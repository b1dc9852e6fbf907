// GQA on the device: per-head preparation of new tokens (q/gate split, q/k RMSNorm, RoPE,
// append to the KV cache) and causal attention with an online softmax: a block per (kv head,
// query) over tiles of positions read once for its query heads (flash_tile.cuh; the
// flash_attention switch), 4 queries a block in steps of several rows (prefill), else a block
// per (query head, query); over long contexts with few queries, blocks per slice of the
// positions whose parts a second kernel merges (split-K).
#include <algorithm>
#include <cmath>

#include "backend/cuda/block_math.cuh"
#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/flash_tile.cuh"
#include "backend/cuda/launch.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kMaxHeadDim = 256, kPrepThreads = 64, kAttWarps = 4;

__global__ void gqa_prep_kernel(GqaDev a, const float* qg, const float* kn, const float* vn, const int32_t* pos_at,
                                float* q, float* gate, float* k, float* v) {
  await_previous();
  __shared__ float vec[kMaxHeadDim];
  __shared__ float red[kPrepThreads / 32];
  const int64_t t = blockIdx.x, len0 = *pos_at;
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
  const float pos = float(len0 + t);
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

// The block's warps over positions [p0, p1) of query t's head h (interleaved, an online softmax
// each, then merged): the softmax's max M and denominator den, and its unnormalised weighted
// sum of the values (head_dim floats in shared memory, after a block barrier).
struct Online {
  float M, den;
  const float* num;
};

__device__ Online attend_online(const GqaDev& a, const float* q, const float* k, const float* v, int64_t t, int h,
                                int64_t p0, int64_t p1) {
  __shared__ float sm[kAttWarps], sl[kAttWarps], sacc[kAttWarps][kMaxHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, hd = a.head_dim;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
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
  for (int64_t p = p0 + warp; p < p1; p += kAttWarps) {
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
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {  // into warp 0's row: d is this thread's alone
    float num = 0.0f;
    for (int w = 0; w < kAttWarps; ++w) num += sacc[w][d] * f[w];
    sacc[0][d] = num;
  }
  __syncthreads();
  return Online{M, den, sacc[0]};
}

__global__ void __launch_bounds__(kAttWarps * 32)
    gqa_attend_kernel(GqaDev a, const float* q, const float* gate, const float* k, const float* v,
                      const int32_t* pos_at, float* att) {
  await_previous();
  const int h = blockIdx.x, hd = a.head_dim;
  const int64_t t = blockIdx.y, idx = *pos_at + t;
  const int64_t first = a.window > 0 ? max(int64_t(0), idx + 1 - a.window) : 0;
  const Online r = attend_online(a, q, k, v, t, h, first, idx + 1);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = r.num[d] / r.den;
    if (a.gated) o *= 1.0f / (1.0f + expf(-gate[(t * a.n_heads + h) * hd + d]));
    att[(t * a.n_heads + h) * hd + d] = o;
  }
}

// Split-K over a long context: block (h, t, s) runs attend_online over the s-th of gridDim.z
// equal slices of the query's positions (taken at run time from *pos_at: a recorded step keeps
// its slice count while its context grows) and writes its max, denominator and unnormalised
// sum to part ((t, h, s): head_dim + 4 floats, the sum at +4).
__global__ void __launch_bounds__(kAttWarps * 32)
    gqa_split_kernel(GqaDev a, const float* q, const float* k, const float* v, const int32_t* pos_at, float* part) {
  await_previous();
  const int h = blockIdx.x, hd = a.head_dim;
  const int64_t t = blockIdx.y, idx = *pos_at + t, S = gridDim.z;
  const int64_t first = a.window > 0 ? max(int64_t(0), idx + 1 - a.window) : 0;
  const int64_t per = (idx + 1 - first + S - 1) / S, p0 = first + blockIdx.z * per, p1 = min(p0 + per, idx + 1);
  const Online r = attend_online(a, q, k, v, t, h, p0, p1);
  float* out = part + ((t * a.n_heads + h) * S + blockIdx.z) * (hd + 4);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) out[4 + d] = r.num[d];
  if (threadIdx.x == 0) out[0] = r.M, out[1] = r.den;
}

// Block (h, t): the slices' parts of gqa_split_kernel merged (rescaled to their common max),
// normalised and gated.
__global__ void gqa_merge_kernel(GqaDev a, const float* part, int S, const float* gate, float* att) {
  await_previous();
  const int h = blockIdx.x, hd = a.head_dim;
  const int64_t t = blockIdx.y;
  merge_softmax_parts(part + (t * a.n_heads + h) * S * (hd + 4), S, hd + 4, 4, hd, [&](int d, float o) {
    if (a.gated) o *= 1.0f / (1.0f + expf(-gate[(t * a.n_heads + h) * hd + d]));
    att[(t * a.n_heads + h) * hd + d] = o;
  });
}

// The query heads of a kv head together, a block per (kv head and kGqaHeads of its query heads,
// query t, slice z of the query's positions) over tiles of the cache's key and value rows
// (flash_tile.cuh), a warp a query head. One slice (gridDim.z == 1): att written normalised and
// gated; several: each slice's part ((t, h, z): head_dim + 4 floats, the sum at +4), merged by
// gqa_merge_kernel. The slices are taken at run time from *pos_at.
constexpr int kGqaHeads = 8, kGqaChunks = kMaxHeadDim / 128;
// Queries a block of a step of several rows (a prefill) takes: each tile of keys and values read
// once for kGqaQueries x kGqaHeads (query, head) pairs, a warp a head over the queries.
constexpr int kGqaQueries = 4;

// Shared floats: a tile of keys, a tile of values, the block's scaled queries (Q a head).
__host__ __device__ inline int64_t gqa_flash_floats(int hd, int Q) {
  return int64_t(kFlashTile) * (flash_row(hd) + hd) + int64_t(kGqaHeads) * Q * hd;
}

// Block (x, y, z): kv head x / per_kv, its query heads from 8 (x % per_kv), queries [Q y, Q y +
// Q) of the step, slice z of their positions (Q == 1 where there are slices). A query's
// positions past its own (and before its window) are masked: each query gets the bits it gets
// alone (Q == 1) where there is no window, the tiles then starting at position 0 for both.
template <int Q>
__global__ void __launch_bounds__(kGqaHeads * 32)
    gqa_flash_kernel(GqaDev a, const float* q, const float* gate, const float* k, const float* v, const int32_t* pos_at,
                     int64_t T, float* att, float* part) {
  await_previous();
  extern __shared__ float4 smem4[];
  const int hd = a.head_dim, G = a.n_heads / a.n_kv_heads, per_kv = (G + kGqaHeads - 1) / kGqaHeads;
  const int kvh = blockIdx.x / per_kv, g0 = (blockIdx.x % per_kv) * kGqaHeads, krow = flash_row(hd);
  float* const ks = reinterpret_cast<float*>(smem4);
  float* const vs = ks + kFlashTile * krow;
  float* const qs = vs + kFlashTile * hd;  // (head, query, hd)
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t t0 = int64_t(blockIdx.y) * Q, S = gridDim.z;
  const int nq = int(min(int64_t(Q), T - t0));
  const int64_t idx0 = *pos_at + t0;  // query j's index: idx0 + j
  const auto first_of = [&](int64_t idx) { return a.window > 0 ? max(int64_t(0), idx + 1 - a.window) : int64_t(0); };
  const Slice sl = flash_slice(first_of(idx0), idx0 + nq, blockIdx.z, S);
  const float scale = 1.0f / sqrtf(float(hd));
  for (int i = threadIdx.x; i < kGqaHeads * Q * hd; i += blockDim.x) {
    const int j = i / (Q * hd), qi = (i / hd) % Q, h = kvh * G + g0 + j;
    qs[i] = g0 + j < G && qi < nq ? q[((t0 + qi) * a.n_heads + h) * hd + i % hd] * scale : 0.0f;
  }
  const int64_t stride = int64_t(a.n_kv_heads) * hd;
  const int hd4 = hd / 4;
  FlashAcc<Q, kGqaChunks> f;
  for (int64_t b = sl.p0; b < sl.p1; b += kFlashTile) {
    const int np = int(min(int64_t(kFlashTile), sl.p1 - b));
    __syncthreads();  // the previous tile is read
    for (int i = threadIdx.x; i < np * hd4; i += blockDim.x) {
      const int r = i / hd4, c = 4 * (i % hd4);
      const int64_t at = (b + r) * stride + kvh * hd + c;
      *reinterpret_cast<float4*>(ks + r * krow + c) = *reinterpret_cast<const float4*>(k + at);
      *reinterpret_cast<float4*>(vs + r * hd + c) = *reinterpret_cast<const float4*>(v + at);
    }
    __syncthreads();
    float sc[Q];
    flash_scores(sc, ks + min(lane, np - 1) * krow, qs + warp * Q * hd, hd, hd4);
    if constexpr (Q > 1) {
      const int64_t p = b + lane;
#pragma unroll
      for (int j = 0; j < Q; ++j)
        if (p > idx0 + j || p < first_of(idx0 + j)) sc[j] = -INFINITY;
    }
    f.add(sc, np, vs, hd, hd);
  }
  if (g0 + warp >= G) return;
  const int h = kvh * G + g0 + warp;
#pragma unroll
  for (int j = 0; j < Q; ++j) {
    if (j >= nq) break;
    const int64_t t = t0 + j;
    float* o = att + (t * a.n_heads + h) * hd;
    const float* gt = a.gated ? gate + (t * a.n_heads + h) * hd : nullptr;
    f.store(j, hd, S > 1, S > 1 ? part + ((t * a.n_heads + h) * S + blockIdx.z) * (hd + 4) : nullptr,
            [&](int d, float4 r) {
              if (gt) {
                r.x *= 1.0f / (1.0f + expf(-gt[d])), r.y *= 1.0f / (1.0f + expf(-gt[d + 1]));
                r.z *= 1.0f / (1.0f + expf(-gt[d + 2])), r.w *= 1.0f / (1.0f + expf(-gt[d + 3]));
              }
              *reinterpret_cast<float4*>(o + d) = r;
            });
  }
}

// The same in three passes over a context of at most kScoresMax positions (decode): the scores
// of all positions (each warp over interleaved positions, several keys in flight), their softmax
// in shared memory, then the weighted sum of the values (each warp over interleaved positions,
// lanes over float4 slices of the head). head_dim a multiple of 4.
constexpr int kScoreWarps = 8, kScoresMax = 8192, kUnroll = 4;

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

__global__ void __launch_bounds__(kScoreWarps * 32)
    gqa_attend_smem_kernel(GqaDev a, const float* q, const float* gate, const float* k, const float* v,
                           const int32_t* pos_at, float* att) {
  await_previous();
  __shared__ float sc[kScoresMax];
  __shared__ float part[kScoreWarps][kMaxHeadDim];
  __shared__ float red[kScoreWarps];
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x & 31, hd = a.head_dim;
  const int64_t t = blockIdx.y, idx = *pos_at + t;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int64_t first = a.window > 0 ? max(int64_t(0), idx + 1 - a.window) : 0;
  const int n = int(idx + 1 - first);
  const float scale = 1.0f / sqrtf(float(hd));
  const int64_t stride = int64_t(a.n_kv_heads) * hd;
  const float* qh = q + (t * a.n_heads + h) * hd;
  const int d0 = 4 * lane, d1 = 128 + 4 * lane;  // this lane's two float4 slices
  const bool has0 = d0 < hd, has1 = d1 < hd;
  const float4 z = make_float4(0, 0, 0, 0);
  const float4 q0 = has0 ? ld4(qh + d0) : z, q1 = has1 ? ld4(qh + d1) : z;
  const float* kb = k + first * stride + kvh * hd;
  for (int i0 = warp; i0 < n; i0 += kScoreWarps * kUnroll) {
    float s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * kScoreWarps;
      s[u] = 0.0f;
      if (i < n) {
        const float* kp = kb + int64_t(i) * stride;
        s[u] = (has0 ? dot4(q0, ld4(kp + d0)) : 0.0f) + (has1 ? dot4(q1, ld4(kp + d1)) : 0.0f);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float r = warp_sum(s[u]);
      const int i = i0 + u * kScoreWarps;
      if (lane == 0 && i < n) sc[i] = r * scale;
    }
  }
  __syncthreads();
  const float sum = block_exp_sum<kScoreWarps>(sc, n, red);
  float4 a0 = z, a1 = z;
  const float* vb = v + first * stride + kvh * hd;
  for (int i0 = warp; i0 < n; i0 += kScoreWarps * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * kScoreWarps;
      if (i >= n) break;
      const float e = sc[i];
      const float* vp = vb + int64_t(i) * stride;
      if (has0) {
        const float4 x = ld4(vp + d0);
        a0.x += e * x.x, a0.y += e * x.y, a0.z += e * x.z, a0.w += e * x.w;
      }
      if (has1) {
        const float4 x = ld4(vp + d1);
        a1.x += e * x.x, a1.y += e * x.y, a1.z += e * x.z, a1.w += e * x.w;
      }
    }
  }
  if (has0) *reinterpret_cast<float4*>(&part[warp][d0]) = a0;
  if (has1) *reinterpret_cast<float4*>(&part[warp][d1]) = a1;
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kScoreWarps; ++w) o += part[w][d];
    o /= sum;
    if (a.gated) o *= 1.0f / (1.0f + expf(-gate[(t * a.n_heads + h) * hd + d]));
    att[(t * a.n_heads + h) * hd + d] = o;
  }
}

}  // namespace

void gqa_prep(const GqaDev& a, const float* qg, const float* kn, const float* vn, int64_t T, const int32_t* pos,
              float* q, float* gate, float* k, float* v, cudaStream_t s) {
  MF_ASSERT(a.head_dim <= kMaxHeadDim);
  if (T == 0) return;
  launch("gqa_prep", gqa_prep_kernel, dim3(unsigned(T), unsigned(a.n_heads + a.n_kv_heads)), dim3(kPrepThreads), s, a, qg,
         kn, vn, pos, q, gate, k, v);
}

int split_slices(int64_t blocks, int64_t ctx_max, int64_t min_positions) {
  // Slices of at least min_positions positions, enough blocks for two a multiprocessor.
  const int64_t by_ctx = (ctx_max + min_positions - 1) / min_positions;
  const int64_t by_sms = (2 * std::max(multiprocessors(), 1) + blocks - 1) / blocks;
  return int(std::clamp<int64_t>(std::min(by_ctx, by_sms), 1, kMaxSplits));
}

bool gqa_flash_fits(const GqaDev& a) {
  return a.head_dim % 4 == 0 && a.head_dim <= kMaxHeadDim && a.n_heads % a.n_kv_heads == 0 &&
         gqa_flash_floats(a.head_dim, 1) * int64_t(sizeof(float)) <= smem_optin();
}

static int64_t gqa_flash_blocks(const GqaDev& a) {
  return int64_t(a.n_kv_heads) * ((a.n_heads / a.n_kv_heads + kGqaHeads - 1) / kGqaHeads);
}

int gqa_splits(const GqaDev& a, int64_t T, int64_t ctx_max, bool flash) {
  if (flash && gqa_flash_fits(a)) return split_slices(gqa_flash_blocks(a) * T, ctx_max, kFlashSlicePositions);
  return split_slices(a.n_heads * T, ctx_max, kSplitPositions);
}

void gqa_attend(const GqaDev& a, const float* q, const float* gate, const float* k, const float* v, int64_t T,
                const int32_t* pos, int64_t ctx_max, float* att, cudaStream_t s, int splits, float* part, bool flash) {
  MF_ASSERT(a.head_dim <= kMaxHeadDim);
  if (T == 0) return;
  MF_ASSERT(splits >= 1 && splits <= kMaxSplits && (splits == 1 || part));
  if (flash && gqa_flash_fits(a)) {
    const size_t several = size_t(gqa_flash_floats(a.head_dim, kGqaQueries)) * sizeof(float);
    if (T > 1 && splits == 1 && int64_t(several) <= smem_optin()) {
      allow_smem<gqa_flash_kernel<kGqaQueries>>(size_t(smem_optin()));
      launch_smem("gqa_flash", gqa_flash_kernel<kGqaQueries>,
                  dim3(unsigned(gqa_flash_blocks(a)), unsigned((T + kGqaQueries - 1) / kGqaQueries)), dim3(kGqaHeads * 32),
                  several, s, a, q, gate, k, v, pos, T, att, part);
      return;
    }
    allow_smem<gqa_flash_kernel<1>>(size_t(smem_optin()));
    launch_smem("gqa_flash", gqa_flash_kernel<1>, dim3(unsigned(gqa_flash_blocks(a)), unsigned(T), unsigned(splits)),
                dim3(kGqaHeads * 32), size_t(gqa_flash_floats(a.head_dim, 1)) * sizeof(float), s, a, q, gate, k, v, pos, T,
                att, part);
  } else if (splits > 1) {
    launch("gqa_split", gqa_split_kernel, dim3(unsigned(a.n_heads), unsigned(T), unsigned(splits)), dim3(kAttWarps * 32),
           s, a, q, k, v, pos, part);
  } else if (a.head_dim % 4 == 0 && ctx_max <= kScoresMax) {
    launch("gqa_attend", gqa_attend_smem_kernel, dim3(unsigned(a.n_heads), unsigned(T)), dim3(kScoreWarps * 32), s, a, q,
           gate, k, v, pos, att);
    return;
  } else {
    launch("gqa_attend", gqa_attend_kernel, dim3(unsigned(a.n_heads), unsigned(T)), dim3(kAttWarps * 32), s, a, q, gate,
           k, v, pos, att);
    return;
  }
  if (splits > 1)
    launch("gqa_merge", gqa_merge_kernel, dim3(unsigned(a.n_heads), unsigned(T)), dim3(128), s, a,
           static_cast<const float*>(part), splits, gate, att);
}

}  // namespace moeflux::cuda
