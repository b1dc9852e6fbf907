// Steps of fewer than kTcRows rows of x (decode, small batches; kVecRows rows a launch) and the
// routed experts' tiles of at most kTile pairs over affine 4-bit weights (groups of 64 or
// more) on tensor cores, with the arithmetic of mma_rows.cuh: x split per row into f16 hi + lo
// (the bits split_rows makes), the codes exact in f16, each group's scale and bias applied in
// f32 after its MMAs. A row of x gets the same bits alone and in a step of several.
//
// A block of kVecWarps warps computes row blocks of 2 x 8 weight rows one after another (about
// two blocks a multiprocessor in all). Each row block's codes, scales and biases come into
// shared memory by asynchronous copies, up to kMaxStages row blocks ahead, so that a block keeps
// its whole share of the weights in flight where it fits (a dense weight's first ones before the
// kernel before it ends); meanwhile the block splits its (up to 8) rows of x into shared memory.
// The warps split the columns (whole groups each) and sum their parts in shared memory in a
// fixed order. In each m16n8k16 the weight rows are B (lane (g, tig) gives 16 codes of row g: 8
// bytes of a 64-column span, two words), and A holds x: rows 0-7 the hi halves of x's rows,
// rows 8-15 their lo halves, so that a lane's accumulators hold a row of x's hi and lo dots side
// by side.
//
// Against the warp-per-row kernels (about 6 instructions a weight; Nsight: gate / up at 0.9
// IPC), on qwen3-30b-a3b's 48 layers on an H100: 2 / 4 / 8 sequences 1.36x / 1.48x / 1.75x,
// pp128 1.30x (its small expert tiles).
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <span>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_common.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kVecWarps = 8, kVecThreads = 32 * kVecWarps, kVecJ = 2, kMaxStages = 4;
// Shared memory a block may take and still share its multiprocessor with another, and the most
// a block may take.
constexpr size_t kVecTwoPerSm = 112 * 1024, kVecSmemMax = 227 * 1024;

__host__ __device__ constexpr size_t round16(size_t b) { return (b + 15) / 16 * 16; }
// Bytes of a staged weight row: its cols / 2 bytes of codes, padded so that consecutive rows
// start 8 banks apart (a warp's 8-byte reads of 8 rows then meet no conflict).
__host__ __device__ constexpr int vec_row_stride(int64_t cols) {
  const int words = int(cols / 8);
  return 4 * (words + ((8 - words) % 32 + 32) % 32);
}
// Bytes of one stage's scales (or biases) of 8 weight rows of ng groups, as stored (2 or 4 bytes
// each).
__host__ __device__ constexpr int vec_scale_region(int64_t ng) { return int(round16(size_t(8 * ng) * 4)); }
// A stage: the codes of 16 weight rows (2 x 8, vec_row_stride apart), then the scales of
// either 8 and the biases of either 8.
__host__ __device__ constexpr int vec_stage_bytes(int64_t cols, int64_t ng) {
  return 16 * vec_row_stride(cols) + 4 * vec_scale_region(ng);
}

// A block's shared memory: the warps' partial results, the warps' largest magnitudes of each
// row of x, 2^-e of each row, the stages of weight rows in flight, then x split (sums of each
// 32 columns, hi and lo interleaved).
struct VecSmem {
  float* red;      // (kVecWarps, kVecJ, 8 rows of x, 8 weight rows)
  float* mx;       // (kVecWarps, kVecRows): -1 where the warp saw a value not finite
  float* inv;      // (kVecRows)
  float4* cvt;     // (kVecWarps, 8 vec_warp_groups): each warp's scales as converted
  uint8_t* stage;  // (stages, stage_bytes)
  float* sums;     // (n, cols / 32)
  __half* x;       // (n, 2 cols): XSplit's order, each word of hi followed by the same word of lo
  int cols, ng, stage_bytes;
};
constexpr size_t kVecHead = size_t(kVecWarps * kVecJ * 64 + kVecWarps * kVecRows + kVecRows) * 4;
// The most groups of columns a warp takes.
__host__ __device__ constexpr int vec_warp_groups(int64_t ng) { return int((ng + kVecWarps - 1) / kVecWarps); }
__host__ __device__ constexpr size_t vec_cvt_bytes(int64_t ng) { return size_t(kVecWarps) * 8 * vec_warp_groups(ng) * 16; }
size_t vec_smem_bytes(int n, int64_t cols, int64_t group, int stages) {
  return kVecHead + vec_cvt_bytes(cols / group) + size_t(stages) * size_t(vec_stage_bytes(cols, cols / group)) +
         round16(size_t(n) * size_t(cols / 32) * 4) + 2 * size_t(n) * size_t(cols) * 2;
}
__device__ __forceinline__ VecSmem carve(uint8_t* smem, int n, int cols, int ng, int stages) {
  VecSmem s;
  s.red = reinterpret_cast<float*>(smem);
  s.mx = s.red + kVecWarps * kVecJ * 64;
  s.inv = s.mx + kVecWarps * kVecRows;
  uint8_t* p = smem + kVecHead;
  s.cvt = reinterpret_cast<float4*>(p), p += vec_cvt_bytes(ng);
  s.stage_bytes = vec_stage_bytes(cols, ng);
  s.stage = p, p += size_t(stages) * s.stage_bytes;
  s.sums = reinterpret_cast<float*>(p), p += round16(size_t(n) * (cols / 32) * 4);
  s.x = reinterpret_cast<__half*>(p);
  s.cols = cols, s.ng = ng;
  return s;
}

// Rows src(i), i < n, of x split into s with split_rows's bits (mma_rows.cuh): e from the row's
// largest magnitude, hi and lo of x * 2^e and each 32 columns' sum. A lane takes 8 columns, a
// warp every kVecWarps-th 256. Every thread calls it; it ends synchronised.
template <typename Src>
__device__ __forceinline__ void split_block(Src src, int n, const VecSmem& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, cols = s.cols, nq = cols / 8;
  for (int i = 0; i < n; ++i) {
    const float* xr = src(i);
    float m = 0.0f;
    bool finite = true;
    for (int q0 = 32 * warp; q0 < nq; q0 += kVecThreads) {
      float v[8];
      load8(xr, q0 + lane, q0 + lane < nq, 1.0f, v);
      max8(v, m, finite);
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
    if (threadIdx.x == 0) s.inv[i] = pow2f(-e);
    const float* xr = src(i);
    for (int q0 = 32 * warp; q0 < nq; q0 += kVecThreads) {
      float v[8];
      const bool ok = q0 + lane < nq;
      load8(xr, q0 + lane, ok, pow2f(e), v);
      split_store8<true>(v, q0 + lane, ok, s.x + 2 * i * cols, nullptr, s.sums + i * (cols / 32));
    }
  }
  __syncthreads();
}

// Threads t of nt (those of the block with threadIdx.x % nt == t): bytes [0, bytes) of src
// (2-byte aligned) into dst (16-byte aligned shared memory), in 16- or 4-byte asynchronous
// copies where src's alignment allows, what is left by plain loads.
__device__ __forceinline__ void copy_async(uint8_t* dst, const uint8_t* src, int bytes, int t, int nt) {
  int done = 0;
  if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    const int n16 = bytes / 16;
    for (int i = t; i < n16; i += nt) cp_async16(dst + 16 * i, src + 16 * i);
    done = 16 * n16;
  }
  if ((reinterpret_cast<uintptr_t>(src + done) & 3) == 0) {
    const int n4 = (bytes - done) / 4;
    for (int i = t; i < n4; i += nt) cp_async4(dst + done + 4 * i, src + done + 4 * i);
    done += 4 * n4;
  }
  for (int i = done / 2 + t; i < bytes / 2; i += nt)
    reinterpret_cast<uint16_t*>(dst)[i] = reinterpret_cast<const uint16_t*>(src)[i];
}

// All but the newest `newer` groups of this thread's copies have landed.
__device__ __forceinline__ void cp_async_wait_all_but(int newer) {
  static_assert(kMaxStages == 4, "a case for each count below kMaxStages");
  switch (newer) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// What a block computes: a row block's first 8 weight rows from w[0] and its last 8 from w[1],
// each warp over its share of the columns, whole groups [64 sa, 64 sb).
struct VecBlock {
  TcView w[kVecJ];
  int cols, ng, sa, sb, ga, ngw;  // the warp's groups: ngw from ga

  __device__ __forceinline__ VecBlock(const TcView& w0, const TcView& w1, int cols_) : cols(cols_) {
    w[0] = w0, w[1] = w1;
    ng = cols >> w0.group_shift;
    const int warp = threadIdx.x / 32, sh = w0.group_shift - 6;  // spans a group: 1 << sh
    ga = warp * ng / kVecWarps, ngw = (warp + 1) * ng / kVecWarps - ga;
    sa = ga << sh, sb = (ga + ngw) << sh;
  }

  // Every thread of the block: rows r0 .. r0 + 7 of w[0] and r1 .. r1 + 7 of w[1] (those that
  // exist) into the stage st as one group of asynchronous copies. Thread t copies every 16th
  // chunk of 16 bytes of row t / 16 from t % 16, and a quarter of the threads each of the two
  // halves' scales and biases.
  __device__ __forceinline__ void issue(uint8_t* st, int64_t r0, int64_t r1) const {
    static_assert(kVecThreads == 16 * 16 && kVecJ == 2, "16 threads a staged row, 64 a scale range");
    const int rs = vec_row_stride(cols), cpr = cols / 32, q = threadIdx.x / 16;
    const bool second = q >= 8;
    const int64_t row = (second ? r1 : r0) + q % 8;
    if (row < (second ? w[1].rows : w[0].rows)) {
      const uint8_t* src = (second ? w[1].data : w[0].data) + row * (second ? w[1].row_bytes : w[0].row_bytes);
      uint8_t* dst = st + q * rs;
      for (int c = threadIdx.x % 16; c < cpr; c += 16) cp_async16(dst + 16 * c, src + 16 * c);
    }
    const int part = threadIdx.x / 64, j = part % 2;  // 0, 1: the scales of w[0], w[1]; 2, 3: biases
    // the fields selected one by one: a view indexed at run time would go to local memory
    const uint8_t* base = part == 0 ? w[0].scales : part == 1 ? w[1].scales : part == 2 ? w[0].biases : w[1].biases;
    const int64_t r = j ? r1 : r0, es = (j ? w[1].stype : w[0].stype) == kSF32 ? 4 : 2;
    const int64_t sc = j ? w[1].scale_cols : w[0].scale_cols;
    const int64_t nv = max(int64_t(0), min(int64_t(8), (j ? w[1].rows : w[0].rows) - r));
    copy_async(st + 16 * rs + part * vec_scale_region(ng), base + r * sc * es, int(nv * sc * es), threadIdx.x % 64, 64);
    cp_async_commit();
  }

  // The scales and biases of this warp's groups of a landed stage st as converted: for each
  // half j, group gi and lane tig, {scale, scale, bias, bias} of rows 2 tig, 2 tig + 1 at cv[(j
  // ngw + gi - ga) 4 + tig] (ngw groups from ga). Every lane of the warp calls it.
  __device__ __forceinline__ void convert(const uint8_t* st, float4* cv) const {
    const int lane = threadIdx.x % 32;
    const uint8_t* scl = st + 16 * vec_row_stride(cols);
    const int region = vec_scale_region(ng);
#pragma unroll
    for (int j = 0; j < kVecJ; ++j)
      for (int e = lane; e < 4 * ngw; e += 32) {
        const int gi = ga + e / 4, tig = e % 4, a0 = 2 * tig * ng + gi, a1 = a0 + ng;
        const uint8_t* sp = scl + j * region;
        const uint8_t* bp = scl + (kVecJ + j) * region;
        cv[j * 4 * ngw + e] = make_float4(load_scale(sp, a0, w[j].stype), load_scale(sp, a1, w[j].stype),
                                          load_scale(bp, a0, w[j].stype), load_scale(bp, a1, w[j].stype));
      }
    __syncwarp();
  }

  // acc[j][e]: this warp's part of row 2 tig + e of the stage's w[j] rows . x row g (lane = 4 g
  // + tig), in units of x * 2^e; x's n rows split in s.
  __device__ __forceinline__ void run(const VecSmem& s, const uint8_t* st, const float4* cv, int n,
                                      float (&acc)[kVecJ][2]) const {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4, nc = s.cols / 32;
    const int rs = vec_row_stride(cols), gsh = w[0].group_shift;
    const int gmask = (1 << gsh) - 1;
    const bool has_x = g < n;
    const uint4* xw = reinterpret_cast<const uint4*>(s.x + 2 * g * s.cols) + 4 * tig;  // 16 words a lane
    const uint8_t* code = st + g * rs + 8 * tig;
    float dot[kVecJ][4], sc[kVecJ][2], bi[kVecJ][2], xsum = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecJ; ++j) {
      acc[j][0] = acc[j][1] = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q) dot[j][q] = 0.0f;
    }
#pragma unroll 2
    for (int sp = sa; sp < sb; ++sp) {
      const int col = sp * 64;
      if ((col & gmask) == 0) {  // a group starts: its scales and biases
        const int gw = (col >> gsh) - ga;
#pragma unroll
        for (int j = 0; j < kVecJ; ++j) {
          const float4 v = cv[(j * ngw + gw) * 4 + tig];
          sc[j][0] = v.x, sc[j][1] = v.y, bi[j][0] = v.z, bi[j][1] = v.w;
        }
      }
      uint4 a[4] = {};  // the four MMAs' A: hi and lo words of x row g, interleaved
      if (has_x) {
#pragma unroll
        for (int m = 0; m < 4; ++m) a[m] = xw[col / 4 + m];
        const float2 sum = *reinterpret_cast<const float2*>(s.sums + g * nc + 2 * sp);
        xsum += sum.x + sum.y;
      }
#pragma unroll
      for (int j = 0; j < kVecJ; ++j) {
        const uint2 raw = *reinterpret_cast<const uint2*>(code + j * 8 * rs + sp * 32);
        uint32_t ba[4], bb[4];
        q4_codes(raw.x, ba);
        q4_codes(raw.y, bb);
        mma16816(dot[j], a[0].x, a[0].y, a[0].z, a[0].w, ba[0], ba[1]);
        mma16816(dot[j], a[1].x, a[1].y, a[1].z, a[1].w, ba[2], ba[3]);
        mma16816(dot[j], a[2].x, a[2].y, a[2].z, a[2].w, bb[0], bb[1]);
        mma16816(dot[j], a[3].x, a[3].y, a[3].z, a[3].w, bb[2], bb[3]);
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

// The first min(stages, rb1 - rb0) row blocks of a block's rb0 .. rb1 - 1 into stages 0, 1, ..
// (rows(rb, r0, r1): the rows of w[0] and w[1] of row block rb); a group of copies for each
// stage, empty past rb1.
template <typename Rows>
__device__ __forceinline__ void vec_prologue(const VecBlock& vb, const VecSmem& s, int rb0, int rb1, int stages,
                                             Rows rows) {
  for (int i = 0; i < stages; ++i) {
    if (rb0 + i < rb1) {
      int64_t r0 = 0, r1 = 0;
      rows(rb0 + i, r0, r1);
      vb.issue(s.stage + i * s.stage_bytes, r0, r1);
    } else {
      cp_async_commit();
    }
  }
}

// A block's row blocks rb0 .. rb1 - 1 against x's n rows split in s, after vec_prologue: out(rb,
// ...) as reduce_block's, then after(rb) with the block synchronised, for each row block. Row
// block rb + stages loads into the stage that rb leaves.
template <typename Rows, typename Out, typename After>
__device__ __forceinline__ void vec_rows_loop(const VecBlock& vb, const VecSmem& s, int n, int rb0, int rb1,
                                              int stages, Rows rows, Out out, After after) {
  for (int rb = rb0, buf = 0; rb < rb1; ++rb, buf = buf + 1 == stages ? 0 : buf + 1) {
    uint8_t* st = s.stage + buf * s.stage_bytes;
    cp_async_wait_all_but(stages - 1);
    __syncthreads();
    float4* cv = s.cvt + (threadIdx.x / 32) * 8 * vec_warp_groups(s.ng);
    vb.convert(st, cv);
    float acc[kVecJ][2];
    vb.run(s, st, cv, n, acc);
    reduce_block(s, acc, [&](int j, int t, int q, float v) { out(rb, j, t, q, v); });
    if (rb + stages < rb1) {
      int64_t r0 = 0, r1 = 0;
      rows(rb + stages, r0, r1);
      vb.issue(st, r0, r1);
    } else {
      cp_async_commit();
    }
    after(rb);
  }
}

// Block x: row blocks (16 rows) [rbb * (x - first[i]), + rbb) of weight i, `stages` of them in
// flight; the first ones load before the kernel before it ends.
__global__ void __launch_bounds__(kVecThreads, 2)
    matvec_vec_kernel(TcDense d, const float* x, int n, int rbb, int stages) {
  extern __shared__ __align__(16) uint8_t smem[];
  TcView w;
  float* y;
  int32_t first;
  tc_weight(d, w, y, first);
  const int cols = int(d.w[0].cols);
  const int rb0 = int(blockIdx.x - first) * rbb, rb1 = min(rb0 + rbb, int((w.rows + 15) / 16));
  const VecBlock vb(w, w, cols);
  const VecSmem s = carve(smem, n, cols, vb.ng, stages);
  const auto rows = [](int rb, int64_t& r0, int64_t& r1) { r0 = 16 * int64_t(rb), r1 = r0 + 8; };
  vec_prologue(vb, s, rb0, rb1, stages, rows);
  await_previous();
  split_block([&](int i) { return x + int64_t(i) * cols; }, n, s);
  vec_rows_loop(
      vb, s, n, rb0, rb1, stages, rows,
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
                       const int32_t* tiles, const int32_t* n_tiles, float* h, int rbb, int stages) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float gu[kVecJ][64];  // gate and up of (x row, weight row)
  await_previous();
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  const int rb0 = int(blockIdx.x) * rbb, rb1 = min(rb0 + rbb, int((hidden + 7) / 8));
  if (!table[3 * e].data || rb0 >= rb1) return;
  const VecBlock vb(tc_view(table[3 * e]), tc_view(table[3 * e + 1]), dim);
  const VecSmem s = carve(smem, n, dim, vb.ng, stages);
  const auto rows = [](int rb, int64_t& r0, int64_t& r1) { r0 = r1 = 8 * int64_t(rb); };
  vec_prologue(vb, s, rb0, rb1, stages, rows);
  split_block([&](int i) { return x + int64_t(sorted[first + i] / k) * dim; }, n, s);
  vec_rows_loop(
      vb, s, n, rb0, rb1, stages, rows, [&](int, int j, int t, int q, float v) { gu[j][t * 8 + q] = v * s.inv[t]; },
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
                    const int32_t* tiles, const int32_t* n_tiles, float* y, int rbb, int stages) {
  extern __shared__ __align__(16) uint8_t smem[];
  await_previous();
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  const int rb0 = int(blockIdx.x) * rbb, rb1 = min(rb0 + rbb, int((dim + 15) / 16));
  if (!table[3 * e + 2].data || rb0 >= rb1) return;
  const TcView d = tc_view(table[3 * e + 2]);
  const VecBlock vb(d, d, hidden);
  const VecSmem s = carve(smem, n, hidden, vb.ng, stages);
  const auto rows = [](int rb, int64_t& r0, int64_t& r1) { r0 = 16 * int64_t(rb), r1 = r0 + 8; };
  vec_prologue(vb, s, rb0, rb1, stages, rows);
  split_block([&](int i) { return h + int64_t(sorted[first + i]) * hidden; }, n, s);
  vec_rows_loop(
      vb, s, n, rb0, rb1, stages, rows,
      [&](int rb, int j, int t, int q, float v) {
        const int64_t row = 16 * int64_t(rb) + 8 * j + q;
        if (t < n && row < dim) y[int64_t(sorted[first + t]) * dim + row] = v * s.inv[t];
      },
      [](int) {});
}

// Row blocks a block computes: about two blocks a multiprocessor for `total` row blocks, at
// most kMaxRbb (a block's row blocks run one after another).
constexpr int kMaxRbb = 8;
int rows_per_block(int64_t total) {
  const int64_t target = 2 * int64_t(multiprocessors());
  return int(std::clamp<int64_t>((total + target - 1) / target, 1, kMaxRbb));
}

// Row blocks in flight for a block of rbb row blocks against n rows of x: as many as it has, up
// to kMaxStages, while two such blocks fit a multiprocessor (one stage where not even they do).
int vec_stages(int n, int64_t cols, int64_t group, int rbb, size_t static_smem) {
  int stages = std::min(rbb, kMaxStages);
  while (stages > 1 && vec_smem_bytes(n, cols, group, stages) + static_smem > kVecTwoPerSm) --stages;
  return stages;
}

// The most rows of x a launch over cols columns takes (0 where not even one fits).
int vec_rows_fit(int64_t cols, int64_t group) {
  int n = kVecRows;
  while (n > 0 && vec_smem_bytes(n, cols, group, 1) + sizeof(float) * kVecJ * 64 > kVecSmemMax) --n;
  return n;
}

// The launch shape of an expert kernel over rbs row blocks per tile: its grid, row blocks per
// block and stages.
struct TileGrid {
  dim3 grid;
  int rbb, stages;
};
TileGrid tile_grid(int64_t rbs, const PairTiles& pt, int n, int64_t cols, int64_t group, size_t static_smem) {
  const int rbb = rows_per_block(rbs * std::min<int64_t>(pt.tiles_max, pt.pairs));
  return {dim3(unsigned((rbs + rbb - 1) / rbb), unsigned(pt.tiles_max)), rbb,
          vec_stages(n, cols, group, rbb, static_smem)};
}

}  // namespace

bool vec_rows(const DW& w) {
  return w.fmt == kQ4 && w.group >= 64 && w.cols % 64 == 0 && w.row_bytes % 16 == 0 && w.rows > 0 &&
         w.scale_cols == w.cols / w.group && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
         vec_rows_fit(w.cols, w.group) > 0;
}

int64_t vec_group(const DW& w) { return vec_rows(w) && vec_rows_fit(w.cols, w.group) >= kTile ? w.group : 0; }

void matmul_vec(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, cudaStream_t s) {
  MF_ASSERT(ws.size() == ys.size() && T >= 1 && !ws.empty());
  const int64_t fit = vec_rows_fit(ws[0].cols, ws[0].group);
  MF_ASSERT(fit > 0);
  if (T > fit) {  // fit rows of x at a time
    std::vector<float*> part(ys.size());
    for (int64_t t0 = 0; t0 < T; t0 += fit) {
      for (size_t j = 0; j < ys.size(); ++j) part[j] = ys[j] + t0 * ws[j].rows;
      matmul_vec(ws, x + t0 * ws[0].cols, std::min<int64_t>(fit, T - t0), part, s);
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
    const int stages = vec_stages(int(T), lead.cols, lead.group, rbb, 0);
    const size_t smem = vec_smem_bytes(int(T), lead.cols, lead.group, stages);
    allow_smem<matvec_vec_kernel>(smem);
    launch_smem("matvec_vec", matvec_vec_kernel, dim3(unsigned(d.first[n])), dim3(kVecThreads), smem, s, d, x, int(T),
                rbb, stages);
  }
}

void experts_gate_up_vec(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* x, int32_t k,
                         const PairTiles& pt, float* h, cudaStream_t s) {
  const int n = int(std::min<int64_t>(kTile, pt.pairs / k));
  const size_t gu = sizeof(float) * kVecJ * 64;
  const TileGrid g = tile_grid((hidden + 7) / 8, pt, n, dim, group, gu);
  const size_t smem = vec_smem_bytes(n, dim, group, g.stages);
  allow_smem<gate_up_vec_kernel>(smem);
  launch_smem("experts_gate_up_vec", gate_up_vec_kernel, g.grid, dim3(kVecThreads), smem, s, table, hidden, int(dim), x,
              k, pt.sorted, pt.tiles, pt.n_tiles, h, g.rbb, g.stages);
}

void experts_down_vec(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* h, const PairTiles& pt,
                      int32_t k, float* y, cudaStream_t s) {
  const int n = int(std::min<int64_t>(kTile, pt.pairs / k));
  const TileGrid g = tile_grid((dim + 15) / 16, pt, n, hidden, group, 0);
  const size_t smem = vec_smem_bytes(n, hidden, group, g.stages);
  allow_smem<down_vec_kernel>(smem);
  launch_smem("experts_down_vec", down_vec_kernel, g.grid, dim3(kVecThreads), smem, s, table, dim, int(hidden), h,
              pt.sorted, pt.tiles, pt.n_tiles, y, g.rbb, g.stages);
}

}  // namespace moeflux::cuda
