// MLA on the device, in the latent space (the absorbed form): new tokens' q_pe and k_pe
// de-interleaved and roped, kv_a_layernorm(c) and k_pe appended to the latent cache; each
// head's q_nope folded through kv_b's key block (q_c = W_kb^T q_nope); attention over (c, k_pe)
// in tiles of positions shared by 32 heads (flash_tile.cuh), split-K over long contexts; each
// head's context unfolded through kv_b's value block.
#include <cmath>

#include "backend/cuda/block_math.cuh"
#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/flash_tile.cuh"
#include "backend/cuda/launch.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kPrepThreads = 128, kMaxRope = 256, kRowsPerBlock = 8;

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

// Attention in the latent space, a block per (query t, group of kGroup heads, slice z of the
// query's positions) over tiles of the cache's [c | k_pe] rows (flash_tile.cuh: the values are
// the rows' c). One slice (gridDim.z == 1): ctx written normalised; several: each slice's part
// ((t, h, z): rank + 4 floats), merged by mla_merge_kernel. The slices are taken at run time
// from *pos_at (a recorded step keeps its slice count while the context grows).
constexpr int kFlashWarps = 16, kHeadsPerWarp = 2, kGroup = kFlashWarps * kHeadsPerWarp, kChunks = 4,
              kMaxFlashRank = 128 * kChunks;

// Shared floats: a tile of rows, then the group's scaled queries (rank + rope_dim a head).
__host__ __device__ inline int64_t flash_floats(int rank, int rope) {
  return int64_t(kFlashTile) * flash_row(rank + rope) + int64_t(kGroup) * (rank + rope);
}

__global__ void __launch_bounds__(kFlashWarps * 32)
    mla_flash_kernel(MlaDev a, const float* qc, const float* qpe, const float* cache_c, const float* cache_kpe,
                     const int32_t* pos_at, float* ctx, float* part) {
  extern __shared__ float4 smem4[];
  float* const tile = reinterpret_cast<float*>(smem4);
  const int R = a.rank, P = a.rope_dim, W = R + P, H = a.n_heads, row = flash_row(W);
  float* const qs = tile + kFlashTile * row;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, h0 = blockIdx.x * kGroup;
  const int64_t t = blockIdx.y, S = gridDim.z;
  const Slice sl = flash_slice(0, *pos_at + t + 1, blockIdx.z, S);
  for (int i = threadIdx.x; i < kGroup * W; i += blockDim.x) {
    const int hl = i / W, d = i % W, h = h0 + hl;
    float v = 0.0f;
    if (h < H) v = d < R ? qc[(t * H + h) * R + d] : qpe[(t * H + h) * P + d - R];
    qs[hl * W + d] = v * a.scale;
  }
  FlashAcc<kHeadsPerWarp, kChunks> f;
  const int W4 = W / 4, R4 = R / 4;
  for (int64_t b = sl.p0; b < sl.p1; b += kFlashTile) {
    const int np = int(min(int64_t(kFlashTile), sl.p1 - b));
    __syncthreads();  // the previous tile is read
    for (int i = threadIdx.x; i < np * W4; i += blockDim.x) {
      const int r = i / W4, c4 = i % W4;
      const float* src = c4 < R4 ? cache_c + (b + r) * R + 4 * c4 : cache_kpe + (b + r) * P + 4 * (c4 - R4);
      *reinterpret_cast<float4*>(tile + r * row + 4 * c4) = *reinterpret_cast<const float4*>(src);
    }
    __syncthreads();
    float sc[kHeadsPerWarp];
    flash_scores(sc, tile + min(lane, np - 1) * row, qs + warp * kHeadsPerWarp * W, W, W4);
    f.add(sc, np, tile, row, R);
  }
#pragma unroll
  for (int j = 0; j < kHeadsPerWarp; ++j) {
    const int h = h0 + warp * kHeadsPerWarp + j;
    if (h >= H) continue;
    float* o = ctx + (t * H + h) * R;
    f.store(j, R, S > 1, S > 1 ? part + ((t * H + h) * S + blockIdx.z) * (R + 4) : nullptr,
            [&](int d, float4 v) { *reinterpret_cast<float4*>(o + d) = v; });
  }
}

// Block (h, t): the slices' parts of mla_flash_kernel merged and normalised into ctx.
__global__ void mla_merge_kernel(MlaDev a, const float* part, int S, float* ctx) {
  const int h = blockIdx.x, R = a.rank;
  const int64_t t = blockIdx.y;
  merge_softmax_parts(part + (t * a.n_heads + h) * S * (R + 4), S, R + 4, 4, R,
                      [&](int d, float o) { ctx[(t * a.n_heads + h) * R + d] = o; });
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

bool mla_fits(const MlaDev& a) {
  return a.rope_dim <= kMaxRope && a.rope_dim % 4 == 0 && a.rank % 4 == 0 && a.rank <= kMaxFlashRank &&
         flash_floats(a.rank, a.rope_dim) * int64_t(sizeof(float)) <= smem_optin();
}

int mla_splits(const MlaDev& a, int64_t T, int64_t ctx_max) {
  const int64_t groups = (a.n_heads + kGroup - 1) / kGroup;
  return split_slices(groups * T, ctx_max, kFlashSlicePositions);
}

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
                int64_t T, const int32_t* pos, float* ctx, cudaStream_t s, int splits, float* part) {
  if (T == 0) return;
  MF_ASSERT(splits >= 1 && splits <= kMaxSplits && (splits == 1 || part));
  const size_t bytes = size_t(flash_floats(a.rank, a.rope_dim)) * sizeof(float);
  allow_smem<mla_flash_kernel>(size_t(smem_optin()));
  const unsigned groups = unsigned((a.n_heads + kGroup - 1) / kGroup);
  mla_flash_kernel<<<dim3(groups, unsigned(T), unsigned(splits)), kFlashWarps * 32, bytes, s>>>(a, qc, qpe, cache_c,
                                                                                                cache_kpe, pos, ctx, part);
  MF_CUDA_LAUNCHED("mla_attend");
  if (splits == 1) return;
  mla_merge_kernel<<<dim3(unsigned(a.n_heads), unsigned(T)), 128, 0, s>>>(a, part, splits, ctx);
  MF_CUDA_LAUNCHED("mla_merge");
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

}  // namespace moeflux::cuda
