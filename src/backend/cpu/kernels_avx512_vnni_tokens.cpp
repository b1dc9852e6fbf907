// AVX-512 VNNI group-lane matvec over several tokens at once (Kernels::matvec_rows_tokens of the
// Avx512Vnni table): a small batch's rows of a 4-bit group-lane weight, each 64-byte line of
// codes loaded and split into nibbles once and dotted with the digits of two tokens
// (kernels_avx512_vnni.cpp prepares them; its lanes_rows_block is the one-token loop). Per
// token the integer sums are exact and the float steps are lanes_rows_block's, in its order, so
// each token gets its matvec's bits. A memory-bound pass (an expert of two tokens) does the
// second token's dots while the codes stream in instead of in a second pass from cache.
// Tested in tests/ops/test_small_batch.cpp (the same bits as the one-token matvec); bench:
// bench_ops Matmul/q4g64lanes, ExpertsBatch.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "backend/cpu/exp_poly.h"
#include "backend/cpu/kernels.h"

#include "backend/cpu/kernels_begin.h"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

namespace moeflux::cpu {
namespace {

constexpr int L = 16;
#include "backend/cpu/avx512_util.h"

// acc += the lane dots of u (unsigned bytes) and the 64 signed bytes at d, in place, d read by
// the instruction itself (no register for the digits: four tokens' 24 digit vectors would not
// fit beside their sums).
inline __m512i dp_acc_mem(__m512i acc, __m512i u, const int8_t* d) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const char(*)[64]>(d)));
  return acc;
}

// Rows r + i * stride (i < R) of a 4-bit group-lane weight for NT tokens: y[j][row] = row . x_j
// (x_j = *px[j]). The rows are read side by side as lanes_rows_block reads them (for_row_blocks:
// four spread streams; one stream was 5-10% slower on an expert step of 8 sequences); each row's
// line of codes is split into nibbles once per step and dotted with every token's digits.
template <DType S, int R, int NT>
void lanes_rows_tokens(const QWeight& w, const PreparedX* const* px, float* const* y, int64_t r, int64_t stride) {
  const int64_t ng = w.cols / w.group_size, wg = w.group_size / 8, words = w.cols / 8;
  const int64_t sbytes = ng * int64_t(dtype_size(S));
  prefetch_block_params(w, r, R, stride, size_t(sbytes));
  const int64_t ahead = prefetch_distance(words * 4, R, stride);
  const __m512i m = _mm512_set1_epi8(0x0f);
  const uint32_t* q[R];
  const int8_t* xd[NT];
  __m512 acc[R][NT];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    q[i] = reinterpret_cast<const uint32_t*>(w.data) + (r + i * stride) * words;
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int j = 0; j < NT; ++j) xd[j] = px[j]->xd.data();
  for (int64_t b = 0; b * L < ng; ++b) {
    const int64_t nb = std::min<int64_t>(L, ng - b * L), base = b * L * wg;
    const __mmask16 mb = tail_mask(nb);
    __m512i s[R][NT][3];  // digit k's sums of row i, token j (k = 0: the 2^16 digit)
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < NT; ++j)
        for (int k = 0; k < 3; ++k) s[i][j][k] = _mm512_setzero_si512();
    auto steps = [&]<bool FULL>() {
      for (int64_t t = 0; t < wg; ++t) {
        const int64_t off = (b * wg + t) * 384;
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const uint32_t* p = q[i] + base + t * (FULL ? L : nb);
          _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T0);
          const __m512i v = in_register(FULL ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(mb, p));
          const __m512i lo = _mm512_and_si512(v, m), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
#pragma GCC unroll 4
          for (int j = 0; j < NT; ++j) {
            const int8_t* d = xd[j] + off;
            s[i][j][0] = dp_acc_mem(dp_acc_mem(s[i][j][0], lo, d), hi, d + 64);
            s[i][j][1] = dp_acc_mem(dp_acc_mem(s[i][j][1], lo, d + 128), hi, d + 192);
            s[i][j][2] = dp_acc_mem(dp_acc_mem(s[i][j][2], lo, d + 256), hi, d + 320);
          }
        }
      }
    };
    if (nb == L) steps.template operator()<true>();
    else steps.template operator()<false>();
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int64_t ri = r + i * stride;
      const __m512 sv = load16<S>(w.scales + ri * sbytes, b * L, mb), bv = load16<S>(w.biases + ri * sbytes, b * L, mb);
      for (int j = 0; j < NT; ++j) {
        const __m512 dxv = _mm512_loadu_ps(px[j]->dx.data() + b * L), gsv = _mm512_loadu_ps(px[j]->gsum.data() + b * L);
        acc[i][j] = add_digit_sums(acc[i][j], s[i][j][0], s[i][j][1], s[i][j][2], sv, dxv, bv, gsv);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NT; ++j) y[j][r + i * stride] = _mm512_reduce_add_ps(acc[i][j]);
}

// Tokens two at a time (four rows of two tokens keep their 24 sums in registers), the last one
// alone.
void rows_tokens(const QWeight& w, const PreparedX* const* px, int n, float* const* y, int64_t r0, int64_t r1) {
  for (int j = 0; j < n; j += 2)
    for_row_blocks(w, r0, r1, [&]<DType S, int R>(int64_t r, int64_t stride, float*) {
      if (j + 1 < n) lanes_rows_tokens<S, R, 2>(w, px + j, y + j, r, stride);
      else lanes_rows_tokens<S, R, 1>(w, px + j, y + j, r, stride);
    });
}

}  // namespace

bool vnni_matvec_rows_tokens(const QWeight& w, const PreparedX* const* px, int n, float* const* y, int64_t r0,
                             int64_t r1) {
  if (!w.group_lanes || w.format != WFormat::Affine || w.bits != 4) return false;
  for (int j = 0; j < n; ++j)
    if (!px[j]->digits || !px[j]->group_lanes || px[j]->cols != w.cols) return false;
  rows_tokens(w, px, n, y, r0, r1);
  return true;
}

}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
