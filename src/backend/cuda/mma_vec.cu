// Steps of fewer than kTcRows rows of x (decode, small batches; kVecRows rows a launch) and the
// routed experts' tiles of at most kTile pairs over affine 4-bit weights (groups of 64 or
// more) on tensor cores, with the arithmetic of mma_rows.cuh: x split per row into f16 hi + lo
// (the bits split_rows makes), the codes exact in f16, each group's scale and bias applied in
// f32 after its MMAs. A row of x gets the same bits alone and in a step of several.
//
// A block of kVecWarps warps splits its (up to 8) rows of x into shared memory once, then
// computes row blocks of 2 x 8 weight rows one after another (about two blocks a
// multiprocessor in all). The warps split the columns (whole groups each) and sum their parts
// in shared memory in a fixed order. In each m16n8k16 the weight rows are B (lane (g, tig) gives
// 16 codes of row g: 8 bytes of a 64-column span, two words), and A holds x: rows 0-7 the hi
// halves of x's rows, rows 8-15 their lo halves, so that a lane's accumulators hold a row of
// x's hi and lo dots side by side. The next row block's codes (up to kVecU spans a warp) and
// scales (staged in shared memory) load while the block computes the current one; a dense
// weight's first ones before the kernel before it ends.
//
// Against the warp-per-row kernels (about 6 instructions a weight; Nsight: gate / up at 0.9
// IPC), on qwen3-30b-a3b's 48 layers on an H100: decode 1.06x, 2 / 4 / 8 sequences 1.36x /
// 1.48x / 1.75x, pp128 1.30x (its small expert tiles).
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <span>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_rows.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kVecWarps = 8, kVecThreads = 32 * kVecWarps, kVecJ = 2, kVecU = 4;

// A block's shared memory: the warps' partial results, the warps' largest magnitudes of each
// row of x, 2^-e of each row, the scales and biases of the block's weight rows, then x split
// (sums of each 32 columns, hi, lo).
struct VecSmem {
  float* red;   // (kVecWarps, kVecJ, 8 rows of x, 8 weight rows)
  float* mx;    // (kVecWarps, kVecRows): -1 where the warp saw a value not finite
  float* inv;   // (kVecRows)
  float* scl;   // two buffers, sbuf floats apart: (8 kVecJ weight rows, ng groups)
  float* bia;
  float* sums;  // (n, cols / 32)
  __half* hi;   // (n, cols), XSplit's order
  __half* lo;
  int cols, ng, sbuf;
};
constexpr size_t kVecHead = size_t(kVecWarps * kVecJ * 64 + kVecWarps * kVecRows + kVecRows) * 4;
__host__ __device__ constexpr size_t round16(size_t b) { return (b + 15) / 16 * 16; }
__host__ __device__ constexpr size_t vec_scale_bytes(int64_t ng) { return round16(size_t(8 * kVecJ * ng) * 4); }
size_t vec_smem_bytes(int n, int64_t cols, int64_t group) {
  return kVecHead + 4 * vec_scale_bytes(cols / group) + round16(size_t(n) * size_t(cols / 32) * 4) +
         2 * size_t(n) * size_t(cols) * 2;
}
__device__ __forceinline__ VecSmem carve(uint8_t* smem, int n, int cols, int ng) {
  VecSmem s;
  s.red = reinterpret_cast<float*>(smem);
  s.mx = s.red + kVecWarps * kVecJ * 64;
  s.inv = s.mx + kVecWarps * kVecRows;
  uint8_t* p = smem + kVecHead;
  s.sbuf = int(vec_scale_bytes(ng) / 4);
  s.scl = reinterpret_cast<float*>(p), p += 2 * vec_scale_bytes(ng);
  s.bia = reinterpret_cast<float*>(p), p += 2 * vec_scale_bytes(ng);
  s.sums = reinterpret_cast<float*>(p), p += round16(size_t(n) * (cols / 32) * 4);
  s.hi = reinterpret_cast<__half*>(p);
  s.lo = s.hi + size_t(n) * cols;
  s.cols = cols, s.ng = ng;
  return s;
}

// Rows src(i), i < n, of x split into s with split_rows's bits: e from the row's largest
// magnitude, hi and lo of x * 2^e, each 32 columns' sum by warp_sum. A warp takes every
// kVecWarps-th 32 columns, kSplitAt of them at a time (their loads in flight together). Every
// thread calls it; it ends synchronised.
constexpr int kSplitAt = 8;
template <typename Src>
__device__ __forceinline__ void split_block(Src src, int n, const VecSmem& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, cols = s.cols, nc = cols / 32;
  for (int i = 0; i < n; ++i) {
    const float* xr = src(i);
    float m = 0.0f;
    bool finite = true;
    for (int c0 = warp; c0 < nc; c0 += kVecWarps * kSplitAt) {
      float v[kSplitAt];
#pragma unroll
      for (int u = 0; u < kSplitAt; ++u) {
        const int c = c0 + kVecWarps * u;
        v[u] = c < nc ? xr[32 * c + lane] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kSplitAt; ++u) {
        if (isfinite(v[u])) m = fmaxf(m, fabsf(v[u]));
        else finite = false;
      }
    }
    m = warp_max(m);
    finite = __all_sync(0xffffffffu, finite);
    if (lane == 0) s.mx[warp * kVecRows + i] = finite ? m : -1.0f;
  }
  __syncthreads();
  for (int i = 0; i < n; ++i) {
    float m = 0.0f;
    bool finite = true;
    for (int w = 0; w < kVecWarps; ++w) {
      const float v = s.mx[w * kVecRows + i];
      if (v < 0.0f) finite = false;
      else m = fmaxf(m, v);
    }
    const int e = split_exponent(m, finite);
    const float scale = pow2f(e);
    if (threadIdx.x == 0) s.inv[i] = pow2f(-e);
    const float* xr = src(i);
    for (int c0 = warp; c0 < nc; c0 += kVecWarps * kSplitAt) {
      float v[kSplitAt];
#pragma unroll
      for (int u = 0; u < kSplitAt; ++u) {
        const int c = c0 + kVecWarps * u;
        v[u] = c < nc ? xr[32 * c + lane] * scale : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kSplitAt; ++u) {
        const int c = c0 + kVecWarps * u;
        if (c >= nc) break;
        split_store(v[u], c, s.hi + i * cols, s.lo + i * cols, s.sums + i * nc);
      }
    }
  }
  __syncthreads();
}

__device__ __forceinline__ uint2 ld_codes(const uint8_t* p) {
  uint2 r;
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}

// One warp's share of a block: weight rows r[j] .. r[j] + 7 of w[j] (rows past a weight's last
// read its last), over whole groups of columns [64 sa, 64 sb).
struct VecWarp {
  TcView w[kVecJ];
  int64_t r[kVecJ] = {};
  const uint8_t* row[kVecJ] = {};  // this lane's row, at its 8 bytes of span 0
  int sa = 0, sb = 0;
  uint2 raw[kVecU][kVecJ];

  __device__ __forceinline__ VecWarp(const TcView& w0, const TcView& w1, int64_t cols) {
    w[0] = w0, w[1] = w1;
    const int warp = threadIdx.x / 32;
    const int ng = int(cols >> w0.group_shift), spg = 1 << (w0.group_shift - 6);
    sa = warp * ng / kVecWarps * spg, sb = (warp + 1) * ng / kVecWarps * spg;
  }

  // The rows from here on: r0 .. r0 + 7 of w[0], r1 .. r1 + 7 of w[1].
  __device__ __forceinline__ void at(int64_t r0, int64_t r1) {
    r[0] = r0, r[1] = r1;
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
#pragma unroll
    for (int j = 0; j < kVecJ; ++j)
      row[j] = w[j].data + min(r[j] + g, w[j].rows - 1) * w[j].row_bytes + 8 * tig;
  }

  // The scales and biases of the block's rows into scl / bia (8 kVecJ rows of ng groups); every
  // thread of the block calls it: thread t takes row t / 16 and every 16th group from t % 16.
  __device__ __forceinline__ void stage_scales(float* scl, float* bia, int ng) const {
    static_assert(kVecJ == 2 && kVecThreads == 16 * 8 * kVecJ, "the views below are selected, not indexed");
    const int q = threadIdx.x / 16;
    const bool second = q >= 8;
    const uint8_t* sp = second ? w[1].scales : w[0].scales;
    const uint8_t* bp = second ? w[1].biases : w[0].biases;
    const int64_t rows = second ? w[1].rows : w[0].rows, sc = second ? w[1].scale_cols : w[0].scale_cols;
    const uint8_t st = second ? w[1].stype : w[0].stype;
    const int64_t base = min((second ? r[1] : r[0]) + q % 8, rows - 1) * sc;
    for (int gi = threadIdx.x % 16; gi < ng; gi += 16)
      scl[q * ng + gi] = load_scale(sp, base + gi, st), bia[q * ng + gi] = load_scale(bp, base + gi, st);
  }

  // The codes of spans s0 .. s0 + kVecU - 1 (those before sb).
  __device__ __forceinline__ void load(int s0) {
#pragma unroll
    for (int u = 0; u < kVecU; ++u)
#pragma unroll
      for (int j = 0; j < kVecJ; ++j)
        if (s0 + u < sb) raw[u][j] = ld_codes(row[j] + int64_t(s0 + u) * 32);
  }

  // acc[j][e]: this warp's part of row r[j] + 2 tig + e of w[j] . x row g (lane = 4 g + tig),
  // in units of x * 2^e; x's n rows split in s, the rows' scales and biases in scl / bia. The
  // codes of span sa are loaded.
  __device__ __forceinline__ void run(const VecSmem& s, const float* scl, const float* bia, int n,
                                      float (&acc)[kVecJ][2]) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4, nc = s.cols / 32;
    const int64_t gmask = (int64_t(1) << w[0].group_shift) - 1;
    const bool has_x = g < n;
    const __half* xh = s.hi + g * s.cols + 16 * tig;
    const __half* xl = s.lo + g * s.cols + 16 * tig;
    float dot[kVecJ][4], sc[kVecJ][2], bi[kVecJ][2], xsum = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecJ; ++j) {
      acc[j][0] = acc[j][1] = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q) dot[j][q] = 0.0f;
    }
    for (int s0 = sa; s0 < sb; s0 += kVecU) {
      if (s0 != sa) load(s0);
#pragma unroll
      for (int u = 0; u < kVecU; ++u) {
        const int sp = s0 + u;
        if (sp >= sb) break;
        const int64_t col = int64_t(sp) * 64;
        if ((col & gmask) == 0) {  // a group starts: its scales and biases
          const int gi = int(col >> w[0].group_shift);
#pragma unroll
          for (int j = 0; j < kVecJ; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int at = (8 * j + 2 * tig + e) * s.ng + gi;
              sc[j][e] = scl[at], bi[j][e] = bia[at];
            }
        }
        uint4 ha = make_uint4(0, 0, 0, 0), hb = ha, la = ha, lb = ha;
        if (has_x) {
          ha = *reinterpret_cast<const uint4*>(xh + col), hb = *reinterpret_cast<const uint4*>(xh + col + 8);
          la = *reinterpret_cast<const uint4*>(xl + col), lb = *reinterpret_cast<const uint4*>(xl + col + 8);
          xsum += s.sums[g * nc + 2 * sp] + s.sums[g * nc + 2 * sp + 1];
        }
#pragma unroll
        for (int j = 0; j < kVecJ; ++j) {
          uint32_t ba[4], bb[4];
          q4_codes(raw[u][j].x, ba);
          q4_codes(raw[u][j].y, bb);
          mma16816(dot[j], ha.x, la.x, ha.y, la.y, ba[0], ba[1]);
          mma16816(dot[j], ha.z, la.z, ha.w, la.w, ba[2], ba[3]);
          mma16816(dot[j], hb.x, lb.x, hb.y, lb.y, bb[0], bb[1]);
          mma16816(dot[j], hb.z, lb.z, hb.w, lb.w, bb[2], bb[3]);
        }
        if (((col + 64) & gmask) == 0) {  // the group ends
#pragma unroll
          for (int j = 0; j < kVecJ; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e)
              acc[j][e] = fmaf(sc[j][e], dot[j][e] + dot[j][2 + e], fmaf(bi[j][e], xsum, acc[j][e]));
#pragma unroll
            for (int q = 0; q < 4; ++q) dot[j][q] = 0.0f;
          }
          xsum = 0.0f;
        }
      }
    }
  }
};

// The warps' acc summed in warp order: out(j, t, q, v) for weight row r[j] + q and x row t,
// called by one thread each (threads below kVecJ * 64, in units of x * 2^e). Ends synchronised.
template <typename Out>
__device__ __forceinline__ void reduce_block(const VecSmem& s, const float (&acc)[kVecJ][2], Out out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
#pragma unroll
  for (int j = 0; j < kVecJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) s.red[(warp * kVecJ + j) * 64 + g * 8 + 2 * tig + e] = acc[j][e];
  __syncthreads();
  for (int i = threadIdx.x; i < kVecJ * 64; i += kVecThreads) {
    const int j = i / 64, t = (i / 8) % 8, q = i % 8;
    float v = 0.0f;
    for (int w = 0; w < kVecWarps; ++w) v += s.red[(w * kVecJ + j) * 64 + t * 8 + q];
    out(j, t, q, v);
  }
  __syncthreads();
}

// A block's row blocks rb0 .. rb1 - 1 (rows(rb, r0, r1): the rows of w[0] and w[1] of row block
// rb) against x's n rows split in s; out(rb, ...) as reduce_block's, then after(rb) with the
// block synchronised, for each row block. The codes and scales of the first row block are
// loaded (vw.at, vw.load, vw.stage_scales into buffer 0); each next row block's come while the
// block computes the one before.
template <typename Rows, typename Out, typename After>
__device__ __forceinline__ void vec_rows_loop(VecWarp& vw, const VecSmem& s, int n, int rb0, int rb1, Rows rows,
                                              Out out, After after) {
  for (int rb = rb0; rb < rb1; ++rb) {
    const int buf = (rb - rb0) & 1;
    float acc[kVecJ][2];
    vw.run(s, s.scl + buf * s.sbuf, s.bia + buf * s.sbuf, n, acc);
    if (rb + 1 < rb1) {
      int64_t r0 = 0, r1 = 0;
      rows(rb + 1, r0, r1);
      vw.at(r0, r1);
      vw.load(vw.sa);
      vw.stage_scales(s.scl + (buf ^ 1) * s.sbuf, s.bia + (buf ^ 1) * s.sbuf, s.ng);
    }
    reduce_block(s, acc, [&](int j, int t, int q, float v) { out(rb, j, t, q, v); });
    after(rb);
  }
}

// Block x: row blocks (16 rows) [rbb * (x - first[i]), + rbb) of weight i.
__global__ void __launch_bounds__(kVecThreads, 2) matvec_vec_kernel(TcDense d, const float* x, int n, int rbb) {
  extern __shared__ __align__(16) uint8_t smem[];
  TcView w;
  float* y;
  int32_t first;
  tc_weight(d, w, y, first);
  const int cols = int(d.w[0].cols);
  const int rb0 = int(blockIdx.x - first) * rbb, rb1 = min(rb0 + rbb, int((w.rows + 15) / 16));
  VecWarp vw(w, w, cols);
  vw.at(16 * int64_t(rb0), 16 * int64_t(rb0) + 8);
  vw.load(vw.sa);  // the weights do not wait for the kernel before
  const VecSmem s = carve(smem, n, cols, int(cols >> w.group_shift));
  vw.stage_scales(s.scl, s.bia, s.ng);
  await_previous();
  split_block([&](int i) { return x + int64_t(i) * cols; }, n, s);
  vec_rows_loop(
      vw, s, n, rb0, rb1, [](int rb, int64_t& r0, int64_t& r1) { r0 = 16 * int64_t(rb), r1 = r0 + 8; },
      [&](int rb, int j, int t, int q, float v) {
        const int64_t row = 16 * int64_t(rb) + 8 * j + q;
        if (t < n && row < w.rows) y[int64_t(t) * w.rows + row] = v * s.inv[t];
      },
      [](int) {});
}

// Block (x, tile): hidden rows [8 rb, 8 rb + 8) of gate (j 0) and up (j 1) for the tile's pairs,
// row blocks rb in [rbb x, rbb x + rbb).
__global__ void __launch_bounds__(kVecThreads, 2)
    gate_up_vec_kernel(const DW* table, int64_t hidden, int dim, const float* x, int32_t k, const int32_t* sorted,
                       const int32_t* tiles, const int32_t* n_tiles, float* h, int rbb) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float gu[kVecJ][64];  // gate and up of (x row, weight row)
  await_previous();
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  const int rb0 = int(blockIdx.x) * rbb, rb1 = min(rb0 + rbb, int((hidden + 7) / 8));
  if (!table[3 * e].data || rb0 >= rb1) return;
  VecWarp vw(tc_view(table[3 * e]), tc_view(table[3 * e + 1]), dim);
  vw.at(8 * int64_t(rb0), 8 * int64_t(rb0));
  vw.load(vw.sa);
  const VecSmem s = carve(smem, n, dim, int(dim >> vw.w[0].group_shift));
  vw.stage_scales(s.scl, s.bia, s.ng);
  split_block([&](int i) { return x + int64_t(sorted[first + i] / k) * dim; }, n, s);
  vec_rows_loop(
      vw, s, n, rb0, rb1, [](int rb, int64_t& r0, int64_t& r1) { r0 = r1 = 8 * int64_t(rb); },
      [&](int, int j, int t, int q, float v) { gu[j][t * 8 + q] = v * s.inv[t]; },
      [&](int rb) {
        if (threadIdx.x >= 64) return;
        const int t = threadIdx.x / 8, q = threadIdx.x % 8;
        const int64_t row = 8 * int64_t(rb) + q;
        const float a = gu[0][threadIdx.x], b = gu[1][threadIdx.x];
        if (t < n && row < hidden) h[int64_t(sorted[first + t]) * hidden + row] = a / (1.0f + expf(-a)) * b;
      });
}

// Block (x, tile): down rows [16 rb, 16 rb + 16) for the tile's pairs' h, row blocks rb in
// [rbb x, rbb x + rbb).
__global__ void __launch_bounds__(kVecThreads, 2)
    down_vec_kernel(const DW* table, int64_t dim, int hidden, const float* h, const int32_t* sorted,
                    const int32_t* tiles, const int32_t* n_tiles, float* y, int rbb) {
  extern __shared__ __align__(16) uint8_t smem[];
  await_previous();
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  const int rb0 = int(blockIdx.x) * rbb, rb1 = min(rb0 + rbb, int((dim + 15) / 16));
  if (!table[3 * e + 2].data || rb0 >= rb1) return;
  const TcView d = tc_view(table[3 * e + 2]);
  VecWarp vw(d, d, hidden);
  vw.at(16 * int64_t(rb0), 16 * int64_t(rb0) + 8);
  vw.load(vw.sa);
  const VecSmem s = carve(smem, n, hidden, int(hidden >> d.group_shift));
  vw.stage_scales(s.scl, s.bia, s.ng);
  split_block([&](int i) { return h + int64_t(sorted[first + i]) * hidden; }, n, s);
  vec_rows_loop(
      vw, s, n, rb0, rb1, [](int rb, int64_t& r0, int64_t& r1) { r0 = 16 * int64_t(rb), r1 = r0 + 8; },
      [&](int rb, int j, int t, int q, float v) {
        const int64_t row = 16 * int64_t(rb) + 8 * j + q;
        if (t < n && row < dim) y[int64_t(sorted[first + t]) * dim + row] = v * s.inv[t];
      },
      [](int) {});
}

template <auto Kernel>
void allow_vec_smem(size_t bytes) {
  static size_t allowed = 48 * 1024;
  if (bytes > allowed) {
    MF_CUDA(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    allowed = bytes;
  }
}

// Row blocks a block computes: about two blocks a multiprocessor for `total` row blocks, at
// most kMaxRbb (a block's row blocks run one after another).
constexpr int kMaxRbb = 8;
int rows_per_block(int64_t total) {
  const int64_t target = 2 * int64_t(multiprocessors());
  return int(std::clamp<int64_t>((total + target - 1) / target, 1, kMaxRbb));
}

// The grid of an expert kernel over rbs row blocks per tile, and its row blocks per block.
struct TileGrid {
  dim3 grid;
  int rbb;
};
TileGrid tile_grid(int64_t rbs, const PairTiles& pt) {
  const int rbb = rows_per_block(rbs * std::min<int64_t>(pt.tiles_max, pt.pairs));
  return {dim3(unsigned((rbs + rbb - 1) / rbb), unsigned(pt.tiles_max)), rbb};
}

}  // namespace

bool vec_rows(const DW& w) {
  return w.fmt == kQ4 && w.group >= 64 && w.cols % 64 == 0 && w.row_bytes % 16 == 0 && w.rows > 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

void matmul_vec(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, cudaStream_t s) {
  MF_ASSERT(ws.size() == ys.size() && T >= 1);
  if (T > kVecRows) {  // kVecRows rows of x at a time
    std::vector<float*> part(ys.size());
    for (int64_t t0 = 0; t0 < T; t0 += kVecRows) {
      for (size_t j = 0; j < ys.size(); ++j) part[j] = ys[j] + t0 * ws[j].rows;
      matmul_vec(ws, x + t0 * ws[0].cols, std::min<int64_t>(kVecRows, T - t0), part, s);
    }
    return;
  }
  size_t i = 0;
  while (i < ws.size()) {  // the following weights of one shape, up to kMaxTc, in one launch
    TcDense d{};
    int n = 0;
    d.first[0] = 0;
    const DW& lead = ws[i];
    const size_t i0 = i;
    int64_t total = 0;
    for (; i < ws.size() && n < kMaxTc && ws[i].cols == lead.cols && ws[i].group == lead.group; ++i, ++n) {
      MF_ASSERT(vec_rows(ws[i]));
      d.w[n] = ws[i], d.y[n] = ys[i];
      total += (ws[i].rows + 15) / 16;
    }
    const int rbb = rows_per_block(total);
    for (int j = 0; j < n; ++j)
      d.first[j + 1] = d.first[j] + int32_t(((ws[i0 + size_t(j)].rows + 15) / 16 + rbb - 1) / rbb);
    for (int j = n + 1; j <= kMaxTc; ++j) d.first[j] = INT32_MAX;
    const size_t smem = vec_smem_bytes(int(T), lead.cols, lead.group);
    allow_vec_smem<matvec_vec_kernel>(smem);
    launch_smem("matvec_vec", matvec_vec_kernel, dim3(unsigned(d.first[n])), dim3(kVecThreads), smem, s, d, x, int(T),
                rbb);
  }
}

void experts_gate_up_vec(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* x, int32_t k,
                         const PairTiles& pt, float* h, cudaStream_t s) {
  const int n = int(std::min<int64_t>(kTile, pt.pairs / k));
  const size_t smem = vec_smem_bytes(n, dim, group);
  allow_vec_smem<gate_up_vec_kernel>(smem);
  const TileGrid g = tile_grid((hidden + 7) / 8, pt);
  launch_smem("experts_gate_up_vec", gate_up_vec_kernel, g.grid, dim3(kVecThreads), smem, s, table, hidden, int(dim), x,
              k, pt.sorted, pt.tiles, pt.n_tiles, h, g.rbb);
}

void experts_down_vec(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* h, const PairTiles& pt,
                      int32_t k, float* y, cudaStream_t s) {
  const int n = int(std::min<int64_t>(kTile, pt.pairs / k));
  const size_t smem = vec_smem_bytes(n, hidden, group);
  allow_vec_smem<down_vec_kernel>(smem);
  const TileGrid g = tile_grid((dim + 15) / 16, pt);
  launch_smem("experts_down_vec", down_vec_kernel, g.grid, dim3(kVecThreads), smem, s, table, dim, int(hidden), h,
              pt.sorted, pt.tiles, pt.n_tiles, y, g.rbb);
}

}  // namespace moeflux::cuda
