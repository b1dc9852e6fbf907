// AVX-512 attention of one kv head's query heads over the cache (Kernels::attend), for decode
// and prefill alike: scores four positions at a time (each K row loaded once for all heads),
// a vector softmax (exp16: within ~2 ulps of expf), and the weighted sum of V rows with the
// output heads held in registers. Per head, each dot is one accumulator over the columns in
// order and the V sum runs over the positions in order, so a head's result does not depend on
// which heads share the call. Tested against attention_ref in tests/ops/test_ops_cpu.cpp;
// benchmarked by bench_ops (Attention/ctx:N).
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "backend/cpu/exp_poly.h"
#include "backend/cpu/kernels.h"

#include "backend/cpu/kernels_begin.h"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace moeflux::cpu {
namespace {

constexpr int L = 16;
#include "backend/cpu/avx512_util.h"

// p[j * n + t + i] = (q_j . k_{t+i}) * scale for the R positions t.. and every head j.
template <int R>
void scores(const float* q, int64_t nh, const float* k, int64_t ks, int64_t t, int64_t n, int64_t hd, float scale,
            float* p) {
  const float* kr[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) kr[i] = k + (t + i) * ks;
  for (int64_t j = 0; j < nh; ++j) {
    const float* qj = q + j * hd;
    __m512 acc[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < hd; c += L) {
      const __mmask16 m = tail_mask(hd - c);
      const __m512 qv = _mm512_maskz_loadu_ps(m, qj + c);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) acc[i] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kr[i] + c), acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) p[j * n + t + i] = _mm512_reduce_add_ps(acc[i]) * scale;
  }
}

// x = softmax(x): max, e^(x - max), sum, divide.
void softmax(float* x, int64_t n) {
  __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += L) mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(mv, tail_mask(n - i), x + i));
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 sv = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx)));
    _mm512_mask_storeu_ps(x + i, m, e);
    sv = _mm512_add_ps(sv, e);
  }
  const __m512 s = _mm512_set1_ps(_mm512_reduce_add_ps(sv));
  for (int64_t i = 0; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), s));
  }
}

// out_j = sum_t p[j * n + t] v_t for JH heads j0.. at once, NV vectors of v_dim (masked past it).
template <int NV, int JH>
void weighted_v(const float* p, int64_t j0, const float* v, int64_t vs, int64_t n, int64_t vd, float* out) {
  __mmask16 m[NV];
  __m512 acc[JH][NV];
#pragma GCC unroll 16
  for (int c = 0; c < NV; ++c) {
    m[c] = vd - c * L <= 0 ? __mmask16(0) : tail_mask(vd - c * L);
#pragma GCC unroll 2
    for (int h = 0; h < JH; ++h) acc[h][c] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* vr = v + t * vs;
    __m512 pv[JH];
#pragma GCC unroll 2
    for (int h = 0; h < JH; ++h) pv[h] = _mm512_set1_ps(p[(j0 + h) * n + t]);
#pragma GCC unroll 16
    for (int c = 0; c < NV; ++c) {
      const __m512 vv = _mm512_maskz_loadu_ps(m[c], vr + c * L);
#pragma GCC unroll 2
      for (int h = 0; h < JH; ++h) acc[h][c] = _mm512_fmadd_ps(pv[h], vv, acc[h][c]);
    }
  }
#pragma GCC unroll 2
  for (int h = 0; h < JH; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < NV; ++c) _mm512_mask_storeu_ps(out + (j0 + h) * vd + c * L, m[c], acc[h][c]);
}

// All nh heads through weighted_v: two at a time while their accumulators fit in registers.
template <int NV>
void weighted_v_heads(const float* p, int64_t nh, const float* v, int64_t vs, int64_t n, int64_t vd, float* out) {
  constexpr int JH = NV <= 8 ? 2 : 1;
  int64_t j = 0;
  for (; j + JH <= nh; j += JH) weighted_v<NV, JH>(p, j, v, vs, n, vd, out);
  for (; j < nh; ++j) weighted_v<NV, 1>(p, j, v, vs, n, vd, out);
}

}  // namespace

bool attend_avx512(const float* q, int64_t nh, const float* k, const float* v, int64_t n_ctx, int64_t kstride,
                   int64_t vstride, int64_t head_dim, int64_t v_dim, float scale, float* p, float* out) {
  if (v_dim <= 0 || v_dim > 16 * L || head_dim <= 0 || n_ctx <= 0) return false;
  int64_t t = 0;
  for (; t + 4 <= n_ctx; t += 4) scores<4>(q, nh, k, kstride, t, n_ctx, head_dim, scale, p);
  for (; t < n_ctx; ++t) scores<1>(q, nh, k, kstride, t, n_ctx, head_dim, scale, p);
  for (int64_t j = 0; j < nh; ++j) softmax(p + j * n_ctx, n_ctx);
  switch ((v_dim + L - 1) / L) {
    case 1: weighted_v_heads<1>(p, nh, v, vstride, n_ctx, v_dim, out); break;
    case 2: weighted_v_heads<2>(p, nh, v, vstride, n_ctx, v_dim, out); break;
    case 3: weighted_v_heads<3>(p, nh, v, vstride, n_ctx, v_dim, out); break;
    case 4: weighted_v_heads<4>(p, nh, v, vstride, n_ctx, v_dim, out); break;
    case 5: case 6: weighted_v_heads<6>(p, nh, v, vstride, n_ctx, v_dim, out); break;
    case 7: case 8: weighted_v_heads<8>(p, nh, v, vstride, n_ctx, v_dim, out); break;
    default: weighted_v_heads<16>(p, nh, v, vstride, n_ctx, v_dim, out); break;
  }
  return true;
}

}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
