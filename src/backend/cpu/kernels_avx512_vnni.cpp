// AVX-512 VNNI kernels (CpuIsa::Avx512Vnni): affine 4- and 8-bit matvec as integer dots
// (vpdpbusd: unsigned code bytes times signed int8 x). x is quantised per quantisation group g
// to q_c = round(x_c / dx_g), dx_g = max|x_g| / Q with Q = digit_qmax(bits) (127 * 2^16 for
// 4-bit codes, 2^21 - 1 for 8-bit), and q is split into three balanced base-256 digits,
// q = d2 * 2^16 + d1 * 2^8 + d0, each in [-128, 127]. A row's integer sums are exact, so the one
// approximation is x's: |x_c - q_c dx_g| <= 0.75 dx_g, about 2^-23 (4-bit) or 2^-21 (8-bit) of
// the group's largest |x| (f32 keeps 2^-24 of each value). About half the vector work of the
// float kernel per code byte (a9dc2a6:docs/benchmarks.md). The bias term uses exact float sums of x.
// Other formats, group sizes and matmul use the AVX-512 float kernels. Tested in
// tests/ops/test_ops_cpu.cpp against that bound.
// 4-bit weights in the group-lane layout (backend/cpu/group_lanes.h) run a second loop: each lane of a
// vpdpbusd is one quantisation group, so the three digit sums stay in int32 over a whole group
// and the group's scale is applied once per 16 groups (no per-chunk shifts, convert, permute
// and FMA, no per-row scale pass): ~10 vector ops per 64 bytes of codes instead of ~15.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "backend/cpu/exp_poly.h"
#include "backend/cpu/kernels.h"

#include "backend/cpu/kernels_begin.h"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

namespace moeflux::cpu {
namespace {

constexpr int L = 16;
#include "backend/cpu/avx512_util.h"

// Codes per 64-byte load (a chunk) and digit bytes per chunk: 4-bit, byte p holds codes 2p
// (low nibble) and 2p + 1 (high), and the chunk's digits are [d2 lo, d2 hi, d1 lo, d1 hi,
// d0 lo, d0 hi], 64 bytes each (lo: the even codes' x, hi: the odd ones'); 8-bit, byte p is
// code p and the digits are [d2, d1, d0]. Lane l of vpdpbusd sums bytes 4l..4l+3: codes
// 8l..8l+7 (4-bit) or 4l..4l+3 (8-bit), always inside one group (group_size % 32 == 0).
template <int BITS>
constexpr int64_t kChunkCodes = BITS == 4 ? 128 : 64;
template <int BITS>
constexpr int64_t kChunkDigits = BITS == 4 ? 384 : 192;

bool fits(const QWeight& w) {
  if (w.format != WFormat::Affine || (w.bits != 4 && w.bits != 8)) return false;
  const int64_t gs = w.group_size, ch = w.bits == 4 ? kChunkCodes<4> : kChunkCodes<8>;
  return gs > 0 && gs % 32 == 0 && w.cols % gs == 0 && (ch % gs == 0 || gs % ch == 0);
}

// The balanced base-256 digit of q in [-128, 127] and the rest, (q - digit) / 256.
inline __m512i low_digit(__m512i q, __m512i* rest) {
  const __m512i d = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(q, _mm512_set1_epi32(128)), _mm512_set1_epi32(255)),
                                     _mm512_set1_epi32(128));
  *rest = _mm512_srai_epi32(_mm512_sub_epi32(q, d), 8);
  return d;
}

// 16 values of x times inv, rounded and clamped to +-qmax -> their three digit bytes, stored
// at d2, d1, d0.
inline void store_digits(__m512 v, __m512 inv, float qmax, int8_t* d2, int8_t* d1, int8_t* d0) {
  const __m512 lim = _mm512_set1_ps(qmax);
  const __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, inv), _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
  __m512i q = _mm512_cvtps_epi32(t);  // round to nearest even (MXCSR default)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d0), _mm512_cvtepi32_epi8(low_digit(q, &q)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d1), _mm512_cvtepi32_epi8(low_digit(q, &q)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d2), _mm512_cvtepi32_epi8(q));
}

// x -> digits (px->xd), per-group steps dx (px->dx, padded with >= 16 zeros) and exact
// group sums (px->gsum). False, leaving px to the float path, when x holds a non-finite value.
template <int BITS>
bool prepare_digits_bits(const QWeight& w, const float* x, PreparedX* px) {
  constexpr int64_t CH = kChunkCodes<BITS>, CD = kChunkDigits<BITS>;
  const int64_t cols = w.cols, gs = w.group_size, ng = cols / gs, nch = (cols + CH - 1) / CH;
  px->dx.assign(size_t((ng + 15) / 16 * 16 + 16), 0.0f);
  px->gstride = (ng + 16 + 15) / 16 * 16;
  px->gsum.assign(size_t(px->gstride), 0.0f);
  float* inv = scratch(7, size_t(ng));
  const float qmax = float(digit_qmax(BITS));
  for (int64_t g = 0; g < ng; ++g) {
    __m512 mx = _mm512_setzero_ps(), sm = _mm512_setzero_ps();
    for (int64_t c = g * gs; c < (g + 1) * gs; c += L) {
      const __m512 v = _mm512_loadu_ps(x + c);
      mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
      sm = _mm512_add_ps(sm, v);
    }
    const float m = _mm512_reduce_max_ps(mx), sum = _mm512_reduce_add_ps(sm);
    if (!std::isfinite(m) || std::isnan(sum)) return false;
    px->gsum[size_t(g)] = sum;
    // A step too small for 1 / step to be finite leaves the group at zero (|x| < 1e-32).
    const float step = m / qmax;
    const bool tiny = !(step > 0.0f) || !std::isfinite(1.0f / step);
    px->dx[size_t(g)] = tiny ? 0.0f : step;
    inv[g] = tiny ? 0.0f : 1.0f / step;
  }
  px->T = 1, px->cols = cols, px->x = x;
  px->interleaved = px->shifted = false;
  px->digits = true;
  px->words = false;
  px->group_lanes = BITS == 4 && w.group_lanes;
  px->stride = nch * CH;
  const int64_t wg = gs / 8;  // code words per group (4-bit)
  px->xd.assign(size_t(px->group_lanes ? group_lane_steps(w.cols, gs) * 384 : nch * CD), 0);
  int8_t* xd = px->xd.data();
  if constexpr (BITS == 4) {
    // 32 values at a time (four words of one group): the even ones to the lo digits, the odd
    // ones to hi. Group-lane order: per block b of 16 groups and step t (word t of each group)
    // six 64-byte vectors in the natural chunk's order, lane l = group 16 b + l, its byte j
    // pairing codes 2 j (lo) and 2 j + 1 (hi) of the word.
    alignas(64) static constexpr int32_t kEven[L] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    alignas(64) static constexpr int32_t kOdd[L] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    const __m512i ie = _mm512_load_si512(kEven), io = _mm512_load_si512(kOdd);
    alignas(16) int8_t lanes[6][16];
    for (int64_t c = 0; c < cols; c += 32) {
      const __m512 a = _mm512_loadu_ps(x + c), b = _mm512_loadu_ps(x + c + L);
      const int64_t g = c / gs;
      const __m512 iv = _mm512_set1_ps(inv[g]);
      if (!px->group_lanes) {
        int8_t* d = xd + (c / CH) * CD + (c % CH) / 2;
        store_digits(_mm512_permutex2var_ps(a, ie, b), iv, qmax, d, d + 128, d + 256);
        store_digits(_mm512_permutex2var_ps(a, io, b), iv, qmax, d + 64, d + 192, d + 320);
        continue;
      }
      store_digits(_mm512_permutex2var_ps(a, ie, b), iv, qmax, lanes[0], lanes[2], lanes[4]);
      store_digits(_mm512_permutex2var_ps(a, io, b), iv, qmax, lanes[1], lanes[3], lanes[5]);
      int8_t* d = xd + ((g / 16) * wg + (c % gs) / 8) * 384 + (g % 16) * 4;
      for (int64_t k = 0; k < 4; ++k)  // word (c % gs) / 8 + k
        for (int v = 0; v < 6; ++v) std::memcpy(d + k * 384 + v * 64, lanes[v] + 4 * k, 4);
    }
  } else {
    for (int64_t c = 0; c < cols; c += L) {
      int8_t* d = xd + (c / CH) * CD + c % CH;
      store_digits(_mm512_loadu_ps(x + c), _mm512_set1_ps(inv[c / gs]), qmax, d, d + 64, d + 128);
    }
  }
  return true;
}

bool prepare_digits(const QWeight& w, const float* x, PreparedX* px) {
  if (!fits(w)) return false;
  return w.bits == 4 ? prepare_digits_bits<4>(w, x, px) : prepare_digits_bits<8>(w, x, px);
}

// The integer sum per lane of one chunk: ((c.d2 << 8) + c.d1 << 8) + c.d0 = c.q, exact in
// int32 (per lane at most 8 codes < 16 times |q| < 2^23, or 4 codes < 256 times |q| < 2^21).
template <int BITS>
inline __m512i chunk_sum(__m512i v, const __m512i* d) {
  if constexpr (BITS == 4) {
    const __m512i m = _mm512_set1_epi8(0x0f);
    const __m512i lo = _mm512_and_si512(v, m), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, d[0]);
    s = _mm512_dpbusd_epi32(s, hi, d[1]);
    s = _mm512_slli_epi32(s, 8);
    s = _mm512_dpbusd_epi32(s, lo, d[2]);
    s = _mm512_dpbusd_epi32(s, hi, d[3]);
    s = _mm512_slli_epi32(s, 8);
    s = _mm512_dpbusd_epi32(s, lo, d[4]);
    return _mm512_dpbusd_epi32(s, hi, d[5]);
  } else {
    __m512i s = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v, d[0]), 8);
    s = _mm512_slli_epi32(_mm512_dpbusd_epi32(s, v, d[1]), 8);
    return _mm512_dpbusd_epi32(s, v, d[2]);
  }
}

// Rows r + i * stride (i < R) of y = W x, read side by side as the float kernel does
// (kernels_avx512.cpp): per row, the group scales times x's steps go to its sb slice and the
// bias terms are summed aside; each chunk's integer lane sums are converted and scaled by their
// lanes' sb, and the bias terms are added last. The arithmetic of each row is the same for every R.
template <int BITS, DType S, int R>
void digit_rows_block(const QWeight& w, const PreparedX& px, float* y, int64_t r, int64_t stride, float* sb,
                      __m512i lg) {
  constexpr int P = 32 / BITS, CH = P * L, ND = BITS == 4 ? 6 : 3;
  constexpr int64_t CD = kChunkDigits<BITS>;
  const int64_t words = w.cols / P;
  __m512 bias[R];
  const uint32_t* q[R];
  const int64_t sn = start_rows<S, R>(w, r, stride, px.gsum.data(), px.dx.data(), sb, bias, q);
  // The chunks' sums start from zero and take the bias terms at the end. Begun from
  // start_rows' output, GCC kept them on the stack: a store and a load per chunk in the chain
  // of FMAs.
  __m512 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  GroupCursor gc(CH, w.group_size);
  const int64_t ahead = prefetch_distance(words * 4, R, stride);
  const int8_t* xd = px.xd.data();
  // One chunk of every row; TAIL: the last, partial chunk (masked loads). The full chunks run
  // in a loop of their own, without the tail's branches (one per row and chunk in the object
  // code otherwise).
  auto chunk = [&]<bool TAIL>(int64_t wi, int64_t j, int64_t g) {
    __m512i d[ND];
#pragma GCC unroll 6
    for (int k = 0; k < ND; ++k) d[k] = _mm512_load_si512(xd + j * CD + 64 * k);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(q[i] + wi) + ahead, _MM_HINT_T0);
      const __m512i v = in_register(TAIL ? _mm512_maskz_loadu_epi32(tail_mask(words - wi), q[i] + wi)
                                         : _mm512_loadu_si512(q[i] + wi));
      const __m512 sv = _mm512_permutexvar_ps(lg, _mm512_loadu_ps(sb + i * sn + g));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(chunk_sum<BITS>(v, d)), sv, acc[i]);
    }
  };
  int64_t wi = 0, j = 0;
  for (; wi + L <= words; wi += L, ++j, gc.next()) chunk.template operator()<false>(wi, j, gc.g);
  if (wi < words) chunk.template operator()<true>(wi, j, gc.g);
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) y[r + i * stride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], bias[i]));  // one reduction per row
}

// acc += the lane dots of u (unsigned bytes) and d (signed bytes), in place: vpdpbusd through
// an asm with acc tied. With the intrinsic, GCC copied the group-lane loop's 12 sums between
// registers every step: 25 copies in an 82-instruction step of four rows.
inline __m512i dp_acc(__m512i acc, __m512i u, __m512i d) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(d));
  return acc;
}

// Rows r + i * stride (i < R) of a 4-bit group-lane weight (backend/cpu/group_lanes.h): per block of
// 16 groups, three int32 digit sums per lane (a group) over the block's steps, then per lane
// T = S2 * 2^16 + S1 * 2^8 + S0 in f32, times scale * dx, plus the block's bias terms.
// Per group |S_k| <= group_size * 15 * 128 < 2^18: exact, so C, the accumulators per digit
// sum, changes no bit: a single row keeps its low- and high-nibble dots apart (C = 2), six
// independent chains a step instead of three chains of two dependent dots; four rows are
// independent already, and 24 accumulators would not fit the registers. The arithmetic of
// each row is the same for every R and stride.
template <DType S, int R>
void lanes_rows_block(const QWeight& w, const PreparedX& px, float* y, int64_t r, int64_t stride) {
  constexpr int C = R == 1 ? 2 : 1;
  const int64_t ng = w.cols / w.group_size, wg = w.group_size / 8, words = w.cols / 8;
  const int64_t sbytes = ng * int64_t(dtype_size(S));
  prefetch_block_params(w, r, R, stride, size_t(sbytes));
  const int64_t ahead = prefetch_distance(words * 4, R, stride);
  const __m512i m = _mm512_set1_epi8(0x0f);
  const uint32_t* q[R];
  __m512 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
    q[i] = reinterpret_cast<const uint32_t*>(w.data) + (r + i * stride) * words, acc[i] = _mm512_setzero_ps();
  const int8_t* xd = px.xd.data();
  for (int64_t b = 0; b * L < ng; ++b) {
    const int64_t nb = std::min<int64_t>(L, ng - b * L), base = b * L * wg;
    const __mmask16 mb = tail_mask(nb);
    __m512i s[R][3][C];  // digit k's sums of row i (k = 0: the 2^16 digit)
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      for (int k = 0; k < 3; ++k)
        for (int c = 0; c < C; ++c) s[i][k][c] = _mm512_setzero_si512();
    // A block's steps; FULL: 16 groups, whole-vector loads. The test of nb stays out of the
    // loop: inside it, GCC jumped out and back for each row's load, every step. With dp_acc the
    // full step is 57 instructions for four lines of codes, without copies or jumps.
    auto steps = [&]<bool FULL>() {
      for (int64_t t = 0; t < wg; ++t) {
        const __m512i* d = reinterpret_cast<const __m512i*>(xd + (b * wg + t) * 384);
        const __m512i d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3], d4 = d[4], d5 = d[5];
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const uint32_t* p = q[i] + base + t * (FULL ? L : nb);
          _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T0);
          const __m512i v = in_register(FULL ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(mb, p));
          const __m512i lo = _mm512_and_si512(v, m), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
          if constexpr (C == 2) {
            s[i][0][0] = dp_acc(s[i][0][0], lo, d0), s[i][0][1] = dp_acc(s[i][0][1], hi, d1);
            s[i][1][0] = dp_acc(s[i][1][0], lo, d2), s[i][1][1] = dp_acc(s[i][1][1], hi, d3);
            s[i][2][0] = dp_acc(s[i][2][0], lo, d4), s[i][2][1] = dp_acc(s[i][2][1], hi, d5);
          } else {
            s[i][0][0] = dp_acc(dp_acc(s[i][0][0], lo, d0), hi, d1);
            s[i][1][0] = dp_acc(dp_acc(s[i][1][0], lo, d2), hi, d3);
            s[i][2][0] = dp_acc(dp_acc(s[i][2][0], lo, d4), hi, d5);
          }
        }
      }
    };
    if (nb == L) steps.template operator()<true>();
    else steps.template operator()<false>();
    const __m512 dxv = _mm512_loadu_ps(px.dx.data() + b * L), gsv = _mm512_loadu_ps(px.gsum.data() + b * L);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m512i sk[3];
      for (int k = 0; k < 3; ++k) sk[k] = C == 2 ? _mm512_add_epi32(s[i][k][0], s[i][k][C - 1]) : s[i][k][0];
      const int64_t ri = r + i * stride;
      acc[i] = add_digit_sums(acc[i], sk[0], sk[1], sk[2], load16<S>(w.scales + ri * sbytes, b * L, mb), dxv,
                              load16<S>(w.biases + ri * sbytes, b * L, mb), gsv);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) y[r + i * stride] = _mm512_reduce_add_ps(acc[i]);
}

// The natural order's row blocks (for_row_blocks): four rows, spread over the range, on every
// CPU (matvec_row_streams(true); MOEFLUX_MATVEC_ROWS / _SPREAD change that).
void lanes_matvec(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  for_row_blocks(w, r0, r1, [&]<DType S, int R>(int64_t r, int64_t stride, float*) {
    lanes_rows_block<S, R>(w, px, y, r, stride);
  });
}

template <int BITS>
void digit_matvec(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  const __m512i lg = lane_groups<32 / BITS>(w.group_size);
  for_row_blocks(w, r0, r1, [&]<DType S, int R>(int64_t r, int64_t stride, float* sb) {
    digit_rows_block<BITS, S, R>(w, px, y, r, stride, sb, lg);
  });
}

void matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  if (!px.digits) return kernels_avx512().matvec_rows(w, px, y, r0, r1);
  MF_ASSERT(px.group_lanes == w.group_lanes);  // PRECOND: x prepared for this weight's layout
  if (w.group_lanes) lanes_matvec(w, px, y, r0, r1);
  else if (w.bits == 4) digit_matvec<4>(w, px, y, r0, r1);
  else digit_matvec<8>(w, px, y, r0, r1);
}

}  // namespace
}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop

namespace moeflux::cpu {
const Kernels& kernels_avx512_vnni() {
  static const Kernels k = [] {
    Kernels t = kernels_avx512();
    t.prepare_special = prepare_digits;
    t.matvec_rows = matvec_rows;
    t.matvec_rows_tokens = vnni_matvec_rows_tokens;
    t.takes_tokens = vnni_takes_tokens;
    t.matmul_rows_tokens = vnni_matmul_rows_tokens;
    return t;
  }();
  return k;
}
}  // namespace moeflux::cpu
