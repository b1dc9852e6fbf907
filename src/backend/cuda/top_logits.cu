// The n largest logits of each row, in logit_order_key's order (backend/backend.h), in two
// launches: a block per chunk of kChunk logits keeps its n largest, then a block per row
// selects the row's n from its chunks' and sorts them. Both select by the exact n-th largest
// 64-bit key (value, then the lower id: every key is unique), a byte at a time from the top.
#include <cuda_runtime.h>

#include "backend/cuda/check.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/launch.cuh"
#include "core/error.h"

namespace moeflux::cuda {

namespace {

constexpr int kChunkThreads = 256, kChunkItems = 16, kChunk = kChunkThreads * kChunkItems;
constexpr int kMergeThreads = 1024;

// logit_order_key on the device: -0 as +0, NaN below every number.
__device__ __forceinline__ uint64_t order_key(float v, uint32_t id) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) == 0) u = 0;
  const uint32_t k = (u & 0x7fffffffu) > 0x7f800000u ? 0u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return uint64_t(k) << 32 | (0xffffffffu - id);
}

__device__ __forceinline__ uint32_t key_id(uint64_t key) { return 0xffffffffu - uint32_t(key); }

// The need-th largest of keys[0, m) (unique keys, 1 <= need <= m), by every thread of the
// block: histograms of one byte a pass over the keys that agree with the bytes chosen so far.
template <int Threads>
__device__ uint64_t select_nth(const uint64_t* keys, int m, int need) {
  __shared__ unsigned hist[256];
  __shared__ uint64_t prefix_s;
  __shared__ int need_s;
  uint64_t prefix = 0, mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += Threads) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < m; i += Threads)
      if ((keys[i] & mask) == prefix) atomicAdd(&hist[(keys[i] >> shift) & 255], 1u);
    __syncthreads();
    if (threadIdx.x < 32) {  // the byte whose keys hold the need-th largest: a suffix sum
      const int lane = threadIdx.x;
      unsigned own = 0;  // bins 255 - 8 lane .. 248 - 8 lane, from the top
      for (int j = 0; j < 8; ++j) own += hist[255 - 8 * lane - j];
      unsigned above = own;  // inclusive prefix over lanes: the keys of this lane's bins and above
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned t = __shfl_up_sync(0xffffffffu, above, o);
        if (lane >= o) above += t;
      }
      const unsigned before = above - own;
      const bool here = before < unsigned(need) && above >= unsigned(need);
      if (here) {
        unsigned c = before;
        for (int j = 0; j < 8; ++j) {
          const int b = 255 - 8 * lane - j;
          if (c + hist[b] >= unsigned(need)) {
            prefix_s = prefix | uint64_t(b) << shift;
            need_s = need - int(c);
            break;
          }
          c += hist[b];
        }
      }
    }
    __syncthreads();
    prefix = prefix_s, need = need_s, mask |= uint64_t(255) << shift;
    __syncthreads();
  }
  return prefix;
}

// Block (c, r): the min(n, its count) largest of row r's logits [c kChunk, (c + 1) kChunk)
// into cand[(r chunks + c) n ..] (any order).
__global__ void __launch_bounds__(kChunkThreads)
    top_chunk_kernel(const float* logits, int64_t V, int n, uint64_t* cand) {
  __shared__ uint64_t keys[kChunk];
  __shared__ unsigned taken;
  await_previous();
  const int64_t r = blockIdx.y, c0 = int64_t(blockIdx.x) * kChunk;
  const int m = int(min(int64_t(kChunk), V - c0)), need = min(n, m);
  const float* row = logits + r * V + c0;
  for (int i = threadIdx.x; i < m; i += kChunkThreads) keys[i] = order_key(row[i], uint32_t(c0 + i));
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  const uint64_t nth = select_nth<kChunkThreads>(keys, m, need);
  uint64_t* out = cand + (r * gridDim.x + blockIdx.x) * n;
  for (int i = threadIdx.x; i < m; i += kChunkThreads)
    if (keys[i] >= nth) out[atomicAdd(&taken, 1u)] = keys[i];
}

// Block r: row r's n largest of its chunks' candidates, sorted (bitonic, in shared memory),
// into vals and ids (r n ..).
__global__ void __launch_bounds__(kMergeThreads)
    top_merge_kernel(const float* logits, int64_t V, int n, int chunks, const uint64_t* cand, float* vals,
                     int32_t* ids) {
  __shared__ uint64_t best[kTopMax];
  __shared__ unsigned taken;
  await_previous();
  const int64_t r = blockIdx.x;
  const uint64_t* rc = cand + r * chunks * int64_t(n);
  // chunk c holds min(n, its logits) keys at c n: only the last may hold fewer than n
  const int last = int(min(int64_t(n), V - int64_t(chunks - 1) * kChunk));
  const int m = (chunks - 1) * n + last;
  int p = 1;
  while (p < n) p <<= 1;
  for (int i = threadIdx.x; i < p; i += kMergeThreads) best[i] = 0;
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  const uint64_t nth = select_nth<kMergeThreads>(rc, m, n);
  for (int i = threadIdx.x; i < m; i += kMergeThreads)
    if (rc[i] >= nth) best[atomicAdd(&taken, 1u)] = rc[i];
  __syncthreads();
  for (int k = 2; k <= p; k <<= 1)  // descending
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < p; i += kMergeThreads) {
        const int l = i ^ j;
        if (l > i) {
          const uint64_t a = best[i], b = best[l];
          if (((i & k) == 0) == (a < b)) best[i] = b, best[l] = a;
        }
      }
      __syncthreads();
    }
  for (int i = threadIdx.x; i < n; i += kMergeThreads) {
    const uint32_t id = key_id(best[i]);
    ids[r * n + i] = int32_t(id);
    vals[r * n + i] = logits[r * V + id];
  }
}

__global__ void gather_kernel(const float* row, const int32_t* ids, int64_t n, float* out) {
  await_previous();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = row[ids[i]];
}

}  // namespace

int64_t top_logits_scratch(int64_t rows, int64_t V, int64_t n) { return rows * ((V + kChunk - 1) / kChunk) * n; }

void top_logits(const float* logits, int64_t rows, int64_t V, int64_t n, uint64_t* scratch, float* vals, int32_t* ids,
                cudaStream_t s) {
  MF_ASSERT(n >= 1 && n <= kTopMax && n <= V && rows >= 1 && V < (int64_t(1) << 31));
  const int chunks = int((V + kChunk - 1) / kChunk);
  launch("top_chunk", top_chunk_kernel, dim3(unsigned(chunks), unsigned(rows)), dim3(kChunkThreads), s, logits, V,
         int(n), scratch);
  launch("top_merge", top_merge_kernel, dim3(unsigned(rows)), dim3(kMergeThreads), s, logits, V, int(n), chunks,
         static_cast<const uint64_t*>(scratch), vals, ids);
}

void gather_logits(const float* row, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
  launch("gather_logits", gather_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), s, row, ids, n, out);
}

}  // namespace moeflux::cuda
