// Steps of at most kVecRows rows of x and the routed experts' tiles of at most kTile pairs over
// affine 4-bit weights (vec_rows; groups of at most 256 columns, an even number of them), a warp
// per 16 weight rows over a slice of the columns, in int8 on tensor cores (m16n8k32):
// - each row of x once a launch (digits_kernel, into scratch) as four signed 8-bit digits of
//   v = rint(x 2^e), e putting the row's largest magnitude in [2^26, 2^27): v = d0 2^21 + d1
//   2^14 + d2 2^7 + d3, each digit in [-64, 64] (a relative error of at most 2^-27 of the
//   row's largest magnitude, about f32's own);
// - A is the weights' 4-bit codes as bytes (a word of 8 codes: its even codes and its odd codes,
//   one lop3 each), B the digits; the products summed in int32 are exact, each group's sums
//   are scaled in f32 (scale times the sum, bias times the group's sum of x), the digits
//   weighted at the end.
// A warp reads its rows' codes straight into registers, kRing spans ahead, and holds its rows
// until its slice ends. A launch splits the columns over 2^ks_shift warps of a block where its
// weights have too few rows to fill the device (fixed by the weights' shape, not by how many
// rows of x come, so that a row of x gets the same bits alone and in a step of several).
//
// Against mma_vec.cu (x in f16 hi + lo, m16n8k16; row blocks staged for a whole block, split
// again by every block) on qwen3-30b-a3b's 48 layers on an H100: see docs/performance.md.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <span>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/device_memory.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_common.cuh"

namespace moeflux::cuda {

bool& warp_rows_on() {
  static bool on = true;
  return on;
}

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps, kRing = 8, kMaxKsShift = 3, kMaxWarpGroups = 16;
constexpr size_t kSmemMax = 227 * 1024;

// Bytes between digit rows: cols / 64 spans of 64 bytes, an odd number of 64-byte halves of
// 128 (two rows that 8 lanes read together then fall on different banks).
__host__ __device__ constexpr int digit_stride(int64_t cols) { return int(cols / 64 + 1 - cols / 64 % 2) * 64; }
// A row of x as digits (digits_kernel): its 4 digit rows (digit_stride apart; in a digit row,
// column c of span sp (c64 = c % 64) is byte (c64 % 8) / 2 of word 2 ((c64 / 8) % 2) + c64 % 2
// of the 16 bytes at sp 64 + 16 (c64 / 16): the words a lane (g, tig) gives the two m16n8k32 of
// a span as B), then its groups' sums of v times 2^-21, then 2^-e (NaN for a row with a value
// not finite).
__host__ __device__ constexpr size_t digit_row_bytes(int64_t cols, int64_t ng) {
  return 4 * size_t(digit_stride(cols)) + round16(size_t(ng + 1) * 4);
}

// A block's shared memory: the warps' parts (column slices) of their rows, 2^-e of each row of
// x, each warp's scales and biases as stored (32 runs of ngw_max values: lane l's run holds the
// scales (l < 16) or biases of row l % 8 of set (l / 8) % 2) and as converted, the groups' sums
// of x (sums[group 8 + t]), then x's digit rows (row t's digit d at 4 t + d, rs bytes apart).
struct WarpSmem {
  float* part;   // (kWarps, 2 sets, 8 rows of x, 8 weight rows)
  float* inv;    // (kVecRows)
  uint8_t* raw;  // (kWarps, 32 runs, 4 ngw_max bytes)
  float4* cvt;   // (kWarps, 8 ngw_max)
  float* sums;   // (ng, 8)
  uint8_t* x;    // (4 n, rs)
  int rs;
};
constexpr size_t kHead = size_t(kWarps * 2 * 64 + kVecRows) * 4;
size_t warp_smem_bytes(int n, int64_t cols, int64_t group, int ngw_max) {
  return kHead + size_t(kWarps) * 32 * 4 * size_t(ngw_max) + size_t(kWarps) * 8 * size_t(ngw_max) * 16 +
         round16(size_t(cols / group) * 8 * 4) + 4 * size_t(n) * size_t(digit_stride(cols));
}
__device__ __forceinline__ WarpSmem carve(uint8_t* smem, int cols, int ng, int ngw_max) {
  WarpSmem s;
  s.part = reinterpret_cast<float*>(smem);
  s.inv = s.part + kWarps * 2 * 64;
  uint8_t* p = smem + kHead;
  s.raw = p, p += size_t(kWarps) * 32 * 4 * ngw_max;
  s.cvt = reinterpret_cast<float4*>(p), p += size_t(kWarps) * 8 * ngw_max * 16;
  s.sums = reinterpret_cast<float*>(p), p += round16(size_t(ng) * 8 * 4);
  s.x = p;
  s.rs = digit_stride(cols);
  return s;
}

__device__ __forceinline__ uint2 load_codes(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// A warp's weight rows: set j is rows r0[j] .. r0[j] + 7 of w[j] (those that exist), over the
// groups [ga, ga + ngw) of the columns.
struct WarpRows {
  TcView w[2];
  int64_t r0[2];
  int ga, ngw;
};

// The codes of one lane (g, tig) of a warp: row g of each set, kRing spans in flight.
struct CodeRing {
  const uint8_t* p[2];  // the lane's 8 bytes of span 0
  bool ok[2];
  int sa, sb;  // the spans [sa, sb)
  uint2 ring[kRing][2];

  __device__ __forceinline__ explicit CodeRing(const WarpRows& wr) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4, sh = wr.w[0].group_shift - 6;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const TcView& w = j ? wr.w[1] : wr.w[0];
      const int64_t row = wr.r0[j] + g;
      ok[j] = row < w.rows;
      p[j] = w.data + (ok[j] ? row : 0) * w.row_bytes + 8 * tig;
    }
    sa = wr.ga << sh, sb = (wr.ga + wr.ngw) << sh;
#pragma unroll
    for (int d = 0; d < kRing; ++d) load(d, sa + d);
  }
  __device__ __forceinline__ void load(int d, int sp) {
#pragma unroll
    for (int j = 0; j < 2; ++j) ring[d][j] = sp < sb && ok[j] ? load_codes(p[j] + int64_t(sp) * 32) : make_uint2(0, 0);
  }
};

// Lane l of the warp: its run of scales (l < 16) or biases of row l % 8 of set (l / 8) % 2,
// groups [ga, ga + ngw), into raw (this warp's runs, 4 ngw_max bytes apart) by asynchronous
// copies of 4 bytes (a run of 2-byte values starts at an even group of a row of an even number
// of groups: slices_fit). Rows past the weight's are not copied.
__device__ __forceinline__ void issue_scales(const WarpRows& wr, uint8_t* raw, int ngw_max) {
  const int lane = threadIdx.x % 32, j = (lane / 8) % 2, r = lane % 8;
  const TcView w = j ? wr.w[1] : wr.w[0];  // a copy: a reference chosen at run time would go to local memory
  const int64_t row = (j ? wr.r0[1] : wr.r0[0]) + r;
  if (row < w.rows) {
    const int es = w.stype == kSF32 ? 4 : 2;
    const uint8_t* src = (lane < 16 ? w.scales : w.biases) + (row * w.scale_cols + wr.ga) * es;
    uint8_t* dst = raw + lane * 4 * ngw_max;
    for (int i = 0; i < wr.ngw * es / 4; ++i) cp_async4(dst + 4 * i, src + 4 * i);
  }
  cp_async_commit();
}

// issue_scales's runs, landed: for group gi and lane g, {scale, scale, bias, bias} of row g of
// sets 0 and 1 at cv[(gi - ga) 8 + g] (0 past the weight's rows). Every lane of the warp calls
// it.
__device__ __forceinline__ void convert_scales(const WarpRows& wr, const uint8_t* raw, int ngw_max, float4* cv) {
  cp_async_wait<0>();
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 8 * wr.ngw; e += 32) {
    const int gw = e / 8, g = e % 8;
    float v[4] = {};
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if ((j ? wr.r0[1] : wr.r0[0]) + g < (j ? wr.w[1].rows : wr.w[0].rows)) {
        const uint8_t st = j ? wr.w[1].stype : wr.w[0].stype;
        v[j] = load_scale(raw + (j * 8 + g) * 4 * ngw_max, gw, st);
        v[2 + j] = load_scale(raw + (16 + j * 8 + g) * 4 * ngw_max, gw, st);
      }
    cv[e] = make_float4(v[0], v[1], v[2], v[3]);
  }
  __syncwarp();
}

__device__ __forceinline__ int digits_exponent(float m, bool finite) {
  if (!finite || !(m > 0.0f)) return 0;
  int me = 0;
  frexpf(m, &me);  // m < 2^me
  return max(-126, min(126, 27 - me));
}
__device__ __forceinline__ void digits4(float v, int (&d)[4]) {
  const int iv = __float2int_rn(v);
  d[0] = (iv + (1 << 20)) >> 21;
  int r = iv - (d[0] << 21);
  d[1] = (r + (1 << 13)) >> 14;
  r -= d[1] << 14;
  d[2] = (r + 64) >> 7;
  d[3] = r - (d[2] << 7);
}
// The low bytes of a, b, c, d as one word (a lowest).
__device__ __forceinline__ uint32_t pack_bytes(int a, int b, int c, int d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// Block t: row t of x (rows of cols floats) as digits at dig + t digit_row_bytes (groups of 1
// << gsh columns, at most 256). A lane takes 8 columns, a warp every kWarps-th 256.
__global__ void __launch_bounds__(kThreads) digits_kernel(const float* x, int cols, int gsh, uint8_t* dig) {
  __shared__ float mx[kWarps];
  await_previous();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nq = cols / 8, ng = cols >> gsh, rs = digit_stride(cols);
  const float* xr = x + int64_t(blockIdx.x) * cols;
  split_row_max<kWarps, 1>([&](int) { return xr; }, 1, cols, mx);
  bool finite = true;
  const float m = split_row_max_of<kWarps, 1>(mx, 0, finite);
  const int e = digits_exponent(m, finite);
  uint8_t* out = dig + size_t(blockIdx.x) * digit_row_bytes(cols, ng);
  float* sums = reinterpret_cast<float*>(out + 4 * rs);
  if (threadIdx.x == 0) sums[ng] = finite ? pow2f(-e) : __int_as_float(0x7fc00000);
  for (int q0 = 32 * warp; q0 < nq; q0 += kThreads) {
    const int q = q0 + lane;
    const bool ok = q < nq;
    float v[8];
    load8(xr, q, ok && finite, pow2f(e), v);
    int dg[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) digits4(v[i], dg[i]);
    if (ok) {
      uint8_t* at = out + (q / 8) * 64 + ((q % 8) / 2) * 16 + (q % 2) * 8;
#pragma unroll
      for (int d = 0; d < 4; ++d)
        *reinterpret_cast<uint2*>(at + d * rs) = make_uint2(pack_bytes(dg[0][d], dg[2][d], dg[4][d], dg[6][d]),
                                                            pack_bytes(dg[1][d], dg[3][d], dg[5][d], dg[7][d]));
    }
    float sum = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    for (int o = 1; o < (1 << gsh) / 8; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (ok && ((8 * q) & ((1 << gsh) - 1)) == 0) sums[(8 * q) >> gsh] = sum * 0x1p-21f;
  }
}

// Rows row(t), t < n, of digits_kernel's dig into s. Every thread calls it; it ends
// synchronised (this thread's earlier asynchronous copies landed too).
template <typename Row>
__device__ __forceinline__ void load_digits(const uint8_t* dig, Row row, int n, int cols, int ng, const WarpSmem& s) {
  const size_t rb = digit_row_bytes(cols, ng);
  const int chunks = s.rs / 4;  // 16-byte chunks of 4 digit rows
  for (int t = 0; t < n; ++t) {
    const uint8_t* src = dig + size_t(row(t)) * rb;
    for (int c = threadIdx.x; c < chunks; c += kThreads) cp_async16(s.x + 4 * t * s.rs + 16 * c, src + 16 * c);
    const float* sums = reinterpret_cast<const float*>(src + 4 * s.rs);
    for (int g = threadIdx.x; g <= ng; g += kThreads)
      if (g < ng) s.sums[g * 8 + t] = sums[g];
      else s.inv[t] = sums[g];
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
}

// d += a b: a 16x32 u8 (row), b 32x8 s8 (col); d 16x8 s32.
__device__ __forceinline__ void mma16832(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A warp's rows . x: A is the weights (rows 0-7: row g of set 0, rows 8-15: set 1; a
// word of 8 codes gives its even codes as a0 / a1 and its odd ones as a2 / a3), B is NB tiles
// of 8 digit columns (x rows 2 b, 2 b + 1, four digits each). res[b][j]: in lanes of even tig,
// row g of set j . x row 2 b + tig / 2, in units of x * 2^e.
template <int NB>
__device__ __forceinline__ void warp_run(const WarpRows& wr, CodeRing& cr, const WarpSmem& s, const float4* cv,
                                            int n, float (&res)[NB][2]) {
  constexpr uint32_t kLo = 0x0f0f0f0fu;
  const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int gsh = wr.w[0].group_shift, gmask = (1 << gsh) - 1, ga = wr.ga;
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(s.x) + g * s.rs + tig * 16;
  int c[NB][4];
  float acc[NB][4];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int i = 0; i < 4; ++i) c[b][i] = 0, acc[b][i] = 0.0f;
  float4 sb = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = cr.sa; s0 < cr.sb; s0 += kRing) {
#pragma unroll
    for (int d = 0; d < kRing; ++d) {
      const int sp = s0 + d;
      if (sp >= cr.sb) break;
      const int col = sp * 64;
      if ((col & gmask) == 0) sb = cv[((col >> gsh) - ga) * 8 + g];  // a group starts
      const uint2 r0 = cr.ring[d][0], r1 = cr.ring[d][1];
      const uint32_t a00 = r0.x & kLo, a01 = r1.x & kLo, a02 = (r0.x >> 4) & kLo, a03 = (r1.x >> 4) & kLo;
      const uint32_t a10 = r0.y & kLo, a11 = r1.y & kLo, a12 = (r0.y >> 4) & kLo, a13 = (r1.y >> 4) & kLo;
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        uint4 xv = make_uint4(0, 0, 0, 0);
        if (2 * b + g / 4 < n) xv = *reinterpret_cast<const uint4*>(xb + 8 * b * s.rs + sp * 64);
        mma16832(c[b], a00, a01, a02, a03, xv.x, xv.y);
        mma16832(c[b], a10, a11, a12, a13, xv.z, xv.w);
      }
      cr.load(d, sp + kRing);
      if (((col + 64) & gmask) == 0) {  // the group ends
        const int gi = col >> gsh;
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          // the bias term goes with digit 0 (columns 0 and 4 of a tile: lanes of tig 0, 2)
          const float xs = tig % 2 == 0 && 2 * b + tig / 2 < n ? s.sums[gi * 8 + 2 * b + tig / 2] : 0.0f;
          acc[b][0] = fmaf(sb.x, float(c[b][0]), fmaf(sb.z, xs, acc[b][0]));
          acc[b][1] = fmaf(sb.x, float(c[b][1]), acc[b][1]);
          acc[b][2] = fmaf(sb.y, float(c[b][2]), fmaf(sb.w, xs, acc[b][2]));
          acc[b][3] = fmaf(sb.y, float(c[b][3]), acc[b][3]);
#pragma unroll
          for (int i = 0; i < 4; ++i) c[b][i] = 0;
        }
      }
    }
  }
  // lane tig holds digits 2 (tig % 2) and 2 (tig % 2) + 1; the pair tig, tig ^ 1 all four
  const float wa = tig % 2 ? 0x1p7f : 0x1p21f, wb = tig % 2 ? 1.0f : 0x1p14f;
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float p = fmaf(wa, acc[b][2 * j], wb * acc[b][2 * j + 1]);
      res[b][j] = p + __shfl_xor_sync(0xffffffffu, p, 1);
    }
}

// The parts in s.part summed over each warp row's 2^ks_shift column slices in slice order:
// out(rw, t, q, v0, v1) for warp row rw of the block, x row t < n and row q of both sets, by one
// thread each. Starts with a barrier.
template <typename Out>
__device__ __forceinline__ void sum_slices(const WarpSmem& s, int n, int ks_shift, Out out) {
  __syncthreads();
  const int ks = 1 << ks_shift;
  for (int i = threadIdx.x; i < (kWarps >> ks_shift) * 64; i += kThreads) {
    const int rw = i / 64, t = (i / 8) % 8, q = i % 8;
    if (t >= n) continue;
    float v0 = 0.0f, v1 = 0.0f;
    for (int k = 0; k < ks; ++k) {
      const float* pw = s.part + (rw * ks + k) * 2 * 64 + t * 8 + q;
      v0 += pw[0], v1 += pw[64];
    }
    out(rw, t, q, v0, v1);
  }
}

// res summed over the slices (sum_slices's out; in units of x * 2^e).
template <int NB, typename Out>
__device__ __forceinline__ void finish(const WarpSmem& s, const float (&res)[NB][2], int n, int ks_shift, Out out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    const int t = 2 * b + tig / 2;
    if (tig % 2 || t >= n) continue;
    if (ks_shift == 0) {
      out(warp, t, g, res[b][0], res[b][1]);
    } else {
      s.part[(warp * 2) * 64 + t * 8 + g] = res[b][0];
      s.part[(warp * 2 + 1) * 64 + t * 8 + g] = res[b][1];
    }
  }
  if (ks_shift > 0) sum_slices(s, n, ks_shift, out);
}

// Where slice ks of 2^ks_shift of ng groups starts: an even group (ng is even).
__host__ __device__ constexpr int slice_start(int ks, int ng, int ks_shift) { return ((ks * ng) >> ks_shift) & ~1; }

// The warp's slice of a block's warp row: warp rw = warp >> ks_shift takes groups [ga, ga +
// ngw) of ng.
__device__ __forceinline__ void warp_slice(int ng, int ks_shift, int& rw, int& ga, int& ngw) {
  const int warp = threadIdx.x / 32, ks = warp & ((1 << ks_shift) - 1);
  rw = warp >> ks_shift;
  ga = slice_start(ks, ng, ks_shift), ngw = slice_start(ks + 1, ng, ks_shift) - ga;
}

// A block's work once its warps' rows are set (wr: the warp's rows, slice included; row(t):
// the row of dig of x row t, n of them): the codes and scales issued, then before() (the dense
// kernel awaits the kernel before there), x's digits loaded, the rows run, out as sum_slices's
// (in units of x).
template <typename Before, typename Row, typename Out>
__device__ __forceinline__ void warp_rows_block(uint8_t* smem, const WarpRows& wr, int cols, int n, int ks_shift,
                                                int ngw_max, const uint8_t* dig, Before before, Row row, Out out) {
  const int ng = cols >> wr.w[0].group_shift;
  const WarpSmem s = carve(smem, cols, ng, ngw_max);
  float4* cv = s.cvt + (threadIdx.x / 32) * 8 * ngw_max;
  uint8_t* raw = s.raw + (threadIdx.x / 32) * 32 * 4 * ngw_max;
  CodeRing cr(wr);
  issue_scales(wr, raw, ngw_max);
  before();
  load_digits(dig, row, n, cols, ng, s);
  convert_scales(wr, raw, ngw_max, cv);
  const auto scaled = [&](int r, int t, int q, float v0, float v1) { out(r, t, q, v0 * s.inv[t], v1 * s.inv[t]); };
  const auto run = [&](auto nb) {
    constexpr int NB = decltype(nb)::value;
    float res[NB][2];
    warp_run<NB>(wr, cr, s, cv, n, res);
    finish<NB>(s, res, n, ks_shift, scaled);
  };
  switch ((n + 1) / 2) {
    case 1: run(std::integral_constant<int, 1>{}); break;
    case 2: run(std::integral_constant<int, 2>{}); break;
    case 3: run(std::integral_constant<int, 3>{}); break;
    default: run(std::integral_constant<int, 4>{}); break;
  }
}

// Block x: warp rows (16 weight rows) [(x - first[i]) * rwb, + rwb) of weight i; x's n rows as
// digits in dig.
__global__ void __launch_bounds__(kThreads, 2)
    matvec_warp_kernel(TcDense d, const uint8_t* dig, int n, int ks_shift, int ngw_max) {
  extern __shared__ __align__(16) uint8_t smem[];
  TcView w;
  float* y;
  int32_t first;
  tc_weight(d, w, y, first);
  const int cols = int(d.w[0].cols);
  int rw = 0;
  WarpRows wr;
  warp_slice(cols >> w.group_shift, ks_shift, rw, wr.ga, wr.ngw);
  const int64_t wrow0 = int64_t(blockIdx.x - first) * (kWarps >> ks_shift);
  wr.w[0] = wr.w[1] = w;
  wr.r0[0] = 16 * (wrow0 + rw), wr.r0[1] = wr.r0[0] + 8;
  // the weights' first spans come while the kernel before ends
  warp_rows_block(
      smem, wr, cols, n, ks_shift, ngw_max, dig, [] { await_previous(); }, [](int t) { return t; },
      [&](int r, int t, int q, float v0, float v1) {
        const int64_t row = 16 * (wrow0 + r) + q;
        if (row < w.rows) y[int64_t(t) * w.rows + row] = v0;
        if (row + 8 < w.rows) y[int64_t(t) * w.rows + row + 8] = v1;
      });
}

// Block (x, tile): hidden rows [8 wr, 8 wr + 8) of gate (set 0) and up (set 1) for the tile's
// pairs, warp rows wr in [rwb x, rwb x + rwb).
__global__ void __launch_bounds__(kThreads, 2)
    gate_up_warp_kernel(const DW* table, int64_t hidden, int dim, const uint8_t* dig, int32_t k, const int32_t* sorted,
                        const int32_t* tiles, const int32_t* n_tiles, float* h, int ks_shift, int ngw_max) {
  extern __shared__ __align__(16) uint8_t smem[];
  await_previous();
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  if (!table[3 * e].data) return;
  int rw = 0;
  WarpRows wr;
  wr.w[0] = tc_view(table[3 * e]), wr.w[1] = tc_view(table[3 * e + 1]);
  warp_slice(dim >> wr.w[0].group_shift, ks_shift, rw, wr.ga, wr.ngw);
  const int64_t wrow0 = int64_t(blockIdx.x) * (kWarps >> ks_shift);
  wr.r0[0] = wr.r0[1] = 8 * (wrow0 + rw);
  warp_rows_block(
      smem, wr, dim, n, ks_shift, ngw_max, dig, [] {}, [&](int t) { return sorted[first + t] / k; },
      [&](int r, int t, int q, float a, float b) {
        const int64_t row = 8 * (wrow0 + r) + q;
        if (row < hidden) h[int64_t(sorted[first + t]) * hidden + row] = a / (1.0f + expf(-a)) * b;
      });
}

// Block (x, tile): down rows [16 wr, 16 wr + 16) for the tile's pairs' h, warp rows wr in [rwb
// x, rwb x + rwb).
__global__ void __launch_bounds__(kThreads, 2)
    down_warp_kernel(const DW* table, int64_t dim, int hidden, const uint8_t* dig, const int32_t* sorted,
                     const int32_t* tiles, const int32_t* n_tiles, float* y, int ks_shift, int ngw_max) {
  extern __shared__ __align__(16) uint8_t smem[];
  await_previous();
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  if (!table[3 * e + 2].data) return;
  int rw = 0;
  WarpRows wr;
  wr.w[0] = wr.w[1] = tc_view(table[3 * e + 2]);
  warp_slice(hidden >> wr.w[0].group_shift, ks_shift, rw, wr.ga, wr.ngw);
  const int64_t wrow0 = int64_t(blockIdx.x) * (kWarps >> ks_shift);
  wr.r0[0] = 16 * (wrow0 + rw), wr.r0[1] = wr.r0[0] + 8;
  warp_rows_block(
      smem, wr, hidden, n, ks_shift, ngw_max, dig, [] {}, [&](int t) { return sorted[first + t]; },
      [&](int r, int t, int q, float v0, float v1) {
        const int64_t row = 16 * (wrow0 + r) + q, at = int64_t(sorted[first + t]) * dim;
        if (row < dim) y[at + row] = v0;
        if (row + 8 < dim) y[at + row + 8] = v1;
      });
}

template <auto Kernel>
void allow_warp_smem(size_t bytes) {
  static size_t allowed = 48 * 1024;
  if (bytes > allowed) {
    MF_CUDA(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    allowed = bytes;
  }
}

// How a launch over warp_rows warp rows of ng groups splits the columns: log2 of the warps
// sharing a warp row, the most (up to 2^kMaxKsShift, at least two groups each) that keep the
// launch within one wave of two blocks a multiprocessor, or the fewest that keep a warp's groups
// within kMaxWarpGroups where even one slice a row takes more than a wave; and the most groups
// a warp takes.
struct Slices {
  int ks_shift, ngw_max;
};
int max_slice(int ng, int sh) {
  int m = 0;
  for (int k = 0; k < 1 << sh; ++k) m = std::max(m, slice_start(k + 1, ng, sh) - slice_start(k, ng, sh));
  return m;
}
Slices slices(int64_t warp_rows, int ng) {
  const int64_t slots = 2 * int64_t(multiprocessors());
  const auto blocks = [&](int sh) { return (warp_rows + (kWarps >> sh) - 1) / (kWarps >> sh); };
  int sh = 0;
  while (sh < kMaxKsShift && ng >= 2 << (sh + 1) &&
         (max_slice(ng, sh) > kMaxWarpGroups || blocks(sh + 1) <= slots))
    ++sh;
  return {sh, max_slice(ng, sh)};
}

// Whether a launch over weights of ng groups of `group` columns in these slices suits the
// kernels: an even number of groups (the slices' scales are whole 4-byte words), a warp's groups
// within kMaxWarpGroups, a group's sum one warp's (at most 256 columns).
bool slices_fit(const Slices& sl, int64_t group, int64_t ng) {
  return ng % 2 == 0 && sl.ngw_max <= kMaxWarpGroups && group <= 256;
}

// Rows [0, rows) of x (cols floats each) as digits into scratch from pool.
uint8_t* digits(const float* x, int64_t rows, int64_t cols, int64_t group, Scratch& sc, cudaStream_t s) {
  uint8_t* dig = sc.get<uint8_t>(size_t(rows) * digit_row_bytes(cols, cols / group));
  launch("digits", digits_kernel, dim3(unsigned(rows)), dim3(kThreads), s, x, int(cols), __builtin_ctzll(uint64_t(group)), dig);
  return dig;
}

}  // namespace

bool matmul_warp(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, DevicePool& pool,
                 cudaStream_t s) {
  MF_ASSERT(ws.size() == ys.size() && T >= 1 && !ws.empty());
  // Every launch of the weights below takes the same slices, so they are chosen once.
  int64_t total = 0;
  for (const DW& w : ws) total += (w.rows + 15) / 16;
  const DW& lead = ws[0];
  for (const DW& w : ws)
    if (w.cols != lead.cols || w.group != lead.group) return false;
  const int64_t ng = lead.cols / lead.group;
  for (const DW& w : ws)
    if (reinterpret_cast<uintptr_t>(w.scales) % 4 || reinterpret_cast<uintptr_t>(w.biases) % 4) return false;
  const Slices sl = slices(total, int(ng));
  if (!slices_fit(sl, lead.group, ng)) return false;
  int fit = kVecRows;
  while (fit > 0 && warp_smem_bytes(fit, lead.cols, lead.group, sl.ngw_max) > kSmemMax) --fit;
  if (fit == 0) return false;
  Scratch sc(pool);
  const uint8_t* dig = digits(x, T, lead.cols, lead.group, sc, s);
  const int rwb = kWarps >> sl.ks_shift;
  for (int64_t t0 = 0; t0 < T; t0 += fit) {
    const int n = int(std::min<int64_t>(fit, T - t0));
    for (size_t i = 0; i < ws.size(); i += kMaxTc) {
      TcDense d{};
      const int m = int(std::min<size_t>(kMaxTc, ws.size() - i));
      d.first[0] = 0;
      for (int j = 0; j < m; ++j) {
        const DW& w = ws[i + size_t(j)];
        d.w[j] = w, d.y[j] = ys[i + size_t(j)] + t0 * w.rows;
        d.first[j + 1] = d.first[j] + int32_t(((w.rows + 15) / 16 + rwb - 1) / rwb);
      }
      for (int j = m + 1; j <= kMaxTc; ++j) d.first[j] = INT32_MAX;
      const size_t smem = warp_smem_bytes(n, lead.cols, lead.group, sl.ngw_max);
      allow_warp_smem<matvec_warp_kernel>(smem);
      launch_smem("matvec_warp", matvec_warp_kernel, dim3(unsigned(d.first[m])), dim3(kThreads), smem, s, d,
                  dig + size_t(t0) * digit_row_bytes(lead.cols, ng), n, sl.ks_shift, sl.ngw_max);
    }
  }
  return true;
}

bool experts_gate_up_warp(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* x, int32_t k,
                          const PairTiles& pt, float* h, DevicePool& pool, cudaStream_t s) {
  const int n = int(std::min<int64_t>(kTile, pt.pairs / k));
  const int64_t warp_rows = (hidden + 7) / 8;
  const Slices sl = slices(k * warp_rows, int(dim / group));
  const size_t smem = warp_smem_bytes(n, dim, group, sl.ngw_max);
  if (!slices_fit(sl, group, dim / group) || smem > kSmemMax) return false;
  Scratch sc(pool);
  const uint8_t* dig = digits(x, pt.pairs / k, dim, group, sc, s);
  const int rwb = kWarps >> sl.ks_shift;
  allow_warp_smem<gate_up_warp_kernel>(smem);
  launch_smem("experts_gate_up_warp", gate_up_warp_kernel,
              dim3(unsigned((warp_rows + rwb - 1) / rwb), unsigned(pt.tiles_max)), dim3(kThreads), smem, s, table,
              hidden, int(dim), dig, k, pt.sorted, pt.tiles, pt.n_tiles, h, sl.ks_shift, sl.ngw_max);
  return true;
}

bool experts_down_warp(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* h,
                       const PairTiles& pt, int32_t k, float* y, DevicePool& pool, cudaStream_t s) {
  const int n = int(std::min<int64_t>(kTile, pt.pairs / k));
  const int64_t warp_rows = (dim + 15) / 16;
  const Slices sl = slices(k * warp_rows, int(hidden / group));
  const size_t smem = warp_smem_bytes(n, hidden, group, sl.ngw_max);
  if (!slices_fit(sl, group, hidden / group) || smem > kSmemMax) return false;
  Scratch sc(pool);
  const uint8_t* dig = digits(h, pt.pairs, hidden, group, sc, s);
  const int rwb = kWarps >> sl.ks_shift;
  allow_warp_smem<down_warp_kernel>(smem);
  launch_smem("experts_down_warp", down_warp_kernel,
              dim3(unsigned((warp_rows + rwb - 1) / rwb), unsigned(pt.tiles_max)), dim3(kThreads), smem, s, table,
              dim, int(hidden), dig, pt.sorted, pt.tiles, pt.n_tiles, y, sl.ks_shift, sl.ngw_max);
  return true;
}

}  // namespace moeflux::cuda
