// AVX2 + FMA + F16C CPU kernels: the same algorithms as kernels_avx512.cpp with 8 lanes
// (lane-interleaved x for affine 2/4/8-bit, f16-pattern fp8 decode), tails done with
// maskload or scalar loops. Tested in tests/ops/test_ops_cpu.cpp with the level forced.
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "backend/cpu/exp_poly.h"
#include "backend/cpu/kernels.h"
#include "backend/ref/ref.h"

#include "backend/cpu/kernels_begin.h"
#pragma GCC target("avx2,fma,f16c")

namespace moeflux::cpu {
namespace {

constexpr int L = 8;

#include "backend/cpu/avx2_util.h"

// e4m3fn -> f32 / 256 through the f16 bit pattern (see kernels_avx512.cpp).
inline __m256 fp8x8(const uint8_t* p) {
  const __m128i h = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i em = _mm_and_si128(h, _mm_set1_epi16(0x7f));
  const __m128i bits = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x80)), 8),
                                    _mm_slli_epi16(em, 7));
  const __m128i nan = _mm_cmpeq_epi16(em, _mm_set1_epi16(0x7f));
  return _mm256_cvtph_ps(_mm_blendv_epi8(bits, _mm_set1_epi16(0x7e00), nan));
}
constexpr float kFp8Unscale = 256.0f;

float dot(const float* a, const float* b, int64_t n) {
  __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), c0);
    c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + L), _mm256_loadu_ps(b + i + L), c1);
  }
  for (; i < n; i += L) {
    const __m256i m = tail_mask(n - i);
    c0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), c0);
  }
  return hsum(_mm256_add_ps(c0, c1));
}

// y += a * x.
void axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  for (int64_t i = 0; i < n; i += L) storen(y + i, _mm256_fmadd_ps(av, loadn(x + i, n - i), loadn(y + i, n - i)), n - i);
}

// y += a * x, product rounded first (no FMA), as the scalar loop. The empty asm keeps the
// compiler from contracting the multiply and add into an FMA (this file targets FMA).
void add_scaled(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  for (int64_t i = 0; i < n; i += L) {
    __m256 p = _mm256_mul_ps(av, loadn(x + i, n - i));
    asm("" : "+x"(p));
    storen(y + i, _mm256_add_ps(loadn(y + i, n - i), p), n - i);
  }
}

// out = silu(gate) * up = gate * up / (1 + e^-gate), e^-gate by exp8 (clamped: within a few
// ulps of swiglu_ref over normal values); out may be gate.
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += L) {
    const __m256 g = loadn(gate + i, n - i), u = loadn(up + i, n - i);
    storen(out + i, _mm256_div_ps(_mm256_mul_ps(g, u), _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)))), n - i);
  }
}

// 4 rows x NT (1 to 3) tokens: 4 NT accumulators + NT x + one row vector at a time in 16 ymm
// registers, 4 + NT loads per 4 NT FMAs (4 x 3: 7 per 12; 4 x 2, which loaded all four rows
// first, 6 per 8). One step of 8 columns at i, MASKED: the last partial one (m: its lanes).
template <int NT, bool MASKED>
inline void dot4xt_step(const float* const* w, const float* const* x, int64_t i, __m256i m, __m256 c[4][NT]) {
  auto load = [m](const float* p) { return MASKED ? _mm256_maskload_ps(p, m) : _mm256_loadu_ps(p); };
  __m256 xv[NT];
#pragma GCC unroll 3
  for (int t = 0; t < NT; ++t) xv[t] = load(x[t] + i);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256 wv = load(w[j] + i);
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t) c[j][t] = _mm256_fmadd_ps(wv, xv[t], c[j][t]);
  }
}

// Loops unrolled by pragma so that -O2 keeps the accumulators in registers.
template <int NT>
void dot4xt(const float* const* w, const float* const* x, int64_t n, float out[4][3]) {
  __m256 c[4][NT];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t) c[j][t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + L <= n; i += L) dot4xt_step<NT, false>(w, x, i, _mm256_setzero_si256(), c);
  if (i < n) dot4xt_step<NT, true>(w, x, i, tail_mask(n - i), c);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t) out[j][t] = hsum(c[j][t]);
}

// ---- dense and fp8 rows ----

// The step unrolled (-O2 otherwise keeps c[] on the stack) and the bytes 2 KiB further on
// prefetched, as kernels_avx512.cpp does. The sums are unchanged.
template <DType T>
float dense_row_dot(const uint8_t* row, const float* x, int64_t n) {
  constexpr int64_t es = T == DType::F32 ? 4 : 2;  // bytes per element
  __m256 c[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
#pragma GCC unroll 2
    for (int64_t b = 0; b < 4 * L * es; b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(row) + i * es + b + 2048, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      c[j] = _mm256_fmadd_ps(load8<T>(row, i + j * L), _mm256_loadu_ps(x + i + j * L), c[j]);
  }
  for (; i + L <= n; i += L) c[0] = _mm256_fmadd_ps(load8<T>(row, i), _mm256_loadu_ps(x + i), c[0]);
  float tail = 0.0f;
  for (; i < n; ++i) tail += load_f32(T, row, size_t(i)) * x[i];
  return hsum(_mm256_add_ps(_mm256_add_ps(c[0], c[1]), _mm256_add_ps(c[2], c[3]))) + tail;
}

template <DType T>
void dense_row_decode(const uint8_t* row, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + L <= n; i += L) _mm256_storeu_ps(out + i, load8<T>(row, i));
  for (; i < n; ++i) out[i] = load_f32(T, row, size_t(i));
}

inline float fp8_scale(const QWeight& w, int64_t r, int64_t cb) {
  const int64_t nbc = (w.cols + w.block_cols - 1) / w.block_cols;
  return load_f32(w.sdtype, w.block_scales, size_t((r / w.block_rows) * nbc + cb));
}

float fp8_row_dot(const QWeight& w, int64_t r, const float* x) {
  const uint8_t* row = w.data + r * w.cols;
  float acc = 0.0f;
  for (int64_t c0 = 0, cb = 0; c0 < w.cols; c0 += w.block_cols, ++cb) {
    const int64_t c1 = std::min(w.cols, c0 + w.block_cols);
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    int64_t c = c0;
    for (; c + 2 * L <= c1; c += 2 * L) {
      b0 = _mm256_fmadd_ps(fp8x8(row + c), _mm256_loadu_ps(x + c), b0);
      b1 = _mm256_fmadd_ps(fp8x8(row + c + L), _mm256_loadu_ps(x + c + L), b1);
    }
    for (; c + L <= c1; c += L) b0 = _mm256_fmadd_ps(fp8x8(row + c), _mm256_loadu_ps(x + c), b0);
    float tail = 0.0f;
    for (; c < c1; ++c) tail += f8e4m3_to_f32(row[c]) * x[c];
    acc += (hsum(_mm256_add_ps(b0, b1)) * kFp8Unscale + tail) * fp8_scale(w, r, cb);
  }
  return acc;
}

void fp8_row_decode(const QWeight& w, int64_t r, float* out) {
  const uint8_t* row = w.data + r * w.cols;
  for (int64_t c0 = 0, cb = 0; c0 < w.cols; c0 += w.block_cols, ++cb) {
    const int64_t c1 = std::min(w.cols, c0 + w.block_cols);
    const float s = fp8_scale(w, r, cb);
    const __m256 sv = _mm256_set1_ps(s * kFp8Unscale);
    int64_t c = c0;
    for (; c + L <= c1; c += L) _mm256_storeu_ps(out + c, _mm256_mul_ps(fp8x8(row + c), sv));
    for (; c < c1; ++c) out[c] = f8e4m3_to_f32(row[c]) * s;
  }
}

// ---- affine fast path (2 / 4 / 8-bit codes, lane-interleaved x) ----

// Scales of row r into sb and (if bb) biases into bb, each followed by >= 8 zeros; returns
// sum_g bias_g * gsum_g (0 without gsum).
template <DType T>
float affine_row_params_t(const QWeight& w, int64_t r, const float* gsum, float* sb, float* bb) {
  const int64_t ng = w.cols / w.group_size;
  const uint8_t *sp = w.scales + r * ng * int64_t(dtype_size(T)),
                *bp = w.biases + r * ng * int64_t(dtype_size(T));
  __m256 acc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + L <= ng; g += L) {
    const __m256 bv = load8<T>(bp, g);
    _mm256_storeu_ps(sb + g, load8<T>(sp, g));
    if (bb) _mm256_storeu_ps(bb + g, bv);
    if (gsum) acc = _mm256_fmadd_ps(bv, _mm256_loadu_ps(gsum + g), acc);
  }
  float tail = 0.0f;
  for (; g < ng; ++g) {
    const float b = load_f32(T, bp, size_t(g));
    sb[g] = load_f32(T, sp, size_t(g));
    if (bb) bb[g] = b;
    if (gsum) tail += b * gsum[g];
  }
  for (int64_t i = ng; i < ng + L; ++i) {
    sb[i] = 0.0f;
    if (bb) bb[i] = 0.0f;
  }
  return hsum(acc) + tail;
}
float affine_row_params(const QWeight& w, int64_t r, const float* gsum, float* sb, float* bb) {
  switch (w.sdtype) {
    case DType::F16: return affine_row_params_t<DType::F16>(w, r, gsum, sb, bb);
    case DType::BF16: return affine_row_params_t<DType::BF16>(w, r, gsum, sb, bb);
    default: return affine_row_params_t<DType::F32>(w, r, gsum, sb, bb);
  }
}
inline size_t params_size(const QWeight& w) { return size_t(w.cols / w.group_size + 2 * L); }

template <int P>
inline __m256i lane_groups(int64_t gs) {
  alignas(32) int32_t idx[L];
  for (int l = 0; l < L; ++l) idx[l] = gs < P * L ? int32_t(l * P / gs) : 0;
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
}

template <int BITS, int K>
inline __m256 code(__m256i v) {
  constexpr int P = 32 / BITS;
  const __m256i m = _mm256_set1_epi32((1 << BITS) - 1);
  if constexpr (K == 0) return _mm256_cvtepi32_ps(_mm256_and_si256(v, m));
  else if constexpr (K == P - 1) return _mm256_cvtepi32_ps(_mm256_srli_epi32(v, BITS * K));
  else return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, BITS * K), m));
}

inline __m256i load_words(const uint32_t* q, int64_t left) {
  if (left >= L) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  return _mm256_maskload_epi32(reinterpret_cast<const int*>(q), tail_mask(left));
}

// Code K in place (times 2^(BITS*K)), for x prescaled by 2^-(BITS*K): one AND, no shift.
// The top code is shifted down instead, keeping the int32 conversion non-negative.
template <int BITS, int K>
inline __m256 code_shifted(__m256i v) {
  constexpr int P = 32 / BITS;
  if constexpr (K == P - 1) return code<BITS, K>(v);
  else return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(((1 << BITS) - 1) << (BITS * K))));
}

template <int BITS>
float affine_row_dot(const QWeight& w, int64_t r, const float* xs, const float* gsum, float* sb,
                     __m256i lg) {
  constexpr int P = 32 / BITS, CH = P * L;
  const int64_t gs = w.group_size, words = w.cols / P;
  const float bias_term = affine_row_params(w, r, gsum, sb, nullptr);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(w.data + r * int64_t(w.row_bytes()));
  __m256 acc = _mm256_setzero_ps();
  GroupCursor gc(CH, gs);
  for (int64_t wi = 0, j = 0; wi < words; wi += L, ++j, gc.next()) {
    // Software prefetch 2 KiB ahead: the decode is heavy enough that the hardware
    // prefetcher alone leaves DRAM idle (measured: +50% on cold 4-bit rows).
    _mm_prefetch(reinterpret_cast<const char*>(q + wi) + 2048, _MM_HINT_T0);
    const __m256i v = load_words(q + wi, words - wi);
    const float* xc = xs + j * CH;
    __m256 c[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    [&]<int... K>(std::integer_sequence<int, K...>) {
      ((c[K & 1] = _mm256_fmadd_ps(code_shifted<BITS, K>(v), _mm256_loadu_ps(xc + K * L), c[K & 1])), ...);
    }(std::make_integer_sequence<int, P>{});
    const __m256 sv = _mm256_permutevar8x32_ps(_mm256_loadu_ps(sb + gc.g), lg);
    acc = _mm256_fmadd_ps(_mm256_add_ps(c[0], c[1]), sv, acc);
  }
  return hsum(acc) + bias_term;
}

template <int BITS>
void affine_row_decode(const QWeight& w, int64_t r, float* out, float* sb, float* bb, __m256i lg) {
  constexpr int P = 32 / BITS, CH = P * L;
  const int64_t gs = w.group_size, words = w.cols / P;
  affine_row_params(w, r, nullptr, sb, bb);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(w.data + r * int64_t(w.row_bytes()));
  GroupCursor gc(CH, gs);
  for (int64_t wi = 0, j = 0; wi < words; wi += L, ++j, gc.next()) {
    const __m256i v = load_words(q + wi, words - wi);
    const __m256 sv = _mm256_permutevar8x32_ps(_mm256_loadu_ps(sb + gc.g), lg);
    const __m256 bv = _mm256_permutevar8x32_ps(_mm256_loadu_ps(bb + gc.g), lg);
    float* oc = out + j * CH;
    [&]<int... K>(std::integer_sequence<int, K...>) {
      (_mm256_storeu_ps(oc + K * L, _mm256_fmadd_ps(code<BITS, K>(v), sv, bv)), ...);
    }(std::make_integer_sequence<int, P>{});
  }
}

// The 8 x 8 transpose of 32-bit lanes: v[i] lane l -> v[l] lane i.
inline void transpose8(__m256i v[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]), t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]), u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]), u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i)
    v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20), v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
}

// A 4-bit group-lane row (backend/cpu/group_lanes.h) decoded as affine_row_decode<4> decodes the natural
// row: the same floats in the same places. Per half block (8 groups) and 8 steps, the step
// vectors (word t of each group, one per lane) are transposed into one vector per group holding 8
// of its words: one natural chunk. PRECOND: group_size / 8 words per group a multiple of 8.
void lanes_row_decode(const QWeight& w, int64_t r, float* out, float* sb, float* bb) {
  constexpr int64_t CH = 8 * L;
  const int64_t gs = w.group_size, ng = w.cols / gs, wg = gs / 8;
  affine_row_params(w, r, nullptr, sb, bb);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(w.data + r * int64_t(w.row_bytes()));
  for (int64_t b = 0; 16 * b < ng; ++b) {
    const int64_t nb = std::min<int64_t>(16, ng - 16 * b);
    const uint32_t* blk = q + 16 * b * wg;
    for (int64_t h = 0; h < 2 && 8 * h < nb; ++h) {
      const int64_t nh = std::min<int64_t>(8, nb - 8 * h);
      for (int64_t t0 = 0; t0 < wg; t0 += 8) {
        __m256i v[8];
        for (int i = 0; i < 8; ++i) v[i] = load_words(blk + (t0 + i) * nb + 8 * h, nh);
        transpose8(v);
        for (int64_t l = 0; l < nh; ++l) {
          const int64_t g = 16 * b + 8 * h + l;
          const __m256 sv = _mm256_set1_ps(sb[g]), bv = _mm256_set1_ps(bb[g]);
          float* oc = out + (g * wg + t0) / 8 * CH;
          [&]<int... K>(std::integer_sequence<int, K...>) {
            (_mm256_storeu_ps(oc + K * L, _mm256_fmadd_ps(code<4, K>(v[l]), sv, bv)), ...);
          }(std::make_integer_sequence<int, 8>{});
        }
      }
    }
  }
}

template <int BITS>
void affine_matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  MF_ASSERT(px.shifted);  // PRECOND: x prepared for in-place codes
  float* sb = scratch(1, params_size(w));
  const __m256i lg = lane_groups<32 / BITS>(w.group_size);
  for (int64_t r = r0; r < r1; ++r) y[r] = affine_row_dot<BITS>(w, r, px.xs.data(), px.gsum.data(), sb, lg);
}

void matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  if (px.words) return avx2_words_matvec_rows(w, px, y, r0, r1);
  if (px.interleaved && w.group_lanes)
    return natural_row_blocks(w, r0, r1, [&](const QWeight& v, int64_t r) { matvec_rows(v, px, y + r, 0, v.rows); });
  if (px.interleaved) {
    switch (w.bits) {
      case 2: return affine_matvec_rows<2>(w, px, y, r0, r1);
      case 4: return affine_matvec_rows<4>(w, px, y, r0, r1);
      default: return affine_matvec_rows<8>(w, px, y, r0, r1);
    }
  }
  const int64_t rb = int64_t(w.row_bytes());
  switch (w.format) {
    case WFormat::Dense:
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = w.data + r * rb;
        switch (w.dtype) {
          case DType::BF16: y[r] = dense_row_dot<DType::BF16>(row, px.x, w.cols); break;
          case DType::F16: y[r] = dense_row_dot<DType::F16>(row, px.x, w.cols); break;
          default: y[r] = dense_row_dot<DType::F32>(row, px.x, w.cols); break;
        }
      }
      return;
    case WFormat::Fp8Block:
      for (int64_t r = r0; r < r1; ++r) y[r] = fp8_row_dot(w, r, px.x);
      return;
    case WFormat::Affine: {  // 3 / 5 / 6-bit or odd groups: decode the row, then dot
      float* row = scratch(0, size_t(w.cols));
      for (int64_t r = r0; r < r1; ++r) {
        dequant_row_ref(w, r, row);
        y[r] = dot(row, px.x, w.cols);
      }
      return;
    }
  }
}

int64_t decode_row(const QWeight& w, const PreparedX& px, int64_t r, float* out, float* sb,
                   float* bb) {
  MF_ASSERT(!px.shifted);  // PRECOND: decoded rows hold true codes
  if (px.interleaved && w.group_lanes && w.bits == 4 && w.group_size % 64 == 0) {
    lanes_row_decode(w, r, out, sb, bb);
    return px.stride;
  }
  if (px.interleaved && w.group_lanes) {
    int64_t n = 0;
    natural_row_blocks(w, r, r + 1, [&](const QWeight& v, int64_t) { n = decode_row(v, px, 0, out, sb, bb); });
    return n;
  }
  if (px.interleaved) {
    switch (w.bits) {
      case 2: affine_row_decode<2>(w, r, out, sb, bb, lane_groups<16>(w.group_size)); break;
      case 4: affine_row_decode<4>(w, r, out, sb, bb, lane_groups<8>(w.group_size)); break;
      default: affine_row_decode<8>(w, r, out, sb, bb, lane_groups<4>(w.group_size)); break;
    }
    return px.stride;
  }
  const uint8_t* row = w.data + r * int64_t(w.row_bytes());
  switch (w.format) {
    case WFormat::Dense:
      switch (w.dtype) {
        case DType::BF16: dense_row_decode<DType::BF16>(row, w.cols, out); break;
        case DType::F16: dense_row_decode<DType::F16>(row, w.cols, out); break;
        default: dense_row_decode<DType::F32>(row, w.cols, out); break;
      }
      break;
    case WFormat::Fp8Block: fp8_row_decode(w, r, out); break;
    case WFormat::Affine: dequant_row_ref(w, r, out); break;
  }
  return w.cols;
}

void matmul_rows(const QWeight& w, const PreparedX& px, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t n = px.interleaved ? px.stride : w.cols;
  float* buf = scratch(0, size_t(4 * n));
  float* sb = px.interleaved ? scratch(1, params_size(w)) : nullptr;
  float* bb = px.interleaved ? scratch(2, params_size(w)) : nullptr;
  for (int64_t rb = r0; rb < r1; rb += 4) {
    const int nr = int(std::min<int64_t>(4, r1 - rb));
    const float* rows[4];
    for (int i = 0; i < 4; ++i) {
      rows[i] = buf + i * n;
      if (i < nr) decode_row(w, px, rb + i, buf + i * n, sb, bb);
      else rows[i] = rows[0];
    }
    for (int64_t t = 0; t < px.T; t += 3) {
      const int nt = int(std::min<int64_t>(3, px.T - t));
      const float* xs[3] = {px.token(t), px.token(t + std::min(1, nt - 1)), px.token(t + nt - 1)};
      float out[4][3];
      if (nt == 3) dot4xt<3>(rows, xs, n, out);
      else if (nt == 2) dot4xt<2>(rows, xs, n, out);
      else dot4xt<1>(rows, xs, n, out);
      for (int i = 0; i < nr; ++i)
        for (int u = 0; u < nt; ++u) y[(t + u) * ldy + rb + i] = out[i][u];
    }
  }
}

}  // namespace
}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop

namespace moeflux::cpu {
const Kernels& kernels_avx2() {
  static const Kernels k{L,          avx2_prepare_words, matvec_rows, matmul_rows, decode_row,          dot,
                         axpy,       add_scaled,         swiglu,      attend_avx2, avx2_prepare_layout, avx2_prepare_groups,
                         nullptr,    nullptr,            nullptr};
  return k;
}
}  // namespace moeflux::cpu
