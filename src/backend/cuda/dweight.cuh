// A weight as the kernels see it (DW: device pointers, shapes, the format as a code) and the
// device-side dequantisation of 8 consecutive values of a row (load8) or one value (load1),
// one specialisation per format code. Every format reads the bytes a pack stores (file order);
// the 8 values of a load8 share one scale: affine groups and fp8 blocks are multiples of 8 wide.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace moeflux::cuda {

// Format codes: affine by bit width, dense by element type, fp8 block.
enum Fmt : int { kQ2, kQ3, kQ4, kQ5, kQ6, kQ8, kF32, kF16, kBF16, kFP8, kNoFmt };
// Scale element types.
enum SType : uint8_t { kSF32, kSF16, kSBF16 };

struct DW {
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;  // affine: (rows, cols / group); fp8: block scales
  const uint8_t* biases = nullptr;  // affine
  int64_t rows = 0, cols = 0, row_bytes = 0;
  int32_t group = 0;                // affine group size
  int32_t block_rows = 0, block_cols = 0;
  // log2 of group (affine) and of block_cols / block_rows (fp8): all powers of two (cuda_fmt),
  // so that the kernels shift instead of dividing.
  int8_t group_shift = 0, bc_shift = 0, br_shift = 0;
  int32_t scale_cols = 0;           // scales per row (affine) / per block row (fp8)
  int32_t fmt = kNoFmt;
  uint8_t stype = kSBF16;
  bool wide = false;  // rows read 16 bytes at a time (wide_rows, dot_rows.cuh)
};

__device__ __forceinline__ float bf16f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ float load_scale(const uint8_t* p, int64_t i, uint8_t t) {
  if (t == kSF32) return reinterpret_cast<const float*>(p)[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(p)[i];
  return t == kSBF16 ? bf16f(h) : f16f(h);
}

// F8_E4M3 (fn: no infinities; S.1111.111 is NaN), exactly.
__device__ __forceinline__ float e4m3f(uint32_t v) {
  const uint32_t s = v & 0x80u, e = (v >> 3) & 0xfu, m = v & 7u;
  float f;
  if (e == 0) f = float(m) * 0.001953125f;  // m * 2^-9
  else if (e == 15 && m == 7) f = __int_as_float(0x7fc00000);
  else f = __uint_as_float(((e + 120u) << 23) | (m << 20));
  return s ? -f : f;
}

template <int F>
struct Bits {
  static constexpr int value = F == kQ2 ? 2 : F == kQ3 ? 3 : F == kQ4 ? 4 : F == kQ5 ? 5 : F == kQ6 ? 6 : 8;
};

template <int F>
__device__ __forceinline__ void load8(const DW& w, int64_t r, int64_t c0, float v[8]) {
  const uint8_t* row = w.data + r * w.row_bytes;
  if constexpr (F <= kQ8) {
    constexpr int B = Bits<F>::value;
    const int64_t si = r * w.scale_cols + (c0 >> w.group_shift);
    const float s = load_scale(w.scales, si, w.stype), b = load_scale(w.biases, si, w.stype);
    const uint8_t* p = row + (c0 / 8) * B;  // 8 values take B bytes
    uint64_t q;
    if constexpr (B == 4) q = *reinterpret_cast<const uint32_t*>(p);
    else if constexpr (B == 8) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      q = uint64_t(u.x) | (uint64_t(u.y) << 32);
    } else if constexpr (B == 2) q = *reinterpret_cast<const uint16_t*>(p);
    else {
      q = 0;
#pragma unroll
      for (int i = 0; i < B; ++i) q |= uint64_t(p[i]) << (8 * i);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = float(uint32_t(q >> (B * i)) & ((1u << B) - 1)) * s + b;
  } else if constexpr (F == kFP8) {
    const float s = load_scale(w.scales, (r >> w.br_shift) * w.scale_cols + (c0 >> w.bc_shift), w.stype);
    const uint2 u = *reinterpret_cast<const uint2*>(row + c0);  // rows are a multiple of 8 bytes
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = e4m3f((u.x >> (8 * i)) & 0xffu) * s, v[4 + i] = e4m3f((u.y >> (8 * i)) & 0xffu) * s;
  } else if constexpr (F == kF32) {
    const float* p = reinterpret_cast<const float*>(row) + c0;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = p[i];
  } else {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + c0;
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      const uint32_t h[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = F == kBF16 ? bf16f(uint16_t(h[i])) : f16f(uint16_t(h[i]));
        v[2 * i + 1] = F == kBF16 ? bf16f(uint16_t(h[i] >> 16)) : f16f(uint16_t(h[i] >> 16));
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = F == kBF16 ? bf16f(p[i]) : f16f(p[i]);
    }
  }
}

// One value (the columns past the last multiple of 8: dense weights only).
template <int F>
__device__ __forceinline__ float load1(const DW& w, int64_t r, int64_t c) {
  if constexpr (F <= kFP8) {
    float v[8];
    load8<F>(w, r, c & ~int64_t(7), v);
    float out = v[0];
#pragma unroll
    for (int i = 1; i < 8; ++i)
      if ((c & 7) == i) out = v[i];
    return out;
  } else {
    const uint8_t* row = w.data + r * w.row_bytes;
    if constexpr (F == kF32) return reinterpret_cast<const float*>(row)[c];
    const uint16_t h = reinterpret_cast<const uint16_t*>(row)[c];
    return F == kBF16 ? bf16f(h) : f16f(h);
  }
}

// Calls fn(std::integral_constant<int, F>{}) for w's format code (host side).
template <typename Fn>
void with_fmt(int fmt, Fn&& fn) {
  switch (fmt) {
    case kQ2: return fn(std::integral_constant<int, kQ2>{});
    case kQ3: return fn(std::integral_constant<int, kQ3>{});
    case kQ4: return fn(std::integral_constant<int, kQ4>{});
    case kQ5: return fn(std::integral_constant<int, kQ5>{});
    case kQ6: return fn(std::integral_constant<int, kQ6>{});
    case kQ8: return fn(std::integral_constant<int, kQ8>{});
    case kF32: return fn(std::integral_constant<int, kF32>{});
    case kF16: return fn(std::integral_constant<int, kF16>{});
    case kBF16: return fn(std::integral_constant<int, kBF16>{});
    case kFP8: return fn(std::integral_constant<int, kFP8>{});
    default: break;
  }
}

}  // namespace moeflux::cuda
