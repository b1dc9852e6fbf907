// The inner loop of every matvec: one warp dots a weight row with up to kTile token vectors,
// dequantising each 8 values of the row once for all of them.
#pragma once
#include "backend/cuda/dweight.cuh"
#include "backend/cuda/kernels.cuh"

namespace moeflux::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// acc[t] += this lane's part of row r of w . xs[t] for t < nt (sum acc over the warp for the
// dot). The xs are w.cols floats each.
template <int F>
__device__ __forceinline__ void dot_rows(const DW& w, int64_t r, const float* const (&xs)[kTile], int nt,
                                         float (&acc)[kTile]) {
  const int lane = threadIdx.x & 31;
  const int64_t n8 = w.cols / 8;
  const bool x16 = (w.cols & 3) == 0;  // rows of x 16-byte aligned (their base is)
  for (int64_t c = lane; c < n8; c += 32) {
    float v[8];
    load8<F>(w, r, c * 8, v);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t >= nt) break;
      const float* x = xs[t] + c * 8;
      float xv[8];
      if (x16) {
        const float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) xv[i] = x[i];
      }
      float s = acc[t];
#pragma unroll
      for (int i = 0; i < 8; ++i) s = fmaf(v[i], xv[i], s);
      acc[t] = s;
    }
  }
  if constexpr (F >= kF32 && F <= kBF16) {
    for (int64_t c = n8 * 8 + lane; c < w.cols; c += 32) {
      const float v = load1<F>(w, r, c);
#pragma unroll
      for (int t = 0; t < kTile; ++t)
        if (t < nt) acc[t] = fmaf(v, xs[t][c], acc[t]);
    }
  }
}

// Values per 16 bytes of a row of format F (0: a format read 8 values at a time only).
template <int F>
constexpr int kWide = F == kQ4 ? 32 : F == kQ8 || F == kFP8 ? 16 : F == kBF16 || F == kF16 ? 8 : F == kF32 ? 4 : 0;

// Whether w's rows can be read 16 bytes at a time: 16-byte aligned rows, whole 16-byte chunks,
// each chunk within one scale group (affine) or block (fp8).
inline bool wide_rows(const DW& w, int vals16) {
  if (vals16 == 0 || w.row_bytes % 16 || w.cols % vals16) return false;
  if (w.fmt <= kQ8) return w.group % vals16 == 0;
  if (w.fmt == kFP8) return w.block_cols % vals16 == 0;
  return true;
}
inline bool wide_rows(const DW& w) {
  int v = 0;
  with_fmt(w.fmt, [&](auto f) { v = kWide<decltype(f)::value>; });
  return wide_rows(w, v);
}

// 16 bytes from memory read once (no L1 allocation: the weights stream through).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// The scale (and bias) of chunk c (kWide<F> values) of row r.
template <int F>
__device__ __forceinline__ void chunk_scale(const DW& w, int64_t r, int64_t c, float& s, float& b) {
  constexpr int V = kWide<F>;
  if constexpr (F <= kQ8) {
    const int64_t si = r * w.scale_cols + ((c * V) >> w.group_shift);
    s = load_scale(w.scales, si, w.stype), b = load_scale(w.biases, si, w.stype);
  } else if constexpr (F == kFP8) {
    s = load_scale(w.scales, (r >> w.br_shift) * w.scale_cols + ((c * V) >> w.bc_shift), w.stype), b = 0.0f;
  } else {
    s = 1.0f, b = 0.0f;
  }
}

// The kWide<F> values of one 16-byte chunk.
template <int F>
__device__ __forceinline__ void decode16(uint4 q, float s, float b, float (&v)[kWide<F>]) {
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (F == kQ4) {
#pragma unroll
      for (int i = 0; i < 8; ++i)  // 2^23 + n, exactly, minus 2^23
        v[8 * j + i] = fmaf(__uint_as_float(0x4b000000u | ((u[j] >> (4 * i)) & 15u)) - 8388608.0f, s, b);
    } else if constexpr (F == kQ8) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[4 * j + i] = fmaf(__uint_as_float(0x4b000000u | ((u[j] >> (8 * i)) & 255u)) - 8388608.0f, s, b);
    } else if constexpr (F == kFP8) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[4 * j + i] = e4m3f((u[j] >> (8 * i)) & 0xffu) * s;
    } else if constexpr (F == kBF16) {
      v[2 * j] = __uint_as_float(u[j] << 16), v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
    } else if constexpr (F == kF16) {
      v[2 * j] = f16f(uint16_t(u[j])), v[2 * j + 1] = f16f(uint16_t(u[j] >> 16));
    } else {
      v[j] = __uint_as_float(u[j]);
    }
  }
}

// One chunk of a row (its values v) dotted with the chunk's x values, summed in four
// independent chains: the one sum of every kernel over rows read wide, so that a token gets
// the same bits alone and in a step of several.
template <int V>
__device__ __forceinline__ float chunk_dot(const float (&v)[V], const float (&xv)[V]) {
  float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < V; ++j) p[j % 4] = fmaf(v[j], xv[j], p[j % 4]);
  return (p[0] + p[1]) + (p[2] + p[3]);
}

// The sum of a chunk's x values, in chunk_dot's four chains.
template <int V>
__device__ __forceinline__ float chunk_sum(const float (&xv)[V]) {
  float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < V; ++j) p[j % 4] += xv[j];
  return (p[0] + p[1]) + (p[2] + p[3]);
}

// Whether a chunk's dot reads the chunk's x sum: the affine formats dotted as their codes.
template <int F>
constexpr bool kCodeDot = F == kQ4 || F == kQ8;

// The values a 16-byte chunk of a row is dotted as: affine 4- and 8-bit chunks as their codes
// n, exactly (the affine is applied to the dot, chunk_apply), two instructions a value: a byte
// put under the exponent of 2^23 is the float 2^23 + n, less 2^23 (4-bit: the nibbles split
// into bytes first, n in each byte's low 4 bits). Other formats: the values themselves
// (decode16).
template <int F>
__device__ __forceinline__ void chunk_codes(uint4 q, float s, float b, float (&v)[kWide<F>]) {
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
  if constexpr (F == kQ4) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = u[j] & 0x0f0f0f0fu, hi = (u[j] >> 4) & 0x0f0f0f0fu;
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // byte k of lo / hi into byte 0; bytes 1-3 of 2^23
        v[8 * j + 2 * k] = __uint_as_float(__byte_perm(lo, 0x4b000000u, 0x7650u | k)) - 8388608.0f;
        v[8 * j + 2 * k + 1] = __uint_as_float(__byte_perm(hi, 0x4b000000u, 0x7650u | k)) - 8388608.0f;
      }
    }
  } else if constexpr (F == kQ8) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k)  // byte k into byte 0; bytes 1-3 of 2^23
        v[4 * j + k] = __uint_as_float(__byte_perm(u[j], 0x4b000000u, 0x7650u | k)) - 8388608.0f;
  } else {
    decode16<F>(q, s, b, v);
  }
}

// A chunk's share of a row's dot from d, the chunk_dot of its chunk_codes with x: s d + b sx
// for the affine codes (sx: the sum of the chunk's x), else d.
template <int F>
__device__ __forceinline__ float chunk_apply(float d, float s, float b, float sx) {
  if constexpr (kCodeDot<F>) return fmaf(s, d, b * sx);
  else return d;
}

// Loads the V floats at x (16-byte aligned).
template <int V>
__device__ __forceinline__ void load_x(const float* x, float (&xv)[V]) {
  const float4* xp = reinterpret_cast<const float4*>(x);
#pragma unroll
  for (int j = 0; j < V / 4; ++j) {
    const float4 t = xp[j];
    xv[4 * j] = t.x, xv[4 * j + 1] = t.y, xv[4 * j + 2] = t.z, xv[4 * j + 3] = t.w;
  }
}

// One token: acc[m][i] += this lane's part of row r0 + i of ws[m] . x for i < R (rows past
// the matrices' rows skipped; the M matrices share their shape), rows read wide. Each chunk of
// x is loaded once for the M * R rows; the chunks of two iterations are in flight together;
// each row's dot is summed in four independent chains, chunk after chunk.
template <int F, int R, int M>
__device__ __forceinline__ void dot_rows_x1(const DW (&ws)[M], int64_t r0, const float* x, float (&acc)[M][R]) {
  constexpr int V = kWide<F>;
  const int lane = threadIdx.x & 31;
  const DW& w0 = ws[0];
  const int64_t nc = w0.cols / V;
  for (int64_t c0 = lane; c0 < nc; c0 += 64) {
    const int nu = c0 + 32 < nc ? 2 : 1;
    uint4 q[2][M][R];
    float s[2][M][R], b[2][M][R];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int i = 0; i < R; ++i)
          if (u < nu && r0 + i < w0.rows) {
            const int64_t c = c0 + 32 * u;
            q[u][m][i] = ld_stream(ws[m].data + (r0 + i) * w0.row_bytes + c * 16);
            chunk_scale<F>(ws[m], r0 + i, c, s[u][m][i], b[u][m][i]);
          }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (u >= nu) break;
      float xv[V];
      load_x(x + (c0 + 32 * u) * V, xv);
      const float sx = kCodeDot<F> ? chunk_sum(xv) : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int i = 0; i < R; ++i) {
          if (r0 + i >= w0.rows) break;
          float v[V];
          chunk_codes<F>(q[u][m][i], s[u][m][i], b[u][m][i], v);
          acc[m][i] += chunk_apply<F>(chunk_dot(v, xv), s[u][m][i], b[u][m][i], sx);
        }
    }
  }
}

// Up to kTile tokens over row r read wide: acc[t] += this lane's part of row r . xs[t] for
// t < nt, each token's dot summed as dot_rows_x1 sums one token's (chunk_dot).
template <int F>
__device__ __forceinline__ void dot_row_wide(const DW& w, int64_t r, const float* const (&xs)[kTile], int nt,
                                             float (&acc)[kTile]) {
  constexpr int V = kWide<F>;
  const int lane = threadIdx.x & 31;
  const int64_t nc = w.cols / V;
  for (int64_t c = lane; c < nc; c += 32) {
    const uint4 q = ld_stream(w.data + r * w.row_bytes + c * 16);
    float s, b;
    chunk_scale<F>(w, r, c, s, b);
    float v[V];
    chunk_codes<F>(q, s, b, v);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t >= nt) break;
      float xv[V];
      load_x(xs[t] + c * V, xv);
      acc[t] += chunk_apply<F>(chunk_dot(v, xv), s, b, kCodeDot<F> ? chunk_sum(xv) : 0.0f);
    }
  }
}

// dot_row_wide where w's rows read wide (a format that can), else dot_rows.
template <int F>
__device__ __forceinline__ void dot_row_any(const DW& w, int64_t r, const float* const (&xs)[kTile], int nt,
                                            float (&acc)[kTile]) {
  if constexpr (kWide<F> > 0) {
    if (w.wide) return dot_row_wide<F>(w, r, xs, nt, acc);
  }
  dot_rows<F>(w, r, xs, nt, acc);
}

// Calls fn(std::integral_constant<int, F>{}, std::bool_constant<Wide>{}) for w's format and
// whether its rows read wide.
template <typename Fn>
void with_fmt_wide(int fmt, bool wide, Fn&& fn) {
  with_fmt(fmt, [&](auto f) {
    if (wide && kWide<decltype(f)::value> > 0) fn(f, std::true_type{});
    else fn(f, std::false_type{});
  });
}

}  // namespace moeflux::cuda
