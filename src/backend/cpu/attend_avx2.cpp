// AVX2 attention of one kv head's query heads over the cache (Kernels::attend of the Avx2
// level), for decode and prefill alike, where head_dim and v_dim are multiples of 8 (others: the
// caller's dot / softmax / axpy loop). Scores eight positions at a time per head (each K row
// from memory once, then from L1 for the other heads), a vector softmax (exp8: within ~2 ulps
// of expf), and the weighted sum of V rows per 8-column slice with eight heads' accumulators
// in registers (each V row read from memory once). Per head, a dot is one accumulator over the
// columns in order, its 8 lanes summed as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)) wherever the
// position falls, and the V sum runs over the positions in order, so a head's result depends
// neither on the heads that share the call nor on the context length. Before it, this level
// made one call of dot and one of axpy per head and position: 14.7 ms a layer at 4096
// positions on one Zen 3 thread (bench_ops Attention/ctx:4096). Tested against attention_ref
// in tests/ops/test_ops_cpu.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "backend/cpu/exp_poly.h"
#include "backend/cpu/kernels.h"

#include "backend/cpu/kernels_begin.h"
#pragma GCC target("avx2,fma,f16c")

namespace moeflux::cpu {
namespace {

constexpr int L = 8;
#include "backend/cpu/avx2_util.h"

// Lane i of the result: the sum of a[i]'s 8 lanes, ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).
inline __m256 sum8x8(const __m256 a[8]) {
  const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  // h0 lanes: a0..a3's (0+1)+(2+3) sums, then their (4+5)+(6+7) sums; h1 the same for a4..a7
  return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
}

// p[j * n + t + i] = (q_j . k_{t+i}) * scale for the positions t + i < n (i < 8) and every head j:
// slots past n repeat the last row and are not stored.
void scores8(const float* q, int64_t nh, const float* k, int64_t ks, int64_t t, int64_t n, int64_t hd, float scale,
             float* p) {
  const float* kr[L];
  for (int i = 0; i < L; ++i) kr[i] = k + std::min(t + i, n - 1) * ks;
  // The rows two blocks on (the strided rows defeat the hardware prefetchers' lead).
  for (int64_t i = t + 2 * L; i < std::min(t + 3 * L, n); ++i)
    for (int64_t c = 0; c < hd; c += 16) _mm_prefetch(reinterpret_cast<const char*>(k + i * ks + c), _MM_HINT_T0);
  for (int64_t j = 0; j < nh; ++j) {
    const float* qj = q + j * hd;
    __m256 acc[L];
#pragma GCC unroll 8
    for (int i = 0; i < L; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; c += L) {
      const __m256 qv = _mm256_loadu_ps(qj + c);
#pragma GCC unroll 8
      for (int i = 0; i < L; ++i) acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr[i] + c), acc[i]);
    }
    storen(p + j * n + t, _mm256_mul_ps(sum8x8(acc), _mm256_set1_ps(scale)), n - t);
  }
}

// x = softmax(x): max, e^(x - max), sum, divide (a tail's missing lanes count for nothing).
void softmax(float* x, int64_t n) {
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += L) mv = _mm256_max_ps(mv, _mm256_blendv_ps(mv, loadn(x + i, n - i), _mm256_castsi256_ps(tail_mask(n - i))));
  alignas(32) float lanes[L];
  _mm256_store_ps(lanes, mv);
  const __m256 mx = _mm256_set1_ps(*std::max_element(lanes, lanes + L));
  __m256 sv = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += L) {
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(loadn(x + i, n - i), mx)), _mm256_castsi256_ps(tail_mask(n - i)));
    storen(x + i, e, n - i);
    sv = _mm256_add_ps(sv, e);
  }
  _mm256_store_ps(lanes, sv);
  float s = 0.0f;
  for (float e : lanes) s += e;
  const __m256 sd = _mm256_set1_ps(s);
  for (int64_t i = 0; i < n; i += L) storen(x + i, _mm256_div_ps(loadn(x + i, n - i), sd), n - i);
}

// Columns [c, c + 8) of out_j += sum over t in [t0, t1) of p[j * n + t] v_t for JH heads j0..
// at once (out_j zero before t0 = 0).
template <int JH>
void weighted_v(const float* p, int64_t j0, const float* v, int64_t vs, int64_t n, int64_t t0, int64_t t1, int64_t c,
                int64_t vd, float* out) {
  __m256 acc[JH];
#pragma GCC unroll 8
  for (int h = 0; h < JH; ++h) acc[h] = t0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + (j0 + h) * vd + c);
  const float* pj = p + j0 * n;
  for (int64_t t = t0; t < t1; ++t) {
    const __m256 vv = _mm256_loadu_ps(v + t * vs + c);
#pragma GCC unroll 8
    for (int h = 0; h < JH; ++h) acc[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(pj + h * n + t), vv, acc[h]);
  }
#pragma GCC unroll 8
  for (int h = 0; h < JH; ++h) _mm256_storeu_ps(out + (j0 + h) * vd + c, acc[h]);
}

// Positions per block of the V sum: the block's rows stay in L1 across the column slices.
constexpr int64_t kVBlock = 32;

}  // namespace

bool attend_avx2(const float* q, int64_t nh, const float* k, const float* v, int64_t n_ctx, int64_t kstride,
                 int64_t vstride, int64_t head_dim, int64_t v_dim, float scale, float* p, float* out) {
  if (head_dim <= 0 || head_dim % L || v_dim <= 0 || v_dim % L || n_ctx <= 0) return false;
  for (int64_t t = 0; t < n_ctx; t += L) scores8(q, nh, k, kstride, t, n_ctx, head_dim, scale, p);
  for (int64_t j = 0; j < nh; ++j) softmax(p + j * n_ctx, n_ctx);
  for (int64_t t0 = 0; t0 < n_ctx; t0 += kVBlock) {
    const int64_t t1 = std::min(n_ctx, t0 + kVBlock);
    for (int64_t t = t0 + kVBlock; t < std::min(n_ctx, t1 + kVBlock); ++t)  // the next block's rows
      for (int64_t c = 0; c < v_dim; c += 16) _mm_prefetch(reinterpret_cast<const char*>(v + t * vstride + c), _MM_HINT_T0);
    for (int64_t c = 0; c < v_dim; c += L) {
      int64_t j = 0;
      for (; j + 8 <= nh; j += 8) weighted_v<8>(p, j, v, vstride, n_ctx, t0, t1, c, v_dim, out);
      for (; j + 4 <= nh; j += 4) weighted_v<4>(p, j, v, vstride, n_ctx, t0, t1, c, v_dim, out);
      for (; j < nh; ++j) weighted_v<1>(p, j, v, vstride, n_ctx, t0, t1, c, v_dim, out);
    }
  }
  return true;
}

}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
