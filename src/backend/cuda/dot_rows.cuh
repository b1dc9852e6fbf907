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

}  // namespace moeflux::cuda
