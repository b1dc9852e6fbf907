// AVX-512 VNNI group-lane matmul over many tokens (Kernels::matmul_rows_tokens of the
// Avx512Vnni table): prefill's rows of a 4-bit group-lane weight in tiles of 2 rows x 4 tokens.
// Each step loads a tile's two lines of codes and splits them into nibbles once, and loads each
// token's six digit vectors (kernels_avx512_vnni.cpp prepares them) once for both rows: 48
// vpdpbusd per 26 loads, the 24 digit sums held in registers. Rows run in blocks whose codes
// stay in L2 while every token passes over them. Per token the integer sums are exact and the
// float steps are lanes_rows_block's in its order, so each token gets its matvec's bits. With
// two digits (a prefill step under CpuOptions::fast_prefill) the lowest digit is left out: each
// x is taken within 128.75 dx_g (about 2^-16 of its group's largest |x|) for 2/3 of the dots.
// Tested in tests/ops/test_small_batch.cpp and the op table; bench: bench_ops, moeflux bench.
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

// acc += the lane dots of u (unsigned bytes) and d (signed bytes), in place (see dp_acc in
// kernels_avx512_vnni.cpp: the intrinsic made GCC copy the sums between registers).
inline __m512i dp(__m512i acc, __m512i u, __m512i d) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(d));
  return acc;
}

// Codes of a block of rows, which stays in L2 while every token passes over it.
constexpr int64_t kTileRowBlockBytes = 128 << 10;

// Rows r .. r + R - 1 (adjacent) for NT tokens: y[j][row] = row . x_j, over x's top D digits
// (3: all; 2: the 2^16 and 2^8 digits). The nibbles of each row go through all tokens' low
// digits, then the high ones, so that only two rows' codes and one digit vector are live beside
// the sums.
template <DType S, int R, int NT, int D>
void lanes_tile(const QWeight& w, const PreparedX* const* px, float* const* y, int64_t r) {
  const int64_t ng = w.cols / w.group_size, wg = w.group_size / 8, words = w.cols / 8;
  const int64_t sbytes = ng * int64_t(dtype_size(S));
  const __m512i m = _mm512_set1_epi8(0x0f);
  const uint32_t* q[R];
  const int8_t* xd[NT];
  __m512 acc[R][NT];
#pragma GCC unroll 2
  for (int i = 0; i < R; ++i) {
    q[i] = reinterpret_cast<const uint32_t*>(w.data) + (r + i) * words;
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int j = 0; j < NT; ++j) xd[j] = px[j]->xd.data();
  for (int64_t b = 0; b * L < ng; ++b) {
    const int64_t nb = std::min<int64_t>(L, ng - b * L), base = b * L * wg;
    const __mmask16 mb = tail_mask(nb);
    __m512i s[R][NT][D];  // digit k's sums of row i, token j (k = 0: the 2^16 digit)
#pragma GCC unroll 2
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j)
#pragma GCC unroll 3
        for (int k = 0; k < D; ++k) s[i][j][k] = _mm512_setzero_si512();
    auto steps = [&]<bool FULL>() {
      for (int64_t t = 0; t < wg; ++t) {
        const int64_t off = (b * wg + t) * 384;
        __m512i v[R], u[R];
#pragma GCC unroll 2
        for (int i = 0; i < R; ++i) {
          const uint32_t* p = q[i] + base + t * (FULL ? L : nb);
          // The next tile's line: without it, the model's pp64 ran ~10% slower (codes from DRAM).
          _mm_prefetch(reinterpret_cast<const char*>(p + R * words), _MM_HINT_T0);
          v[i] = in_register(FULL ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(mb, p));
          u[i] = _mm512_and_si512(v[i], m);
        }
#pragma GCC unroll 4
        for (int j = 0; j < NT; ++j)
#pragma GCC unroll 3
          for (int k = 0; k < D; ++k) {
            const __m512i d = _mm512_load_si512(xd[j] + off + 128 * k);
#pragma GCC unroll 2
            for (int i = 0; i < R; ++i) s[i][j][k] = dp(s[i][j][k], u[i], d);
          }
#pragma GCC unroll 2
        for (int i = 0; i < R; ++i) u[i] = _mm512_and_si512(_mm512_srli_epi16(v[i], 4), m);
#pragma GCC unroll 4
        for (int j = 0; j < NT; ++j)
#pragma GCC unroll 3
          for (int k = 0; k < D; ++k) {
            const __m512i d = _mm512_load_si512(xd[j] + off + 128 * k + 64);
#pragma GCC unroll 2
            for (int i = 0; i < R; ++i) s[i][j][k] = dp(s[i][j][k], u[i], d);
          }
      }
    };
    if (nb == L) steps.template operator()<true>();
    else steps.template operator()<false>();
#pragma GCC unroll 2
    for (int i = 0; i < R; ++i) {
      const int64_t ri = r + i;
      const __m512 sv = load16<S>(w.scales + ri * sbytes, b * L, mb), bv = load16<S>(w.biases + ri * sbytes, b * L, mb);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) {
        const __m512 dxv = _mm512_loadu_ps(px[j]->dx.data() + b * L), gsv = _mm512_loadu_ps(px[j]->gsum.data() + b * L);
        const __m512i s2 = D == 3 ? s[i][j][D - 1] : _mm512_setzero_si512();
        acc[i][j] = add_digit_sums(acc[i][j], s[i][j][0], s[i][j][1], s2, sv, dxv, bv, gsv);
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) y[j][r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <DType S, int NT, int D>
void tile_rows(const QWeight& w, const PreparedX* const* px, float* const* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) lanes_tile<S, 2, NT, D>(w, px, y, r);
  if (r < r1) lanes_tile<S, 1, NT, D>(w, px, y, r);
}

// Blocks of rows whose codes fit kTileRowBlockBytes; per block, the tokens four at a time.
template <DType S, int D>
void tiles(const QWeight& w, const PreparedX* const* px, int n, float* const* y, int64_t r0, int64_t r1) {
  const int64_t block = std::max<int64_t>(2, kTileRowBlockBytes / int64_t(w.row_bytes()) / 2 * 2);
  for (int64_t r = r0; r < r1; r += block) {
    const int64_t re = std::min(r1, r + block);
    for (int j = 0; j < n; j += 4) {
      switch (std::min(4, n - j)) {
        case 1: tile_rows<S, 1, D>(w, px + j, y + j, r, re); break;
        case 2: tile_rows<S, 2, D>(w, px + j, y + j, r, re); break;
        case 3: tile_rows<S, 3, D>(w, px + j, y + j, r, re); break;
        default: tile_rows<S, 4, D>(w, px + j, y + j, r, re); break;
      }
    }
  }
}

template <DType S>
void tiles(const QWeight& w, const PreparedX* const* px, int n, int digits, float* const* y, int64_t r0, int64_t r1) {
  if (digits == 2) tiles<S, 2>(w, px, n, y, r0, r1);
  else tiles<S, 3>(w, px, n, y, r0, r1);
}

}  // namespace

bool vnni_takes_tokens(const QWeight& w) {
  return w.group_lanes && w.format == WFormat::Affine && w.bits == 4;
}

bool vnni_matmul_rows_tokens(const QWeight& w, const PreparedX* const* px, int n, int digits, float* const* y,
                             int64_t r0, int64_t r1) {
  if (!vnni_takes_tokens(w)) return false;
  for (int j = 0; j < n; ++j)
    if (!px[j]->digits || !px[j]->group_lanes || px[j]->cols != w.cols) return false;
  switch (w.sdtype) {
    case DType::F16: tiles<DType::F16>(w, px, n, digits, y, r0, r1); break;
    case DType::BF16: tiles<DType::BF16>(w, px, n, digits, y, r0, r1); break;
    default: tiles<DType::F32>(w, px, n, digits, y, r0, r1); break;
  }
  return true;
}

}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
