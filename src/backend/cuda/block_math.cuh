// Device helpers shared by several kernels: the exponentials and their sum for a softmax over
// scores in shared memory, and rotate-half RoPE of one vector.
#pragma once
#include <cmath>

#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/kernels.cuh"

namespace moeflux::cuda {

// By the whole block of W warps, after the scores sc[0, n) (shared memory) are written and the
// block has synchronised: sc[i] = exp(sc[i] - max) and the sum of them, in every thread.
// red: W floats of shared memory.
template <int W, typename I>
__device__ float block_exp_sum(float* sc, I n, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  float m = -INFINITY;
  for (I i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, sc[i]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < W; ++w) m = fmaxf(m, red[w]);
  float sum = 0.0f;
  for (I i = threadIdx.x; i < n; i += blockDim.x) sum += (sc[i] = expf(sc[i] - m));
  sum = warp_sum(sum);
  __syncthreads();  // every thread has read red[] for the max
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < W; ++w) sum += red[w];
  return sum;
}

// The parts of split-K softmax attention merged: S rows of `stride` floats (the slice's max at 0,
// its denominator at 1, its unnormalised weighted sum of n floats at `off`) rescaled to their
// common max and normalised; out(d, value) for d < n, by the block's threads. S <= kMaxSplits.
template <typename Out>
__device__ void merge_softmax_parts(const float* pt, int S, int stride, int off, int n, Out out) {
  __shared__ float f[kMaxSplits];
  __shared__ float den_s;
  if (threadIdx.x < 32) {
    float M = -INFINITY;
    for (int s = threadIdx.x; s < S; s += 32) M = fmaxf(M, pt[s * stride]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float den = 0.0f;
    for (int s = threadIdx.x; s < S; s += 32) {
      const float ms = pt[s * stride];
      f[s] = ms == -INFINITY ? 0.0f : expf(ms - M);
      den += f[s] * pt[s * stride + 1];
    }
    den = warp_sum(den);
    if (threadIdx.x == 0) den_s = den;
  }
  __syncthreads();
  const float inv = 1.0f / den_s;
  for (int d = threadIdx.x; d < n; d += blockDim.x) {
    float num = 0.0f;
    for (int s = 0; s < S; ++s)
      if (f[s] != 0.0f) num += pt[s * stride + off + d] * f[s];
    out(d, num * inv);
  }
}

// Rotate-half RoPE of v (the pairs (i, i + rot_dim / 2)) at position pos, by the block's threads.
__device__ inline void rope_rotate_half(float* v, const RopeDev& r, float pos) {
  const int half = r.rot_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float ang = pos * r.inv_freq[i];
    const float c = cosf(ang) * r.attn_factor, s = sinf(ang) * r.attn_factor;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace moeflux::cuda
