// AVX2 integer matvec (the Avx2 level's decode path for affine 4- and 8-bit codes). x is
// held per quantisation group g in two integer parts: with dx_g = 2^(E - B), E the exponent of
// m = max|x_g| (m in [2^(E-1), 2^E); E one higher where m / dx would round to 2^15), B = 15 for
// 4-bit codes and 14 for 8-bit, q_c = round(x_c / dx_g) in int16 (|q| < 2^15, <= 2^14 for
// 8-bit) and the rest r_c = x_c / dx_g - q_c (exact: dx is a power of two) as d_c = round(R r_c)
// in int8, R = 128 (|d| <= 64: vpmaddubsw's pairs of 8-bit code bytes cannot saturate, and 8
// steps of 4-bit group-lane sums against d fit int16 before they are widened), so |x_c - (q_c +
// d_c / R) dx_g| <= dx_g / 256 <= 2^-(B + 7) m: 2^-22 m for 4-bit codes, 2^-21 m for 8-bit.
// (B = 14 and R = 256 for 4-bit codes would give the same precision, but the lane kernels would
// have to widen every 4 steps: ~4% of their time on Zen 3.)
// Each 32-byte chunk of codes meets q through vpmaddwd, code k of each 16-bit word cut out in
// place (4-bit: the bytes' low and high nibbles, then each word's low and high byte of those;
// 8-bit: the word's low and high byte), so word m of the chunk meets q's vector k at lane m with
// no shuffle of the weights, and d through vpmaddubsw (the code bytes, 4-bit: the nibbles). The sums are exact in int32; eight groups' lanes are
// summed into one vector per part, converted and scaled by scale * dx (d's by scale * dx / R).
// On Zen 1 (128-bit units) a 32-byte chunk of 4-bit codes takes ~8 ns against the float
// kernel's ~10.6 (no int -> float conversion per code); q alone would take ~5.3 but holds x to
// 2^-15 of m, which puts the fixture models' decode logits 1.3e-4 to 4.2e-4 from their goldens
// (the bound is 1e-4). Tested in tests/ops/test_ops_cpu.cpp against the bound above.
// 4-bit group-lane rows (backend/cpu/group_lanes.h) are read as they lie, a 32-bit lane per group and no
// reduction across lanes (lanes_row_dot): the same integers per group, so the same bits, ~19%
// faster on Zen 1 (tests/ops/test_group_lanes.cpp). Zen 1 issues one 128-bit integer multiply
// a cycle, and the 6 ymm multiplies per 32 bytes of codes take >= 4.8 ns of the ~6 a step
// takes (a9dc2a6:docs/benchmarks.md). Zen 3 (two multiply pipes) is bound by the
// step's ~19.5 vector ops instead; two halves run per pass over the steps to halve the loop's
// overhead.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "backend/cpu/exp_poly.h"
#include "backend/cpu/kernels.h"

#include "backend/cpu/kernels_begin.h"
#pragma GCC target("avx2,fma,f16c")

namespace moeflux::cpu {
namespace {

constexpr int L = 8;

// Codes per 32-byte chunk, and int16 vectors of x per chunk (codes per 16-bit word).
template <int BITS>
constexpr int64_t kChunkCodes = 256 / BITS;
template <int BITS>
constexpr int kWordCodes = 16 / BITS;

bool fits(const QWeight& w) {
  if (w.format != WFormat::Affine || (w.bits != 4 && w.bits != 8)) return false;
  const int64_t gs = w.group_size;
  return gs > 0 && gs % (256 / w.bits) == 0 && w.cols % gs == 0;
}

#include "backend/cpu/avx2_util.h"

// Chunk j of x in px->xw (kXChunk<BITS> int16 each): q as P vectors of 16, vector k lane m =
// q of code j * CH + P m + k (P codes per 16-bit word); then d as bytes in the order of the
// chunk's code bytes: 4-bit, 32 bytes for the codes in low nibbles (the even ones) and 32 for
// the high nibbles (odd); 8-bit, 32 bytes, d of code b at byte b.
template <int BITS>
constexpr int64_t kXChunk = kChunkCodes<BITS> * 3 / 2;
// d's scale R, and q's bits (dx = 2^(E - kQBits)); the file's comment.
constexpr float kRestScale = 128.0f;
template <int BITS>
constexpr int kQBits = BITS == 4 ? 15 : 14;
// Group-lane steps whose int16 sums against d are added up before they are widened to int32: at
// most 2 x 2 codes < 16 times |d| <= 64 a lane per step, 3840, so 8 steps stay below 2^15.
constexpr int64_t kWidenSteps = 8;

// q and d of one chunk, codes in the chunk's order (n < CH: q[n], d[n]), into its slot xq of
// px->xw (the layout above).
template <int BITS>
inline void store_chunk(const int32_t* q, const int32_t* d, int16_t* xq) {
  constexpr int P = kWordCodes<BITS>;
  for (int k = 0; k < P; ++k)
    for (int mm = 0; mm < 16; ++mm) xq[k * 16 + mm] = int16_t(q[P * mm + k]);
  int8_t* xd = reinterpret_cast<int8_t*>(xq + kChunkCodes<BITS>);
  if constexpr (BITS == 4) {
    for (int b = 0; b < 32; ++b) xd[b] = int8_t(d[2 * b]), xd[32 + b] = int8_t(d[2 * b + 1]);
  } else {
    for (int b = 0; b < 32; ++b) xd[b] = int8_t(d[b]);
  }
}

// x -> q and d (px->xw), per-group steps dx (padded with >= 8 zeros) and float group sums (gsum).
// Natural order: chunk j holds columns j * CH ... A 4-bit group-lane weight (backend/cpu/group_lanes.h)
// is read as half blocks of 8 groups: chunk (b * wg + t) * 2 + h holds word t of groups 16 b + 8 h
// + l (l < 8; zeros past the block's nb groups), its code 8 l + e being column 8 t + e of group
// 16 b + 8 h + l, so that each 32-bit lane of the kernel's sums is one group.
// In two steps, as Kernels::prepare_layout / prepare_groups: the layout and buffers (x recorded,
// not read), then groups [g0, g1), each of which writes only its own bytes.
template <int BITS>
void words_layout(const QWeight& w, const float* x, PreparedX* px) {
  constexpr int64_t CH = kChunkCodes<BITS>, XC = kXChunk<BITS>;
  const int64_t cols = w.cols, gs = w.group_size, ng = cols / gs;
  const bool lanes = BITS == 4 && w.group_lanes;
  px->dx.assign(size_t((ng + 7) / 8 * 8 + 8), 0.0f);
  px->gstride = (ng + 16 + 15) / 16 * 16;
  px->gsum.assign(size_t(px->gstride), 0.0f);
  const int64_t nch = lanes ? 2 * group_lane_steps(cols, gs) : cols / CH;
  if (px->xw.size() < size_t(nch * XC)) px->xw.resize(size_t(nch * XC));
  if (lanes && ng % 16 != 0) {  // the last block's lanes past its groups: zeros
    const int64_t j0 = 2 * (ng / 16) * (gs / 8);
    std::fill(px->xw.begin() + j0 * XC, px->xw.begin() + nch * XC, int16_t(0));
  }
  px->T = 1, px->cols = cols, px->x = x;
  px->interleaved = px->shifted = px->digits = false;
  px->group_lanes = lanes;
  px->words = true;
  px->bits = w.bits, px->group_size = gs, px->lanes = L, px->stride = cols;
}

template <int BITS>
bool words_groups(const QWeight& w, const float* x, int64_t g0, int64_t g1, PreparedX* px) {
  constexpr int64_t CH = kChunkCodes<BITS>, XC = kXChunk<BITS>;
  const int64_t gs = w.group_size, wg = gs / 8;
  const bool lanes = px->group_lanes;
  thread_local std::vector<int32_t> qn, dn;  // one group's q and d, in column order
  qn.resize(size_t(gs)), dn.resize(size_t(gs));
  const __m256 sign = _mm256_set1_ps(-0.0f), rs = _mm256_set1_ps(kRestScale);
  const __m256i dmax = _mm256_set1_epi32(127);
  int16_t* xw = px->xw.data();
  // store_chunk's layout, 8 codes (one group's word t) at a time: code e of group l goes to
  // q vector e % 4, int32 lane l (the low int16 for e < 4), and to d byte 4 l + e / 2 of the
  // even (e even) or odd half. A third of the time of the scalar scatter (serial before
  // each matvec region).
  const __m128i dsplit = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t g = g0; g < g1; ++g) {
    const float* xg = x + g * gs;
    __m256 mx = _mm256_setzero_ps(), sm = _mm256_setzero_ps();
    for (int64_t c = 0; c < gs; c += L) {
      const __m256 v = _mm256_loadu_ps(xg + c);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v));
      sm = _mm256_add_ps(sm, v);
    }
    alignas(32) float mv[L];
    _mm256_store_ps(mv, mx);
    float m = 0.0f;
    for (float e : mv) m = std::max(m, e);
    const float sum = hsum(sm);
    if (!std::isfinite(m) || std::isnan(sum)) return false;
    px->gsum[size_t(g)] = sum;
    // A group with m < 2^-100 is left at zero (its inverse step would leave f32's range).
    // Where m / dx would round to 2^15 (m within 2^-16 of 2^E), the step doubles.
    int e = 0;
    std::frexp(m, &e);
    if (std::ldexp(m, kQBits<BITS> - e) >= 32767.5f) ++e;
    const bool tiny = !(m >= 0x1p-100f);
    px->dx[size_t(g)] = tiny ? 0.0f : std::ldexp(1.0f, e - kQBits<BITS>);
    const __m256 inv = _mm256_set1_ps(tiny ? 0.0f : std::ldexp(1.0f, kQBits<BITS> - e));
    for (int64_t c = 0; c < gs; c += L) {
      const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xg + c), inv);  // exact: inv is 2^k
      const __m256 qf = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qn.data() + c), _mm256_cvtps_epi32(qf));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dn.data() + c),
                          _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(t, qf), rs)), dmax));
    }
    if (!lanes) {  // the group's chunks (CH divides gs: fits)
      for (int64_t c = 0; c < gs; c += CH) store_chunk<BITS>(qn.data() + c, dn.data() + c, xw + (g * gs + c) / CH * XC);
      continue;
    }
    const int64_t b = g / 16, h = g % 16 / 8, l = g % 8;
    for (int64_t t = 0; t < wg; ++t) {
      const int64_t j = (b * wg + t) * 2 + h;
      int32_t* xq = reinterpret_cast<int32_t*>(xw + j * XC);  // 4 vectors of 8 int32
      int32_t* xd = reinterpret_cast<int32_t*>(xw + j * XC + CH);  // even then odd bytes
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qn.data() + 8 * t));
      const __m256i d8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dn.data() + 8 * t));
      const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q8), _mm256_extracti128_si256(q8, 1));
      const __m128i qp = _mm_unpacklo_epi16(q16, _mm_unpackhi_epi64(q16, q16));  // (q_k, q_k+4) pairs
      const __m128i d16 = _mm_packs_epi32(_mm256_castsi256_si128(d8), _mm256_extracti128_si256(d8, 1));
      const __m128i dp = _mm_shuffle_epi8(_mm_packs_epi16(d16, d16), dsplit);
      xq[l] = _mm_cvtsi128_si32(qp), xq[8 + l] = _mm_extract_epi32(qp, 1);
      xq[16 + l] = _mm_extract_epi32(qp, 2), xq[24 + l] = _mm_extract_epi32(qp, 3);
      xd[l] = _mm_cvtsi128_si32(dp), xd[8 + l] = _mm_extract_epi32(dp, 1);
    }
  }
  return true;
}

// The integer ops of nibble_dot at 256 and 128 bits (a group-lane half block of at most 4
// groups runs on 128: half the work on Zen 1's 128-bit units).
inline __m256i vand(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
inline __m128i vand(__m128i a, __m128i b) { return _mm_and_si128(a, b); }
template <int N> inline __m256i vsrl16(__m256i a) { return _mm256_srli_epi16(a, N); }
template <int N> inline __m128i vsrl16(__m128i a) { return _mm_srli_epi16(a, N); }
inline __m256i vmadd(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }
inline __m128i vmadd(__m128i a, __m128i b) { return _mm_madd_epi16(a, b); }
inline __m256i vmaddubs(__m256i a, __m256i b) { return _mm256_maddubs_epi16(a, b); }
inline __m128i vmaddubs(__m128i a, __m128i b) { return _mm_maddubs_epi16(a, b); }
inline __m256i vadd32(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
inline __m128i vadd32(__m128i a, __m128i b) { return _mm_add_epi32(a, b); }
inline __m256i vadd16(__m256i a, __m256i b) { return _mm256_add_epi16(a, b); }
inline __m128i vadd16(__m128i a, __m128i b) { return _mm_add_epi16(a, b); }
template <typename V> inline V vset8(char c) {
  if constexpr (sizeof(V) == 32) return _mm256_set1_epi8(c);
  else return _mm_set1_epi8(c);
}
template <typename V> inline V vset16(short c) {
  if constexpr (sizeof(V) == 32) return _mm256_set1_epi16(c);
  else return _mm_set1_epi16(c);
}
// x's vector at p (32-byte aligned): all of it, or its low 128 bits (lanes 0-3's).
template <typename V> inline V vx(const void* p) {
  if constexpr (sizeof(V) == 32) return _mm256_load_si256(static_cast<const __m256i*>(p));
  else return _mm_load_si128(static_cast<const __m128i*>(p));
}
// The code words of lanes [0, nh) at p (the rest zero), all of them when FULL.
template <typename V, bool FULL> inline V vcodes(const int* p, int nh) {
  if constexpr (sizeof(V) == 32) {
    if constexpr (FULL) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_maskload_epi32(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(nh), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  } else {
    if constexpr (FULL) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm_maskload_epi32(p, _mm_cmpgt_epi32(_mm_set1_epi32(nh), _mm_setr_epi32(0, 1, 2, 3)));
  }
}
// PAIR: the 4-lane form of two rows rb bytes apart side by side, row r's lanes 0-3 and row r +
// 1's lanes 4-7 (codes), against x's lanes 0-3 in both halves (lx).
template <typename V, bool FULL, bool PAIR> inline V lcodes(const int* p, int64_t rb, int nh) {
  if constexpr (PAIR) {
    const int* p1 = reinterpret_cast<const int*>(reinterpret_cast<const uint8_t*>(p) + rb);
    // Named first: _mm256_inserti128_si256 is a macro (clang, gcc -O0), and a template
    // argument list's comma would split its arguments.
    const __m128i c0 = vcodes<__m128i, FULL>(p, nh), c1 = vcodes<__m128i, FULL>(p1, nh);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(c0), c1, 1);
  } else {
    return vcodes<V, FULL>(p, nh);
  }
}
template <typename V, bool PAIR> inline V lx(const int16_t* p) {
  if constexpr (PAIR) return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
  else return vx<V>(p);
}
inline __m256i widen(__m256i v) { return v; }
inline __m256i widen(__m128i v) { return _mm256_zextsi128_si256(v); }

// One 32-byte chunk (or its low 16 bytes, on V = __m128i) of 4-bit codes v against x's chunk
// (kXChunk<4> int16: q then d; PAIR: x's lanes 0-3 in both halves, lx): the int32 lane sums
// against q (vpmaddwd of codes k of each word and q vector k; the nibbles of each byte, lo and
// hi, serve both parts: a word of lo holds codes 0 and 2 of the word, hi codes 1 and 3), and
// the int16 lane sums against d (vpmaddubsw of the nibbles; at most 4 codes < 16 times |d| <=
// 64 a lane: 3840).
template <typename V, bool PAIR = false>
__attribute__((always_inline)) inline void nibble_dot(V v, const int16_t* x, V* q32, V* d16) {
  const V n = vset8<V>(0x0f), m = vset16<V>(0x00ff);
  const V lo = vand(v, n), hi = vand(vsrl16<4>(v), n);
  const V a = vmadd(vand(lo, m), lx<V, PAIR>(x)), b = vmadd(vand(hi, m), lx<V, PAIR>(x + 16));
  const V c = vmadd(vsrl16<8>(lo), lx<V, PAIR>(x + 32)), d = vmadd(vsrl16<8>(hi), lx<V, PAIR>(x + 48));
  *q32 = vadd32(vadd32(a, b), vadd32(c, d));
  *d16 = vadd16(vmaddubs(lo, lx<V, PAIR>(x + 64)), vmaddubs(hi, lx<V, PAIR>(x + 80)));
}

// The int32 lane sums of one chunk against q (sum over k of vpmaddwd(codes k of each word, q
// vector k)) and against d (vpmaddubsw of the code bytes, or nibbles, and d, widened), added to
// *s and *r. 4-bit: nibble_dot.
template <int BITS>
inline void chunk_dot(__m256i v, const int16_t* xw, __m256i* s, __m256i* r) {
  const __m256i one = _mm256_set1_epi16(1);
  if constexpr (BITS == 4) {
    __m256i q32, d16;
    nibble_dot(v, xw, &q32, &d16);
    *s = _mm256_add_epi32(*s, q32);
    *r = _mm256_add_epi32(*r, _mm256_madd_epi16(d16, one));
  } else {
    const __m256i* xd = reinterpret_cast<const __m256i*>(xw + kChunkCodes<BITS>);
    const __m256i a = _mm256_madd_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x00ff)), vx<__m256i>(xw));
    *s = _mm256_add_epi32(*s, _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_srli_epi16(v, 8), vx<__m256i>(xw + 16))));
    // per int16 lane 2 codes < 256 times |d| <= 64: 32640, inside vpmaddubsw's saturation
    *r = _mm256_add_epi32(*r, _mm256_madd_epi16(_mm256_maddubs_epi16(v, _mm256_load_si256(xd)), one));
  }
}

// Eight vectors of int32 lanes a[0..8) -> one whose lane i is the sum of a[i]'s lanes: pairs
// (per 128-bit half [u0 + u2, v0 + v2, u1 + u3, v1 + v3]), then quads (per half [a, b, c, d]),
// then the two halves.
inline __m256i sum_pairs(__m256i u, __m256i v) {
  return _mm256_add_epi32(_mm256_unpacklo_epi32(u, v), _mm256_unpackhi_epi32(u, v));
}
inline __m256i sum_quads(__m256i u, __m256i v) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(u, v), _mm256_unpackhi_epi64(u, v));
}
inline __m256i sum_halves(__m256i u, __m256i v) {
  return _mm256_add_epi32(_mm256_permute2x128_si256(u, v, 0x20), _mm256_permute2x128_si256(u, v, 0x31));
}

// Group i of a block against q into *a and against d into *b (zero for i >= n when N is 0):
// its cpg chunks at q + i * cpg * 32 bytes, its x at xw + i * cpg * kXChunk.
template <int BITS, int CPG, int N>
inline void group_sum(const uint8_t* q, const int16_t* xw, int64_t cpg, int i, int n, __m256i* a, __m256i* b) {
  if constexpr (CPG) cpg = CPG;
  *a = *b = _mm256_setzero_si256();
  if (N == 0 && i >= n) return;
#pragma GCC unroll 2
  for (int64_t j = 0; j < cpg; ++j) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + (i * cpg + j) * 32));
    chunk_dot<BITS>(v, xw + (i * cpg + j) * kXChunk<BITS>, a, b);
  }
}

// A block's 8 groups (N = 8, or n when N is 0) -> *sa, *sb: lane i the sum of group i's lanes
// against q and against d. Reduced pair by pair as the groups are done, so that at most ~8
// vectors are live (16 per-group sums would not fit in AVX2's 16 registers). CPG (chunks per
// group, 0: cpg at run time) and N fixed let the full block run unrolled.
template <int BITS, int CPG, int N>
inline void block_sums(const uint8_t* q, const int16_t* xw, int64_t cpg, __m256i* sa, __m256i* sb, int n = N) {
  __m256i qa[2], qb[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i pa[2], pb[2];
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      __m256i a0, b0, a1, b1;
      group_sum<BITS, CPG, N>(q, xw, cpg, 4 * h + 2 * p, n, &a0, &b0);
      group_sum<BITS, CPG, N>(q, xw, cpg, 4 * h + 2 * p + 1, n, &a1, &b1);
      pa[p] = sum_pairs(a0, a1), pb[p] = sum_pairs(b0, b1);
    }
    qa[h] = sum_quads(pa[0], pa[1]), qb[h] = sum_quads(pb[0], pb[1]);
  }
  *sa = sum_halves(qa[0], qa[1]), *sb = sum_halves(qb[0], qb[1]);
}

// Bytes of one scale or bias (f32, or f16 / bf16): a constant, where dtype_size is a call.
template <DType S>
constexpr int64_t kParamBytes = S == DType::F32 ? 4 : 2;

// The scales (*sc) and biases (*bi) of n <= 8 groups from g0 on (lanes >= n zero): all 8, or
// for a partial block the row's last 8 moved down by 8 - n lanes (a copy through the stack would
// stall its load on the narrower stores: ~13% of a 2048 x 768 matvec on Zen 3), or where the row
// has fewer than 8 a zero-padded copy. sp, bp: the row's scales and biases.
template <DType S>
inline void load_params(const uint8_t* sp, const uint8_t* bp, int64_t g0, int n, __m256* sc, __m256* bi) {
  constexpr int64_t es = kParamBytes<S>;
  if (n == 8) {
    *sc = load8<S>(sp, g0), *bi = load8<S>(bp, g0);
  } else if (g0 + n >= 8) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i idx = _mm256_add_epi32(iota, _mm256_set1_epi32(8 - n));
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota));
    *sc = _mm256_and_ps(_mm256_permutevar8x32_ps(load8<S>(sp, g0 + n - 8), idx), keep);
    *bi = _mm256_and_ps(_mm256_permutevar8x32_ps(load8<S>(bp, g0 + n - 8), idx), keep);
  } else {
    alignas(32) uint8_t st[32] = {}, bt[32] = {};
    std::memcpy(st, sp + g0 * es, size_t(n * es));
    std::memcpy(bt, bp + g0 * es, size_t(n * es));
    *sc = load8<S>(st, 0), *bi = load8<S>(bt, 0);
  }
}

// The int32 sums of 8 lanes against q (sa) and d (sd), summed as sa + sd / R in f32 and scaled
// by sc * dxv into *acc (one FMA on the accumulator), and the bias terms bi * gsv into *bacc
// (lanes whose sc and bi are zero leave theirs as they were).
template <int BITS>
inline void add_sums(__m256i sa, __m256i sd, __m256 sc, __m256 bi, __m256 dxv, __m256 gsv, __m256* acc, __m256* bacc) {
  const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sd), _mm256_set1_ps(1.0f / kRestScale), _mm256_cvtepi32_ps(sa));
  *acc = _mm256_fmadd_ps(t, _mm256_mul_ps(sc, dxv), *acc);
  *bacc = _mm256_fmadd_ps(bi, gsv, *bacc);
}

// The sums of n <= 8 groups from g0 on, lane i group g0 + i, into *acc and *bacc (add_sums),
// with the row's scales and biases at sp, bp.
template <int BITS, DType S>
inline void add_block(__m256i sa, __m256i sd, const uint8_t* sp, const uint8_t* bp, int64_t g0, int n, const float* dx,
                      const float* gsum, __m256* acc, __m256* bacc) {
  __m256 sc, bi;
  load_params<S>(sp, bp, g0, n, &sc, &bi);
  add_sums<BITS>(sa, sd, sc, bi, _mm256_loadu_ps(dx + g0), _mm256_loadu_ps(gsum + g0), acc, bacc);
}

// y[r] for one row: per block of 8 groups the int32 group sums, converted and times scale *
// dx per group, summed lane-wise in f32, and the bias terms b_g * gsum_g summed aside and added
// last (add_block). The arithmetic of a row does not depend on the rows around it.
template <int BITS, DType S, int CPG>
float words_row_dot(const QWeight& w, const PreparedX& px, int64_t r) {
  constexpr int64_t CH = kChunkCodes<BITS>, CB = CH * BITS / 8;  // codes and bytes per chunk
  const int64_t gs = w.group_size, ng = w.cols / gs, cpg = CPG ? CPG : gs / CH, pb = ng * kParamBytes<S>;
  const uint8_t* row = w.data + r * (w.cols * w.bits / 8);
  const uint8_t *sp = w.scales + r * pb, *bp = w.biases + r * pb;
  const int16_t* xw = px.xw.data();
  const float *dx = px.dx.data(), *gsum = px.gsum.data();
  __m256 acc = _mm256_setzero_ps(), bacc = _mm256_setzero_ps();
  for (int64_t g0 = 0; g0 < ng; g0 += 8) {
    const int nb = int(std::min<int64_t>(8, ng - g0));
    const uint8_t* qb = row + g0 * cpg * CB;
    // The block's bytes 2 KiB ahead (the hardware prefetchers alone leave DRAM idle).
    for (int64_t o = 0; o < 8 * cpg * CB; o += 64) _mm_prefetch(reinterpret_cast<const char*>(qb + o) + 2048, _MM_HINT_T0);
    __m256i sa, sd;
    const int16_t* xb = xw + g0 * cpg * kXChunk<BITS>;
    if (nb == 8) block_sums<BITS, CPG, 8>(qb, xb, cpg, &sa, &sd);
    else block_sums<BITS, CPG, 0>(qb, xb, cpg, &sa, &sd, nb);
    add_block<BITS, S>(sa, sd, sp, bp, g0, nb, dx, gsum, &acc, &bacc);
  }
  return hsum(acc) + hsum(bacc);
}

// Half h of a group-lane block (backend/cpu/group_lanes.h) against x: its nh groups' sums against q
// into *sa and against d into *sd, lane l = group 16 b + 8 h + l (zero for l >= nh), on V (8
// lanes, or 4 when nh <= 4). step: the half's first code word (step t's words at step + t * nb
// words, nb the block's groups); xw: the half's chunk of step 0 (step t's at xw + 2 t kXChunk).
// PAIR (nh <= 4): rows r and r + 1 (rb bytes on) at once, lanes 4-7 row r + 1's groups.
// The rest's int16 sums (nibble_dot's, at most 3840 a lane per step) are widened every
// kWidenSteps = 8 steps (wg, the steps, is a multiple of 8; WG fixes it, 0: at run time). The
// same integers as the natural order's block_sums, so the same bits.
template <typename V, bool FULL, int WG, bool PAIR = false>
__attribute__((always_inline)) inline void lanes_half(const uint8_t* step, int64_t nb, int nh, const int16_t* xw, int64_t wg, __m256i* sa, __m256i* sd,
                                                      int64_t rb = 0) {
  if constexpr (WG) wg = WG;
  const V one = vset16<V>(1);
  V s{}, r{};
  for (int64_t t0 = 0; t0 < wg; t0 += kWidenSteps) {
    V r16{};
    // Not unrolled: the compiler's interleaving of 4 steps spills (Zen 1: 189 -> 217 us at the
    // expert gate / up shape, bench_ops).
#pragma GCC unroll 1
    for (int64_t t = t0; t < t0 + kWidenSteps; ++t) {
      V q32, d16;
      nibble_dot<V, PAIR>(lcodes<V, FULL, PAIR>(reinterpret_cast<const int*>(step + t * nb * 4), rb, nh), xw + 2 * t * kXChunk<4>, &q32, &d16);
      s = vadd32(s, q32), r16 = vadd16(r16, d16);
    }
    r = vadd32(r, vmadd(r16, one));
  }
  *sa = widen(s), *sd = widen(r);
}

// Two full halves (8 groups each) in one pass over their steps, lanes_half's arithmetic for
// each (so the same integers) with half the loop's overhead per step: half i's step t words at
// p[i] + t * stride, its x chunk of step 0 at x[i] (step t's at x[i] + 2 t kXChunk). Both halves
// of a full block (stride 64), the same half of two rows, or (PAIR, halves of nh <= 4 groups)
// that half of rows (r, r + 1) and of rows (r + 2, r + 3), each pair rb bytes apart as in lanes_half.
template <int WG, bool PAIR = false, bool FULL = true>
__attribute__((always_inline)) inline void lanes_two(const uint8_t* const p[2], int64_t stride, const int16_t* const x[2], int64_t wg, __m256i* sa,
                                                     __m256i* sd, int64_t rb = 0, int nh = 8) {
  if constexpr (WG) wg = WG;
  const __m256i one = _mm256_set1_epi16(1);
  __m256i s[2] = {}, r[2] = {};
  for (int64_t t0 = 0; t0 < wg; t0 += kWidenSteps) {
    __m256i r16[2] = {};
#pragma GCC unroll 1
    for (int64_t t = t0; t < t0 + kWidenSteps; ++t) {
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        __m256i q32, d16;
        nibble_dot<__m256i, PAIR>(lcodes<__m256i, FULL, PAIR>(reinterpret_cast<const int*>(p[i] + t * stride), rb, nh), x[i] + 2 * t * kXChunk<4>, &q32, &d16);
        s[i] = vadd32(s[i], q32), r16[i] = vadd16(r16[i], d16);
      }
    }
    r[0] = vadd32(r[0], vmadd(r16[0], one)), r[1] = vadd32(r[1], vmadd(r16[1], one));
  }
  sa[0] = s[0], sa[1] = s[1], sd[0] = r[0], sd[1] = r[1];
}

// One half block of any width: the 128-bit form for at most 4 groups.
template <int WG>
__attribute__((always_inline)) inline void lanes_half_any(const uint8_t* step, int64_t nb, int nh, const int16_t* xw, int64_t wg, __m256i* sa, __m256i* sd) {
  if (nh == 8) lanes_half<__m256i, true, WG>(step, nb, nh, xw, wg, sa, sd);
  else if (nh == 4) lanes_half<__m128i, true, WG>(step, nb, nh, xw, wg, sa, sd);
  else if (nh < 4) lanes_half<__m128i, false, WG>(step, nb, nh, xw, wg, sa, sd);
  else lanes_half<__m256i, false, WG>(step, nb, nh, xw, wg, sa, sd);
}

// A full block of 16 groups from g0 on (codes at blk, x's chunk of step 0 at xb, the row's
// params at sp, bp) into *acc and *bacc: both halves in one pass (lanes_two), then add_block.
template <DType S, int WG>
__attribute__((always_inline)) inline void full_block(const uint8_t* blk, const int16_t* xb, const uint8_t* sp, const uint8_t* bp, int64_t g0,
                                                      int64_t wg, const float* dx, const float* gsum, __m256* acc, __m256* bacc) {
  __m256i sa[2], sd[2];
  const uint8_t* const ps[2] = {blk, blk + 32};
  const int16_t* const xs[2] = {xb, xb + kXChunk<4>};
  lanes_two<WG>(ps, 64, xs, wg, sa, sd);
  add_block<4, S>(sa[0], sd[0], sp, bp, g0, 8, dx, gsum, acc, bacc);
  add_block<4, S>(sa[1], sd[1], sp, bp, g0 + 8, 8, dx, gsum, acc, bacc);
}

// y[r] for one row of a 4-bit group-lane weight: words_row_dot's arithmetic, per half block.
template <DType S, int WG>
float lanes_row_dot(const QWeight& w, const PreparedX& px, int64_t r) {
  const int64_t gs = w.group_size, ng = w.cols / gs, wg = gs / 8, pb = ng * kParamBytes<S>;
  const uint8_t* row = w.data + r * (w.cols * w.bits / 8);
  const uint8_t *sp = w.scales + r * pb, *bp = w.biases + r * pb;
  const float *dx = px.dx.data(), *gsum = px.gsum.data();
  __m256 acc = _mm256_setzero_ps(), bacc = _mm256_setzero_ps();
  for (int64_t b = 0; 16 * b < ng; ++b) {
    const int64_t nb = std::min<int64_t>(16, ng - 16 * b);
    const uint8_t* blk = row + 16 * b * wg * 4;
    for (int64_t o = 0; o < nb * wg * 4; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + o) + 2048, _MM_HINT_T0);
    if (nb == 16) {
      full_block<S, WG>(blk, px.xw.data() + b * wg * 2 * kXChunk<4>, sp, bp, 16 * b, wg, dx, gsum, &acc, &bacc);
      continue;
    }
    for (int64_t h = 0; h < 2 && 8 * h < nb; ++h) {
      const int64_t g0 = 16 * b + 8 * h;
      const int nh = int(std::min<int64_t>(8, nb - 8 * h));
      const int16_t* xb = px.xw.data() + (b * wg * 2 + h) * kXChunk<4>;
      __m256i sa, sd;
      lanes_half_any<WG>(blk + 32 * h, nb, nh, xb, wg, &sa, &sd);
      add_block<4, S>(sa, sd, sp, bp, g0, nh, dx, gsum, &acc, &bacc);
    }
  }
  return hsum(acc) + hsum(bacc);
}

// The paired sums of a half of nh <= 4 groups from g0 on (lanes 0-3 row r's, 4-7 row r + 1's;
// sp, bp row r's params, row r + 1's pb bytes on) into both rows' accumulators, lane for lane as
// add_block would (so the same bits).
template <DType S>
inline void add_pair_half(__m256i sa, __m256i sd, const uint8_t* sp, const uint8_t* bp, int64_t pb, int64_t g0, int nh, const float* dx,
                          const float* gsum, __m256* acc, __m256* bacc) {
  __m256 sc0, bi0, sc1, bi1;
  load_params<S>(sp, bp, g0, nh, &sc0, &bi0);
  load_params<S>(sp + pb, bp + pb, g0, nh, &sc1, &bi1);
  __m256 ca = _mm256_permute2f128_ps(acc[0], acc[1], 0x20), cb = _mm256_permute2f128_ps(bacc[0], bacc[1], 0x20);
  add_sums<4>(sa, sd, _mm256_permute2f128_ps(sc0, sc1, 0x20), _mm256_permute2f128_ps(bi0, bi1, 0x20),
              _mm256_broadcast_ps(reinterpret_cast<const __m128*>(dx + g0)),
              _mm256_broadcast_ps(reinterpret_cast<const __m128*>(gsum + g0)), &ca, &cb);
  acc[0] = _mm256_blend_ps(acc[0], ca, 0x0f), bacc[0] = _mm256_blend_ps(bacc[0], cb, 0x0f);
  acc[1] = _mm256_blend_ps(acc[1], _mm256_permute2f128_ps(ca, ca, 0x01), 0x0f);
  bacc[1] = _mm256_blend_ps(bacc[1], _mm256_permute2f128_ps(cb, cb, 0x01), 0x0f);
}

// y[r .. r + R) (R = 2 or 4) where a half block holds at most 4 groups (ng % 16 in 1-4 or 9-12,
// as the 12 groups of a 2048 x 768 down projection): lanes_row_dot's arithmetic for each row,
// but the full halves of a partial block run two rows per pass (lanes_two), and those of at most
// 4 groups of rows (r, r + 1) side by side in one 8-lane vector (Zen 3 runs a 128-bit op at the
// cost of a 256-bit one), the two pairs of R = 4 in one pass. Their scaled sums are added lane
// for lane into each row's accumulators, so the same bits as row by row. Expert down (2048 x
// 768), one thread, bench_ops: 83 us in pairs, 75 in fours (R = 4 runs the paired halves as two
// chains, where pairs run them as one).
template <DType S, int WG, int R>
void lanes_block_dot(const QWeight& w, const PreparedX& px, int64_t r, float* y) {
  const int64_t gs = w.group_size, ng = w.cols / gs, wg = gs / 8, pb = ng * kParamBytes<S>;
  const int64_t rb = w.cols * w.bits / 8;  // bytes of a row of codes
  const uint8_t* row = w.data + r * rb;
  const uint8_t *sp = w.scales + r * pb, *bp = w.biases + r * pb;
  const float *dx = px.dx.data(), *gsum = px.gsum.data();
  __m256 acc[R], bacc[R];
  for (int i = 0; i < R; ++i) acc[i] = bacc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; 16 * b < ng; ++b) {
    const int64_t nb = std::min<int64_t>(16, ng - 16 * b);
    const uint8_t* blk = row + 16 * b * wg * 4;
    for (int64_t o = 0; o < nb * wg * 4; o += 64)
      for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(blk + i * rb + o) + 2048, _MM_HINT_T0);
    const int16_t* xb = px.xw.data() + b * wg * 2 * kXChunk<4>;
    if (nb == 16) {  // row by row, as lanes_row_dot
      for (int i = 0; i < R; ++i) full_block<S, WG>(blk + i * rb, xb, sp + i * pb, bp + i * pb, 16 * b, wg, dx, gsum, &acc[i], &bacc[i]);
      continue;
    }
    int64_t h = 0;
    if (nb > 8) {  // the full half of rows i and i + 1 in one pass
      for (int i = 0; i < R; i += 2) {
        __m256i sa[2], sd[2];
        const uint8_t* const ps[2] = {blk + i * rb, blk + (i + 1) * rb};
        const int16_t* const xs[2] = {xb, xb};
        lanes_two<WG>(ps, nb * 4, xs, wg, sa, sd);
        for (int k = 0; k < 2; ++k)
          add_block<4, S>(sa[k], sd[k], sp + (i + k) * pb, bp + (i + k) * pb, 16 * b, 8, dx, gsum, &acc[i + k], &bacc[i + k]);
      }
      h = 1;
    }
    const int nh = int(nb - 8 * h);
    const int64_t g0 = 16 * b + 8 * h;
    __m256i sa[2], sd[2];
    if constexpr (R == 4) {
      const uint8_t* const ps[2] = {blk + 32 * h, blk + 2 * rb + 32 * h};
      const int16_t* const xs[2] = {xb + h * kXChunk<4>, xb + h * kXChunk<4>};
      if (nh == 4) lanes_two<WG, true, true>(ps, nb * 4, xs, wg, sa, sd, rb, nh);
      else lanes_two<WG, true, false>(ps, nb * 4, xs, wg, sa, sd, rb, nh);
    } else if (nh == 4) {
      lanes_half<__m256i, true, WG, true>(blk + 32 * h, nb, nh, xb + h * kXChunk<4>, wg, sa, sd, rb);
    } else {
      lanes_half<__m256i, false, WG, true>(blk + 32 * h, nb, nh, xb + h * kXChunk<4>, wg, sa, sd, rb);
    }
    for (int i = 0; i < R / 2; ++i)
      add_pair_half<S>(sa[i], sd[i], sp + 2 * i * pb, bp + 2 * i * pb, pb, g0, nh, dx, gsum, acc + 2 * i, bacc + 2 * i);
  }
  for (int i = 0; i < R; ++i) y[r + i] = hsum(acc[i]) + hsum(bacc[i]);
}

// Rows [r0, r1) of full blocks and at most a last half of 8 groups (ng % 16 in {0, 8}):
// lanes_row_dot's arithmetic row by row, but each row's sum across lanes is taken after the
// next row's first block, so that the chain from its last block's sums to y[r] overlaps the
// next row's steps (Zen 3, one thread, bench_ops from L2: the attention q shape 304 -> 272 us;
// with the block's prefetches unrolled 260; 4096 x 1536, 238 -> 208 us, was row by row). The
// same additions in the same order, so the same bits. (Deferring each block's add_block past
// the next block's steps as well was slower: 348 us. Taking any last partial block here too,
// in place of lanes_row_dot, made the whole-block rows 1-4% slower and 1536-wide ones 6%.)
template <DType S, int WG>
void lanes_rows_full(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  const int64_t gs = w.group_size, ng = w.cols / gs, wg = WG ? WG : gs / 8, pb = ng * kParamBytes<S>;
  const int64_t rb = w.cols / 2;  // bytes of a row of codes
  const float *dx = px.dx.data(), *gsum = px.gsum.data();
  __m256 pacc = _mm256_setzero_ps(), pbacc = pacc;  // the previous row's, not yet reduced
  for (int64_t r = r0; r < r1; ++r) {
    prefetch_row_params(w, r + matvec_params_ahead(), 1, size_t(pb));
    const uint8_t* row = w.data + r * rb;
    const uint8_t *sp = w.scales + r * pb, *bp = w.biases + r * pb;
    __m256 acc = _mm256_setzero_ps(), bacc = _mm256_setzero_ps();
    for (int64_t b = 0; 16 * b < ng; ++b) {
      const uint8_t* blk = row + 16 * b * wg * 4;
      const int16_t* xb = px.xw.data() + b * wg * 2 * kXChunk<4>;
      if (16 * b + 8 == ng) {  // a last half of 8 groups
#pragma GCC unroll 8
        for (int64_t o = 0; o < 8 * wg * 4; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + o) + 2048, _MM_HINT_T0);
        __m256i sa, sd;
        lanes_half<__m256i, true, WG>(blk, 8, 8, xb, wg, &sa, &sd);
        add_block<4, S>(sa, sd, sp, bp, 16 * b, 8, dx, gsum, &acc, &bacc);
      } else {
#pragma GCC unroll 16
        for (int64_t o = 0; o < 16 * wg * 4; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + o) + 2048, _MM_HINT_T0);
        full_block<S, WG>(blk, xb, sp, bp, 16 * b, wg, dx, gsum, &acc, &bacc);
      }
      if (b == 0 && r > r0) y[r - 1] = hsum(pacc) + hsum(pbacc);
    }
    pacc = acc, pbacc = bacc;
  }
  y[r1 - 1] = hsum(pacc) + hsum(pbacc);
}

// Rows of one half block of 5-8 groups (320-512 columns in groups of 64, as Qwen3.5's expert
// down rows): two rows a pass against the same x (lanes_two), each row's sums added and reduced
// as lanes_row_dot does (the same bits). One thread, bench_ops from L2: 2048 x 512, 55.8 -> 41.9
// us. (In lanes_block_dot the same branch slowed its 768-wide fours by ~2%.)
template <DType S, int WG>
void lanes_rows_half(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  const int64_t gs = w.group_size, ng = w.cols / gs, wg = WG ? WG : gs / 8, pb = ng * kParamBytes<S>;
  const int64_t rb = w.cols / 2;  // bytes of a row of codes
  const float *dx = px.dx.data(), *gsum = px.gsum.data();
  const int16_t* const xs[2] = {px.xw.data(), px.xw.data()};
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    prefetch_row_params(w, r + matvec_params_ahead(), 2, size_t(pb));
    const uint8_t* row = w.data + r * rb;
    for (int64_t o = 0; o < 2 * rb; o += 64) _mm_prefetch(reinterpret_cast<const char*>(row + o) + 2048, _MM_HINT_T0);
    const uint8_t* const ps[2] = {row, row + rb};
    __m256i sa[2], sd[2];
    if (ng == 8) lanes_two<WG>(ps, ng * 4, xs, wg, sa, sd);
    else lanes_two<WG, false, false>(ps, ng * 4, xs, wg, sa, sd, 0, int(ng));
    for (int k = 0; k < 2; ++k) {
      __m256 acc = _mm256_setzero_ps(), bacc = _mm256_setzero_ps();
      add_block<4, S>(sa[k], sd[k], w.scales + (r + k) * pb, w.biases + (r + k) * pb, 0, int(ng), dx, gsum, &acc, &bacc);
      y[r + k] = hsum(acc) + hsum(bacc);
    }
  }
  if (r < r1) y[r] = lanes_row_dot<S, WG>(w, px, r);
}

template <DType S, int WG>
void lanes_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  const int64_t ng = w.cols / w.group_size, tail = ng % 16;
  const size_t pb = size_t(ng * kParamBytes<S>);
  int64_t r = r0;
  if (ng >= 5 && ng <= 8) return lanes_rows_half<S, WG>(w, px, y, r0, r1);
  if ((tail >= 1 && tail <= 4) || (tail >= 9 && tail <= 12)) {
    for (; r + 4 <= r1; r += 4) {
      prefetch_row_params(w, r + matvec_params_ahead(), 4, pb);
      lanes_block_dot<S, WG, 4>(w, px, r, y);
    }
    for (; r + 2 <= r1; r += 2) {
      prefetch_row_params(w, r + matvec_params_ahead(), 2, pb);
      lanes_block_dot<S, WG, 2>(w, px, r, y);
    }
  }
  if ((tail == 0 || tail == 8) && r < r1) return lanes_rows_full<S, WG>(w, px, y, r, r1);
  for (; r < r1; ++r) {
    prefetch_row_params(w, r + matvec_params_ahead(), 1, pb);
    y[r] = lanes_row_dot<S, WG>(w, px, r);
  }
}

template <DType S>
void lanes_rows_wg(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  switch (w.group_size / 8) {
    case 8: return lanes_rows<S, 8>(w, px, y, r0, r1);
    case 16: return lanes_rows<S, 16>(w, px, y, r0, r1);
    default: return lanes_rows<S, 0>(w, px, y, r0, r1);
  }
}

template <int BITS, DType S, int CPG>
void words_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  const size_t pb = size_t(w.cols / w.group_size * kParamBytes<S>);  // bytes of scales per row
  for (int64_t r = r0; r < r1; ++r) {
    prefetch_row_params(w, r + matvec_params_ahead(), 1, pb);
    y[r] = words_row_dot<BITS, S, CPG>(w, px, r);
  }
}

template <int BITS, DType S>
void words_rows_cpg(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  switch (w.group_size / kChunkCodes<BITS>) {
    case 1: return words_rows<BITS, S, 1>(w, px, y, r0, r1);
    case 2: return words_rows<BITS, S, 2>(w, px, y, r0, r1);
    default: return words_rows<BITS, S, 0>(w, px, y, r0, r1);
  }
}

template <int BITS>
void words_rows_bits(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  switch (w.sdtype) {
    case DType::F16: return words_rows_cpg<BITS, DType::F16>(w, px, y, r0, r1);
    case DType::BF16: return words_rows_cpg<BITS, DType::BF16>(w, px, y, r0, r1);
    default: return words_rows_cpg<BITS, DType::F32>(w, px, y, r0, r1);
  }
}

}  // namespace

bool avx2_prepare_layout(const QWeight& w, const float* x, PreparedX* px) {
  if (!fits(w)) return false;
  if (w.bits == 4) words_layout<4>(w, x, px);
  else words_layout<8>(w, x, px);
  return true;
}

bool avx2_prepare_groups(const QWeight& w, const float* x, int64_t g0, int64_t g1, PreparedX* px) {
  return w.bits == 4 ? words_groups<4>(w, x, g0, g1, px) : words_groups<8>(w, x, g0, g1, px);
}

bool avx2_prepare_words(const QWeight& w, const float* x, PreparedX* px) {
  return avx2_prepare_layout(w, x, px) && avx2_prepare_groups(w, x, 0, w.cols / w.group_size, px);
}

void avx2_words_matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  // PRECOND: x prepared for w's shape and layout
  MF_ASSERT(px.words && px.bits == w.bits && px.cols == w.cols && px.group_lanes == w.group_lanes);
  if (w.group_lanes) {
    switch (w.sdtype) {
      case DType::F16: return lanes_rows_wg<DType::F16>(w, px, y, r0, r1);
      case DType::BF16: return lanes_rows_wg<DType::BF16>(w, px, y, r0, r1);
      default: return lanes_rows_wg<DType::F32>(w, px, y, r0, r1);
    }
  }
  if (w.bits == 4) words_rows_bits<4>(w, px, y, r0, r1);
  else words_rows_bits<8>(w, px, y, r0, r1);
}

}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
