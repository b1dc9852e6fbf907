// MLA on the device, in the latent space (the absorbed form): new tokens' q_pe and k_pe
// de-interleaved and roped, kv_a_layernorm(c) and k_pe appended to the latent cache; each
// head's q_nope folded through kv_b's key block (q_c = W_kb^T q_nope); attention over (c, k_pe)
// with scores and softmax in shared memory; each head's context unfolded through kv_b's value
// block.
#include <cmath>

#include "backend/cuda/block_math.cuh"
#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kPrepThreads = 128, kMaxRope = 256, kMaxRank = 1024, kAttWarps = 8, kScoresMax = 8192,
              kRowsPerBlock = 8;

// Block (t, h < H): head h's q_pe of token t; block (t, H): the token's c and k_pe.
__global__ void mla_prep_kernel(MlaDev a, const float* q, const float* kv, const int32_t* pos_at, float* qpe,
                                float* cache_c, float* cache_kpe) {
  __shared__ float v[kMaxRope];
  __shared__ float red[kPrepThreads / 32];
  const int64_t t = blockIdx.x, len0 = *pos_at;
  const int h = blockIdx.y, P = a.rope_dim, qk = a.nope + a.rope_dim;
  const float pos = float(len0 + t);
  const float* src = h < a.n_heads ? q + (t * a.n_heads + h) * qk + a.nope : kv + t * (a.rank + P) + a.rank;
  for (int i = threadIdx.x; i < P; i += blockDim.x)
    v[i] = a.interleave ? (i < P / 2 ? src[2 * i] : src[2 * (i - P / 2) + 1]) : src[i];
  __syncthreads();
  rope_rotate_half(v, a.rope, pos);
  __syncthreads();
  float* dst = h < a.n_heads ? qpe + (t * a.n_heads + h) * P : cache_kpe + (len0 + t) * P;
  for (int i = threadIdx.x; i < P; i += blockDim.x) dst[i] = v[i];
  if (h < a.n_heads) return;
  const float* c = kv + t * (a.rank + P);
  float ss = 0.0f;
  for (int i = threadIdx.x; i < a.rank; i += blockDim.x) ss += c[i] * c[i];
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = ss;
  __syncthreads();
  ss = 0.0f;
  for (int w = 0; w < kPrepThreads / 32; ++w) ss += red[w];
  const float inv = 1.0f / sqrtf(ss / float(a.rank) + a.eps);
  for (int i = threadIdx.x; i < a.rank; i += blockDim.x) cache_c[(len0 + t) * a.rank + i] = c[i] * inv * a.kv_a_norm[i];
}

// qc (T, H, rank): block (t * H + h, column block): column r of rows [h * kvd, + nope) of kv_b
// dotted with q_nope of head h.
template <int F>
__global__ void absorb_q_kernel(MlaDev a, DW wkv_b, const float* q, float* qc) {
  const int64_t th = blockIdx.x, t = th / a.n_heads;
  const int h = int(th % a.n_heads), kvd = a.nope + a.v_dim, qk = a.nope + a.rope_dim;
  const int r = blockIdx.y * blockDim.x + threadIdx.x;
  if (r >= a.rank) return;
  const float* qn = q + (t * a.n_heads + h) * qk;
  float acc = 0.0f;
  for (int i = 0; i < a.nope; ++i) acc += load1<F>(wkv_b, int64_t(h) * kvd + i, r) * qn[i];
  qc[th * a.rank + r] = acc;
}

__global__ void __launch_bounds__(kAttWarps * 32)
    mla_attend_kernel(MlaDev a, const float* qc, const float* qpe, const float* cache_c, const float* cache_kpe,
                      const int32_t* pos_at, float* ctx) {
  __shared__ float sc[kScoresMax];
  __shared__ float red[kAttWarps];
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x & 31, R = a.rank, P = a.rope_dim;
  const int64_t t = blockIdx.y, n = *pos_at + t + 1;
  const float* q1 = qc + (t * a.n_heads + h) * R;
  const float* q2 = qpe + (t * a.n_heads + h) * P;
  for (int64_t p = warp; p < n; p += kAttWarps) {
    const float* c = cache_c + p * R;
    const float* k = cache_kpe + p * P;
    float s = 0.0f;
    for (int d = lane; d < R; d += 32) s += q1[d] * c[d];
    for (int d = lane; d < P; d += 32) s += q2[d] * k[d];
    s = warp_sum(s);
    if (lane == 0) sc[p] = s * a.scale;
  }
  __syncthreads();
  const float sum = block_exp_sum<kAttWarps>(sc, n, red);
  for (int d = threadIdx.x; d < R; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t p = 0; p < n; ++p) acc += sc[p] * cache_c[p * R + d];
    ctx[(t * a.n_heads + h) * R + d] = acc / sum;
  }
}

// att (T, H * v_dim): row j of head h's value block of kv_b, [h * kvd + nope + j], dotted with
// the head's context; a warp per row.
template <int F>
__global__ void __launch_bounds__(kRowsPerBlock * 32) unabsorb_kernel(MlaDev a, DW wkv_b, const float* ctx, float* att) {
  const int64_t th = blockIdx.x;
  const int h = int(th % a.n_heads), kvd = a.nope + a.v_dim;
  const int j = blockIdx.y * kRowsPerBlock + threadIdx.x / 32;
  if (j >= a.v_dim) return;
  const float* xs[kTile];
#pragma unroll
  for (int i = 0; i < kTile; ++i) xs[i] = ctx + th * a.rank;
  float acc[kTile] = {};
  dot_rows<F>(wkv_b, int64_t(h) * kvd + a.nope + j, xs, 1, acc);
  const float s = warp_sum(acc[0]);
  if ((threadIdx.x & 31) == 0) att[th * a.v_dim + j] = s;
}

}  // namespace

bool mla_fits(const MlaDev& a) { return a.rope_dim <= kMaxRope && a.rope_dim % 2 == 0 && a.rank <= kMaxRank; }

void mla_prep(const MlaDev& a, const float* q, const float* kv, int64_t T, const int32_t* pos, float* qpe,
              float* cache_c, float* cache_kpe, cudaStream_t s) {
  if (T == 0) return;
  mla_prep_kernel<<<dim3(unsigned(T), unsigned(a.n_heads + 1)), kPrepThreads, 0, s>>>(a, q, kv, pos, qpe, cache_c,
                                                                                     cache_kpe);
  MF_CUDA_LAUNCHED("mla_prep");
}

void mla_absorb_q(const MlaDev& a, const DW& wkv_b, const float* q, int64_t T, float* qc, cudaStream_t s) {
  if (T == 0) return;
  with_fmt(wkv_b.fmt, [&](auto f) {
    absorb_q_kernel<decltype(f)::value><<<dim3(unsigned(T * a.n_heads), unsigned((a.rank + 127) / 128)), 128, 0, s>>>(
        a, wkv_b, q, qc);
  });
  MF_CUDA_LAUNCHED("mla_absorb_q");
}

void mla_attend(const MlaDev& a, const float* qc, const float* qpe, const float* cache_c, const float* cache_kpe,
                int64_t T, const int32_t* pos, int64_t ctx_max, float* ctx, cudaStream_t s) {
  if (T == 0) return;
  MF_ASSERT(ctx_max <= kScoresMax);
  mla_attend_kernel<<<dim3(unsigned(a.n_heads), unsigned(T)), kAttWarps * 32, 0, s>>>(a, qc, qpe, cache_c, cache_kpe,
                                                                                     pos, ctx);
  MF_CUDA_LAUNCHED("mla_attend");
}

void mla_unabsorb(const MlaDev& a, const DW& wkv_b, const float* ctx, int64_t T, float* att, cudaStream_t s) {
  if (T == 0) return;
  with_fmt(wkv_b.fmt, [&](auto f) {
    unabsorb_kernel<decltype(f)::value>
        <<<dim3(unsigned(T * a.n_heads), unsigned((a.v_dim + kRowsPerBlock - 1) / kRowsPerBlock)), kRowsPerBlock * 32, 0,
           s>>>(a, wkv_b, ctx, att);
  });
  MF_CUDA_LAUNCHED("mla_unabsorb");
}

int64_t mla_max_context() { return kScoresMax; }

}  // namespace moeflux::cuda
