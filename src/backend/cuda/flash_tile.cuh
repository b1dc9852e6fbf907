// Attention over tiles of cached positions in shared memory, shared by GQA's and MLA's kernels:
// a block reads kFlashTile positions' key and value rows once for all its query heads; each warp
// keeps the online softmax of HW heads (lane i scores tile row i) and their unnormalised sums of
// value rows (lane l holds dims 4l + 128c, c < CH).
#pragma once
#include <cmath>

#include "backend/cuda/dot_rows.cuh"

namespace moeflux::cuda {

constexpr int kFlashTile = 32;
// The fewest positions a split-K slice of the tiled kernels takes.
constexpr int64_t kFlashSlicePositions = 128;

// A tile row's stride in floats for rows of w floats: whole float4s, an odd number of them (a
// lane per row then reads float4s without bank conflicts).
__host__ __device__ inline int flash_row(int w) {
  int r = (w + 3) / 4 * 4;
  if ((r / 4) % 2 == 0) r += 4;
  return r;
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// sc[j] = row . q_j over w4 float4s (q_j at q + j * qstride), for the warp's lanes' rows.
template <int HW>
__device__ __forceinline__ void flash_scores(float (&sc)[HW], const float* row, const float* q, int qstride, int w4) {
#pragma unroll
  for (int j = 0; j < HW; ++j) sc[j] = 0.0f;
  for (int k = 0; k < w4; ++k) {
    const float4 x = ld4(row + 4 * k);
#pragma unroll
    for (int j = 0; j < HW; ++j) {
      const float4 y = ld4(q + j * qstride + 4 * k);
      sc[j] = fmaf(y.x, x.x, fmaf(y.y, x.y, fmaf(y.z, x.z, fmaf(y.w, x.w, sc[j]))));
    }
  }
}

template <int HW, int CH>
struct FlashAcc {
  float m[HW], l[HW];
  float4 acc[HW][CH];

  __device__ FlashAcc() {
#pragma unroll
    for (int j = 0; j < HW; ++j) {
      m[j] = -INFINITY, l[j] = 0.0f;
#pragma unroll
      for (int c = 0; c < CH; ++c) acc[j][c] = make_float4(0, 0, 0, 0);
    }
  }

  // Lane i's scores sc[j] of tile row i (rows < np count; -INFINITY: a row masked for head j)
  // into the softmax, and the value rows (vt, stride vstride, n dims) weighted into the sums. A
  // head with no row yet (every one masked) stays as it was.
  __device__ __forceinline__ void add(const float (&sc)[HW], int np, const float* vt, int vstride, int n) {
    const int lane = threadIdx.x & 31;
    float e[HW];
#pragma unroll
    for (int j = 0; j < HW; ++j) {
      float tm = lane < np ? sc[j] : -INFINITY;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, o));
      const float mn = fmaxf(m[j], tm), corr = mn == -INFINITY ? 1.0f : expf(m[j] - mn);
      e[j] = lane < np && mn != -INFINITY ? expf(sc[j] - mn) : 0.0f;
      l[j] = l[j] * corr + warp_sum(e[j]);
      m[j] = mn;
#pragma unroll
      for (int c = 0; c < CH; ++c) acc[j][c].x *= corr, acc[j][c].y *= corr, acc[j][c].z *= corr, acc[j][c].w *= corr;
    }
    for (int r = 0; r < np; ++r) {
      float w[HW];
#pragma unroll
      for (int j = 0; j < HW; ++j) w[j] = __shfl_sync(0xffffffffu, e[j], r);
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int d = 4 * lane + 128 * c;
        if (d < n) {
          const float4 x = ld4(vt + r * vstride + d);
#pragma unroll
          for (int j = 0; j < HW; ++j) {
            acc[j][c].x = fmaf(w[j], x.x, acc[j][c].x), acc[j][c].y = fmaf(w[j], x.y, acc[j][c].y);
            acc[j][c].z = fmaf(w[j], x.z, acc[j][c].z), acc[j][c].w = fmaf(w[j], x.w, acc[j][c].w);
          }
        }
      }
    }
  }

  // Head j's result over n dims: normalised through out(d, float4) (one slice), or its slice's
  // max and denominator at part[0, 1] and unnormalised sum at part + 4 (split-K).
  template <typename Out>
  __device__ __forceinline__ void store(int j, int n, bool split, float* part, Out out) const {
    const int lane = threadIdx.x & 31;
    if (split && lane == 0) part[0] = m[j], part[1] = l[j];
    const float inv = split ? 1.0f : 1.0f / l[j];
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int d = 4 * lane + 128 * c;
      const float4 v = make_float4(acc[j][c].x * inv, acc[j][c].y * inv, acc[j][c].z * inv, acc[j][c].w * inv);
      if (d >= n) continue;
      if (split) *reinterpret_cast<float4*>(part + 4 + d) = v;
      else out(d, v);
    }
  }
};

// A slice [p0, p1) of positions [first, end): the z-th of S equal slices.
struct Slice {
  int64_t p0, p1;
};
__device__ __forceinline__ Slice flash_slice(int64_t first, int64_t end, int64_t z, int64_t S) {
  const int64_t per = (end - first + S - 1) / S, p0 = first + z * per;
  return Slice{p0, p0 + per < end ? p0 + per : end};
}

}  // namespace moeflux::cuda
