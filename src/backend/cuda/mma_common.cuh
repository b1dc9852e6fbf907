// Tensor-core building blocks of mma_rows.cu and mma_vec.cu: x's split into f16 hi + lo (the
// same bits wherever it is done), the weight views a block reads, cp.async, the m16n8k16 MMA and
// the conversion of 4-bit codes to exact f16.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dweight.cuh"

namespace moeflux::cuda {

// split_rows's rules, shared by every kernel that splits x (the same bits wherever it is done):
// the exponent e of a row whose largest magnitude is m (0 for a row of zeros or with a value
// not finite; |e| <= 126), which puts m in [2^13, 2^14); 2^e as a float; and the store of v =
// x * 2^e at columns 8 q .. 8 q + 7 (one thread's) as hi and lo (positions 0 4 1 5 2 6 3 7) and
// of each 32 columns' sum, into a row of `cols` halves and cols / 32 sums. A 32 columns' sum is
// summed by the 4 lanes 4k .. 4k + 3 holding them (q % 4 = lane % 4): each its 8 in pairs, then
// across the 4; every lane of the warp calls split_store8, `ok` false for a lane past the row.
__device__ __forceinline__ int split_exponent(float m, bool finite) {
  if (!finite || !(m > 0.0f)) return 0;
  int me = 0;
  frexpf(m, &me);  // m < 2^me
  return max(-126, min(126, 14 - me));
}
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }
// Interleaved: hi and lo in one row of 2 cols halves, each 32-bit word of hi followed by the
// same word of lo (lo unused).
template <bool Interleaved = false>
__device__ __forceinline__ void split_store8(const float (&v)[8], int64_t q, bool ok, __half* hi, __half* lo,
                                             float* sums) {
  uint4 h, l;
  uint32_t* hw = &h.x;
  uint32_t* lw = &l.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half a = __float2half_rn(v[i]), b = __float2half_rn(v[i + 4]);
    const __half la = __float2half_rn(v[i] - __half2float(a)), lb = __float2half_rn(v[i + 4] - __half2float(b));
    hw[i] = uint32_t(__half_as_ushort(a)) | uint32_t(__half_as_ushort(b)) << 16;
    lw[i] = uint32_t(__half_as_ushort(la)) | uint32_t(__half_as_ushort(lb)) << 16;
  }
  float s = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  if (!ok) return;
  if constexpr (Interleaved) {
    *reinterpret_cast<uint4*>(hi + 16 * q) = make_uint4(h.x, l.x, h.y, l.y);
    *reinterpret_cast<uint4*>(hi + 16 * q + 8) = make_uint4(h.z, l.z, h.w, l.w);
  } else {
    *reinterpret_cast<uint4*>(hi + 8 * q) = h;
    *reinterpret_cast<uint4*>(lo + 8 * q) = l;
  }
  if (q % 4 == 0) sums[q / 4] = s;
}
// Columns 8 q .. 8 q + 7 of a row (16-byte aligned) times `scale` (zeros where !ok).
__device__ __forceinline__ void load8(const float* row, int64_t q, bool ok, float scale, float (&v)[8]) {
  float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
  if (ok) a = reinterpret_cast<const float4*>(row)[2 * q], b = reinterpret_cast<const float4*>(row)[2 * q + 1];
  v[0] = a.x * scale, v[1] = a.y * scale, v[2] = a.z * scale, v[3] = a.w * scale;
  v[4] = b.x * scale, v[5] = b.y * scale, v[6] = b.z * scale, v[7] = b.w * scale;
}
// The largest magnitude of v into m; finite false where one is not.
__device__ __forceinline__ void max8(const float (&v)[8], float& m, bool& finite) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (isfinite(v[i])) m = fmaxf(m, fabsf(v[i]));
    else finite = false;
  }
}

// What the tile reads of a weight (DW's fields, held in registers).
struct TcView {
  const uint8_t* data;
  const uint8_t* scales;
  const uint8_t* biases;
  int64_t rows, row_bytes;
  int32_t scale_cols;
  int8_t group_shift;
  uint8_t stype;
};
__device__ __forceinline__ TcView tc_view(const DW& w) {
  return TcView{w.data, w.scales, w.biases, w.rows, w.row_bytes, w.scale_cols, w.group_shift, w.stype};
}

// Up to kMaxTc weights sharing x in one launch: block x runs weight i where first[i] <= x <
// first[i + 1].
constexpr int kMaxTc = 4;
struct TcDense {
  DW w[kMaxTc];
  float* y[kMaxTc];
  int32_t first[kMaxTc + 1];
};
// This block's weight of d (its view, output and first block), selected without indexing the
// parameters at run time (which would put them in local memory).
__device__ __forceinline__ void tc_weight(const TcDense& d, TcView& w, float*& y, int32_t& first) {
  w = tc_view(d.w[0]), y = d.y[0], first = 0;
#pragma unroll
  for (int i = 1; i < kMaxTc; ++i)
    if (int32_t(blockIdx.x) >= d.first[i]) w = tc_view(d.w[i]), y = d.y[i], first = d.first[i];
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// dst: a shared-memory address (smem_addr) or a generic pointer to shared memory.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) { cp_async16(smem_addr(dst), src); }
__device__ __forceinline__ void cp_async4(void* dst, const void* src) { cp_async4(smem_addr(dst), src); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// d += a b: a 16x16 (row), b 16x8 (col), f16; d 16x8 f32.
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d = a b: the first MMA of a sum (its accumulator zero, not read).
__device__ __forceinline__ void mma16816_first(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// Two codes as f16 (exact): v holds 0x64000000 | a << 16 | 0x6400 | b, i.e. 1024 + a and
// 1024 + b, less 1024 each.
__device__ __forceinline__ uint32_t codes_f16x2(uint32_t v) {
  uint32_t r;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(v), "r"(0x64006400u));
  return r;
}

// (a & mask) | ex in one instruction.
template <uint32_t Mask, uint32_t Ex>
__device__ __forceinline__ uint32_t and_or(uint32_t a) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "n"(Mask), "n"(Ex));
  return r;
}

// Two codes as f16 (exact) from 0x64006400 | a << 20 | b << 4, i.e. 1024 + 16 a and 1024 + 16 b:
// times 1/16, less 64.
__device__ __forceinline__ uint32_t codes16_f16x2(uint32_t v) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x2c002c00u), "r"(0xd400d400u));
  return r;
}

// The 8 4-bit codes of q (code i at bits 4i) as four f16 pairs: pair p holds codes p and p + 4,
// x's stored order (XSplit). The odd codes are taken in place (16 times their value) and scaled.
__device__ __forceinline__ void q4_codes(uint32_t q, uint32_t (&b)[4]) {
  const uint32_t h = q >> 8;
  b[0] = codes_f16x2(and_or<0x000f000fu, 0x64006400u>(q));
  b[1] = codes16_f16x2(and_or<0x00f000f0u, 0x64006400u>(q));
  b[2] = codes_f16x2(and_or<0x000f000fu, 0x64006400u>(h));
  b[3] = codes16_f16x2(and_or<0x00f000f0u, 0x64006400u>(h));
}

}  // namespace moeflux::cuda
