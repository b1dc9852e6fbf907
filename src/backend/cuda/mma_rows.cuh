// The tensor-core tile of mma_rows.cu: a block of kTcThreads computes kTcM rows of x (tokens or
// (token, slot) pairs) times kTcN rows of affine 4-bit or 8-bit weights (groups of 32 or more)
// with mma.sync.m16n8k16 (f16 in, f32 accumulate), its rows of x and weights staged in shared
// memory by cp.async, kTcStages deep. x comes split (XSplit, made by split_rows): x * 2^e per
// row as f16 hi + lo, two MMAs a step (~22 bits of x), and its sums over each 32 columns; a
// weight's integer codes are exact in f16, and each group's scale and bias apply in f32 after its
// MMAs: y = 2^-e * sum_g (scale_g * dot_g + bias_g * xsum_g).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/dweight.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/mma_common.cuh"

namespace moeflux::cuda {

// Eight warps side by side over the weight rows, 32 rows each, every warp over all kTcM rows of
// x: the block's weight rows are two halves of kTcHalf (dense: consecutive rows of one weight;
// gate / up: the same rows of each). ptxas gives the kernels ~185 registers a thread (two sets of
// accumulators: per group and in all), so one block of 8 warps runs a multiprocessor.
constexpr int kTcWarps = 8, kTcThreads = 32 * kTcWarps, kTcN = 32 * kTcWarps, kTcHalf = kTcN / 2;
constexpr int kTcStages = 4, kTcChunks = 2;  // a stage: two chunks of 32 columns
static_assert(kTcM == 32 && kTcThreads == 8 * kTcM, "the copies below give each thread fixed pieces");
static_assert(kTcThreads == kTcN, "thread t stages the scales of the tile's weight row t");

// A stage in shared memory: x (chunk, hi / lo, kTcM rows of 32 halves), x's sums (chunk, kTcM),
// the weights (chunk, kTcN rows of a chunk's 32 codes). 64-byte rows of x: the 16-byte reads of
// a quarter warp (two rows) cover 128 contiguous bytes, so none conflict. After the stages, two
// buffers of the scale and bias (f32) of each weight row's group starting in each chunk.
template <int F>
constexpr int kTcChunkBytes = F == kQ4 ? 16 : 32;
constexpr int kTcXBytes = kTcChunks * 2 * kTcM * 64, kTcSBytes = kTcChunks * kTcM * 4;
constexpr int kTcScaleBytes = 2 * kTcChunks * kTcN * 8;
template <int F>
constexpr int kTcStageBytes = kTcXBytes + kTcSBytes + kTcChunks * kTcN * kTcChunkBytes<F>;
template <int F>
constexpr int kTcSmem = kTcStages * kTcStageBytes<F> + kTcScaleBytes;

// x (rows, cols) split for the tensor cores (split_rows in mma_rows.cu). Within each 8 columns
// the halves are stored in the order 0 4 1 5 2 6 3 7, the order in which a thread's 32-bit
// fragments pair a weight's codes (tc_tile). A row with a value not finite keeps e = 0 (its
// outputs are not finite either way).
struct XSplit {
  const __half* hi = nullptr;    // (rows, cols): f16(x * 2^e)
  const __half* lo = nullptr;    // (rows, cols): f16(x * 2^e - hi)
  const float* sums = nullptr;   // (rows, cols / 32): sums of x * 2^e over each 32 columns
  const float* inv = nullptr;    // (rows): 2^-e
  int64_t cols = 0;
};

// The block's weight rows: half h (tile rows [h * kTcHalf, (h + 1) * kTcHalf)) is rows r[h] ..
// of w[h]; rows past w[h].rows read its last row and are not to be stored. Selected by
// conditionals, never indexed at run time (which would put them in local memory).
struct TcHalves {
  TcView w0, w1;
  int64_t r0, r1;
  __device__ __forceinline__ const TcView& w(int h) const { return h ? w1 : w0; }
  __device__ __forceinline__ int64_t r(int h) const { return h ? r1 : r0; }
};

// This thread's 8 codes of a weight row's chunk (columns 8 tig .. 8 tig + 7) as four f16 pairs:
// pair p holds columns p and p + 4, x's stored order (XSplit).
template <int F>
__device__ __forceinline__ void chunk_codes(const uint8_t* p, uint32_t (&b)[4]) {
  if constexpr (F == kQ4) {
    q4_codes(*reinterpret_cast<const uint32_t*>(p), b);
  } else {
    const uint2 q = *reinterpret_cast<const uint2*>(p);  // code i at byte i
    const uint32_t t0 = __byte_perm(q.x, q.y, 0x5140), t1 = __byte_perm(q.x, q.y, 0x7362);  // 0 4 1 5, 2 6 3 7
    b[0] = codes_f16x2(__byte_perm(t0, 0x64646464u, 0x4140)), b[1] = codes_f16x2(__byte_perm(t0, 0x64646464u, 0x4342));
    b[2] = codes_f16x2(__byte_perm(t1, 0x64646464u, 0x4140)), b[3] = codes_f16x2(__byte_perm(t1, 0x64646464u, 0x4342));
  }
}

// acc[i][j][r] (every thread) = the tile's y for row m = 16 i + lane / 4 + 8 (r / 2), weight row
// n = 32 warp + 8 j + 2 (lane % 4) + r % 2 (half n / kTcHalf), in units of x * 2^e (times
// xs.inv[xrow[m]] to finish). xrow: the block's kTcM rows of x (shared memory; past `used`
// rows, any valid row); used > 16 runs both 16-row halves of the tile, else the first only.
// Ends with the stages' memory free for the caller.
// PRECOND: xs.cols % 32 == 0, the weights' groups >= 32, their rows 16-byte aligned (tc_rows).
template <int F>
__device__ __forceinline__ void tc_tile(const XSplit& xs, const int32_t* xrow, int used, const TcHalves& hw,
                                        uint8_t* smem, float (&acc)[2][4][4]) {
  constexpr int CB = kTcChunkBytes<F>, SB = kTcStageBytes<F>;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, tig = lane % 4;
  const int64_t K = xs.cols, n_chunks = K / 32, n_stages = (n_chunks + kTcChunks - 1) / kTcChunks;

  // This thread's copies each stage: weight row t of the tile (CB bytes a chunk); 16 bytes of
  // each chunk of x row t / 8 (hi or lo: (t / 4) % 2, piece t % 4); for t < 64 one sum. The
  // sources advance a stage at a time (load is called for stages 0, 1, 2, ... in turn).
  const TcView wm = hw.w(t / kTcHalf);
  const int64_t wr = min(hw.r(t / kTcHalf) + t % kTcHalf, wm.rows - 1);
  const uint8_t* wsrc = wm.data + wr * wm.row_bytes;
  const int xr = t / 8, xplane = (t / 4) % 2, xpiece = t % 4;
  const __half* xsrc = (xplane ? xs.lo : xs.hi) + int64_t(xrow[xr]) * K + 8 * xpiece;
  const int sc = t / kTcM, sr = t % kTcM;
  const float* ssrc = xs.sums + int64_t(xrow[sr]) * n_chunks + sc;
  const uint32_t s0 = smem_addr(smem), xdst = s0 + (xplane * kTcM + xr) * 64 + 16 * xpiece,
                 wdst = s0 + kTcXBytes + kTcSBytes + t * CB, sdst = s0 + kTcXBytes + (sc * kTcM + sr) * 4;
  auto load = [&](int64_t st) {
    if (st < n_stages) {
      const uint32_t so = uint32_t(st % kTcStages) * SB;
      const int nc = int(min(int64_t(kTcChunks), n_chunks - st * kTcChunks));
      for (int c = 0; c < nc; ++c) {
        cp_async16(xdst + so + c * 2 * kTcM * 64, xsrc + c * 32);
#pragma unroll
        for (int p = 0; p < CB / 16; ++p) cp_async16(wdst + so + c * kTcN * CB + 16 * p, wsrc + c * CB + 16 * p);
      }
      if (sc < nc) cp_async4(sdst + so, ssrc);
      xsrc += kTcChunks * 32, wsrc += kTcChunks * CB, ssrc += kTcChunks;
    }
    cp_async_commit();  // empty groups too: wait_group counts them
  };

  // The scale and bias of weight row t's group starting in each chunk of a stage, read from
  // global memory into registers (fetch) a stage ahead and stored (put) into the stage's scale
  // buffer (st % 2) after this stage's MMAs.
  float2* sbuf = reinterpret_cast<float2*>(smem + kTcStages * SB);
  const int64_t srow = wr * wm.scale_cols, tmask = (int64_t(1) << wm.group_shift) - 1;
  float2 nx[kTcChunks];
  auto fetch = [&](int64_t st) {
#pragma unroll
    for (int c = 0; c < kTcChunks; ++c) {
      const int64_t col = (st * kTcChunks + c) * 32;
      nx[c] = make_float2(0.0f, 0.0f);
      if (col < K && (col & tmask) == 0) {
        const int64_t si = srow + (col >> wm.group_shift);
        nx[c] = make_float2(load_scale(wm.scales, si, wm.stype), load_scale(wm.biases, si, wm.stype));
      }
    }
  };
  auto put = [&](int64_t st) {
#pragma unroll
    for (int c = 0; c < kTcChunks; ++c) sbuf[(int(st % 2) * kTcChunks + c) * kTcN + t] = nx[c];
  };

  // This warp's weight: its half's view, its first row, the group's columns (a power of two).
  const TcView ww = hw.w(warp * 32 / kTcHalf);
  const int64_t wrow0 = hw.r(warp * 32 / kTcHalf) + (warp * 32) % kTcHalf;
  const bool active = wrow0 < ww.rows;  // warp-uniform: a warp past the weight's rows only copies
  const int64_t gmask = (int64_t(1) << ww.group_shift) - 1;
  const int mt = used > 16 ? 2 : 1;

  float dot[2][4][4], xsum[2][2], sc_[4][2], bi_[4][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    xsum[i][0] = xsum[i][1] = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) dot[i][j][r] = acc[i][j][r] = 0.0f;
  }

  // Chunk c of stage st (its buffer at b).
  auto chunk = [&](const uint8_t* b, int64_t st, int c) {
    const int64_t col = (st * kTcChunks + c) * 32;
    const bool gstart = (col & gmask) == 0;
    if (gstart) {  // a group starts: its scales and biases, used at its end
      const float4* v = reinterpret_cast<const float4*>(sbuf + (int(st % 2) * kTcChunks + c) * kTcN + warp * 32 + 2 * tig);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 q = v[4 * j];  // rows 8 j + 2 tig and + 1
        sc_[j][0] = q.x, bi_[j][0] = q.y, sc_[j][1] = q.z, bi_[j][1] = q.w;
      }
    }
    const float* S = reinterpret_cast<const float*>(b + kTcXBytes) + c * kTcM;
    uint32_t bq[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      chunk_codes<F>(b + kTcXBytes + kTcSBytes + (c * kTcN + warp * 32 + 8 * j + g) * CB + tig * (CB / 4), bq[j]);
    const uint8_t* X = b + c * 2 * kTcM * 64 + tig * 16;  // hi plane; lo at + kTcM * 64
    // A group's first chunk starts its sums (dot and xsum) instead of adding to them.
    auto mmas = [&](auto first) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (i >= mt) break;
        const int r0 = 16 * i + g;
        if constexpr (first) xsum[i][0] = S[r0], xsum[i][1] = S[r0 + 8];
        else xsum[i][0] += S[r0], xsum[i][1] += S[r0 + 8];
        const uint4 h0 = *reinterpret_cast<const uint4*>(X + r0 * 64);
        const uint4 h1 = *reinterpret_cast<const uint4*>(X + (r0 + 8) * 64);
        const uint4 l0 = *reinterpret_cast<const uint4*>(X + kTcM * 64 + r0 * 64);
        const uint4 l1 = *reinterpret_cast<const uint4*>(X + kTcM * 64 + (r0 + 8) * 64);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if constexpr (first) mma16816_first(dot[i][j], h0.x, h1.x, h0.y, h1.y, bq[j][0], bq[j][1]);
          else mma16816(dot[i][j], h0.x, h1.x, h0.y, h1.y, bq[j][0], bq[j][1]);
          mma16816(dot[i][j], l0.x, l1.x, l0.y, l1.y, bq[j][0], bq[j][1]);
          mma16816(dot[i][j], h0.z, h1.z, h0.w, h1.w, bq[j][2], bq[j][3]);
          mma16816(dot[i][j], l0.z, l1.z, l0.w, l1.w, bq[j][2], bq[j][3]);
        }
      }
    };
    if (gstart) mmas(std::true_type{});
    else mmas(std::false_type{});
    if (((col + 32) & gmask) == 0) {  // the group ends (K is a multiple of it)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            acc[i][j][r] = fmaf(sc_[j][r % 2], dot[i][j][r], fmaf(bi_[j][r % 2], xsum[i][r / 2], acc[i][j][r]));
    }
  };

  fetch(0);
  put(0);
#pragma unroll
  for (int s = 0; s < kTcStages - 1; ++s) load(s);
  for (int64_t st = 0; st < n_stages; ++st) {
    cp_async_wait<kTcStages - 2>();  // stage st is in (each thread's own copies) ...
    __syncthreads();                 // ... everyone's; and stage st - 1's buffers are free
    load(st + kTcStages - 1);
    fetch(st + 1);
    if (active) {
      const uint8_t* b = smem + (st % kTcStages) * SB;
      if (n_chunks - st * kTcChunks >= kTcChunks) {
#pragma unroll
        for (int c = 0; c < kTcChunks; ++c) chunk(b, st, c);
      } else {
        chunk(b, st, 0);
      }
    }
    put(st + 1);
  }
  cp_async_wait<0>();
  __syncthreads();
}

}  // namespace moeflux::cuda
