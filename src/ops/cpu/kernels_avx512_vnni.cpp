// AVX-512 VNNI kernels (CpuIsa::Avx512Vnni): affine 4- and 8-bit matvec as integer dots
// (vpdpwssd: codes as int16 times int16 x). x is split per block of 32 values into two int16
// parts, x_c = dx_b * (xh_c + xl_c / 65534) with dx_b = max|x_b| / 32767, xh_c = round(x_c / dx_b)
// and xl_c the rounded remainder, so |x_c - its split| <= dx_b / 131068: about 2^-32 of the
// block's largest value, below f32 rounding. The two integer dots share the code extraction;
// the bias term uses exact float sums of x. Other formats, group sizes and matmul use the
// AVX-512 float kernels. Tested in tests/ops/test_ops_cpu.cpp against that bound.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/kernels.h"

// g++ 12 flags the intrinsics headers' deliberately undefined vectors (_mm512_undefined_*)
// once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

namespace moeflux::cpu {
namespace {

constexpr int L = 16;
#include "ops/cpu/avx512_util.h"

constexpr int kBlock = 32;  // x values per scale
constexpr float kLo = 65534.0f;  // xl units per xh unit

// Codes per 64-byte load: 128 (4-bit) or 64 (8-bit).
inline int64_t chunk_codes(int bits) { return bits == 4 ? 128 : 64; }

bool fits(const QWeight& w) {
  return w.format == WFormat::Affine && (w.bits == 4 || w.bits == 8) && w.group_size % kBlock == 0 &&
         512 % w.group_size == 0 && w.cols % w.group_size == 0;
}

// A 64-byte load is 32 u16 words. 4-bit: word w holds codes 4w..4w+3 and extraction k
// (shift 4k, mask) gives code 4w+k in word w, so within each 128-code chunk x goes to 4 vectors
// of 32 int16, vector k word w = x[4w + k]. 8-bit: word w holds codes 2w, 2w+1: 2 vectors per
// 64-code chunk, vector k word w = x[2w + k]. vpdpwssd lane i then sums codes 8i..8i+7 (4-bit)
// or 4i..4i+3 (8-bit): always inside one block of 32.

// x[c0, c0 + CH) in natural order (int16) -> the prepared order of one chunk (permutes).
template <int BITS>
inline void permute_chunk(const int16_t* nat, int16_t* out) {
  constexpr int PW = BITS == 4 ? 4 : 2;  // codes per u16 word
  for (int k = 0; k < PW; ++k) {
    alignas(64) int16_t idx[32];
    for (int w = 0; w < 32; ++w) idx[w] = int16_t((PW * w + k) % 64);
    const __m512i iv = _mm512_load_si512(idx);
    const __m512i lo = _mm512_permutex2var_epi16(_mm512_loadu_si512(nat), iv, _mm512_loadu_si512(nat + 32));
    if constexpr (BITS == 4) {
      const __m512i hi = _mm512_permutex2var_epi16(_mm512_loadu_si512(nat + 64), iv, _mm512_loadu_si512(nat + 96));
      _mm512_storeu_si512(out + 32 * k, _mm512_inserti64x4(lo, _mm512_castsi512_si256(hi), 1));
    } else {
      _mm512_storeu_si512(out + 32 * k, lo);
    }
  }
}

template <int BITS>
void prepare_q16_bits(const QWeight& w, const float* x, PreparedX* px) {
  constexpr int64_t ch = BITS == 4 ? 128 : 64;
  const int64_t cols = w.cols, nb = cols / kBlock, gs = w.group_size, ng = cols / gs;
  px->T = 1, px->cols = cols, px->x = x;
  px->interleaved = px->shifted = false;
  px->q16 = true;
  px->stride = (cols + ch - 1) / ch * ch;
  px->xq.resize(size_t(px->stride));
  px->dx.assign(size_t((nb + 15) / 16 * 16 + 16), 0.0f);
  px->gstride = (ng + 16 + 15) / 16 * 16;
  px->gsum.assign(size_t(px->gstride), 0.0f);
  px->xr.resize(size_t(px->stride));
  thread_local std::vector<int16_t> nat, natr;  // xh, xl in natural order
  nat.assign(size_t(px->stride), 0);
  natr.assign(size_t(px->stride), 0);
  auto split = [](__m512 v, __m512 iv, int16_t* h, int16_t* l) {
    const __m512 t = _mm512_mul_ps(v, iv);
    const __m512i hi = _mm512_cvtps_epi32(t);  // |hi| <= 32767
    const __m512 rest = _mm512_sub_ps(t, _mm512_cvtepi32_ps(hi));  // in [-0.5, 0.5]
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h), _mm512_cvtsepi32_epi16(hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(l),
                        _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(rest, _mm512_set1_ps(kLo)))));
  };
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 a = _mm512_loadu_ps(x + b * kBlock), c = _mm512_loadu_ps(x + b * kBlock + 16);
    const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
    const __m512 iv = _mm512_set1_ps(m > 0.0f ? 32767.0f / m : 0.0f);
    px->dx[size_t(b)] = m / 32767.0f;
    split(a, iv, nat.data() + b * kBlock, natr.data() + b * kBlock);
    split(c, iv, nat.data() + b * kBlock + 16, natr.data() + b * kBlock + 16);
    px->gsum[size_t(b * kBlock / gs)] += _mm512_reduce_add_ps(_mm512_add_ps(a, c));
  }
  for (int64_t c0 = 0; c0 < px->stride; c0 += ch) {
    permute_chunk<BITS>(nat.data() + c0, px->xq.data() + c0);
    permute_chunk<BITS>(natr.data() + c0, px->xr.data() + c0);
  }
}

bool prepare_q16(const QWeight& w, const float* x, PreparedX* px) {
  if (!fits(w)) return false;
  if (w.bits == 4) prepare_q16_bits<4>(w, x, px);
  else prepare_q16_bits<8>(w, x, px);
  return true;
}

// Block b's group offset within 16 blocks (bidx) and lane l's block within a chunk (lidx).
template <int BITS>
void lane_indices(int64_t gs, __m512i* bidx, __m512i* lidx) {
  constexpr int kLanesPerBlock = BITS == 4 ? 4 : 8;
  alignas(64) int32_t b[L], l[L];
  for (int i = 0; i < L; ++i) b[i] = int32_t(i * kBlock / gs), l[i] = i / kLanesPerBlock;
  *bidx = _mm512_load_si512(b);
  *lidx = _mm512_load_si512(l);
}

// Integer dots of one 64-byte load of codes with xh and xl (prepared order): per lane, the
// sums of its 8 (4-bit) or 4 (8-bit) codes times xh and times xl; the codes are extracted once.
template <int BITS>
inline void chunk_dot(__m512i v, const int16_t* xh, const int16_t* xl, __m512i* sh, __m512i* sl) {
  const __m512i z = _mm512_setzero_si512();
  if constexpr (BITS == 4) {
    const __m512i m = _mm512_set1_epi16(0x0f);
    const __m512i c0 = _mm512_and_si512(v, m), c1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    const __m512i c2 = _mm512_and_si512(_mm512_srli_epi16(v, 8), m), c3 = _mm512_srli_epi16(v, 12);
    __m512i h0 = _mm512_dpwssd_epi32(z, c0, _mm512_loadu_si512(xh));
    __m512i l0 = _mm512_dpwssd_epi32(z, c0, _mm512_loadu_si512(xl));
    __m512i h1 = _mm512_dpwssd_epi32(z, c1, _mm512_loadu_si512(xh + 32));
    __m512i l1 = _mm512_dpwssd_epi32(z, c1, _mm512_loadu_si512(xl + 32));
    h0 = _mm512_dpwssd_epi32(h0, c2, _mm512_loadu_si512(xh + 64));
    l0 = _mm512_dpwssd_epi32(l0, c2, _mm512_loadu_si512(xl + 64));
    h1 = _mm512_dpwssd_epi32(h1, c3, _mm512_loadu_si512(xh + 96));
    l1 = _mm512_dpwssd_epi32(l1, c3, _mm512_loadu_si512(xl + 96));
    *sh = _mm512_add_epi32(h0, h1), *sl = _mm512_add_epi32(l0, l1);
  } else {
    const __m512i c0 = _mm512_and_si512(v, _mm512_set1_epi16(0xff)), c1 = _mm512_srli_epi16(v, 8);
    *sh = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(z, c0, _mm512_loadu_si512(xh)), c1, _mm512_loadu_si512(xh + 32));
    *sl = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(z, c0, _mm512_loadu_si512(xl)), c1, _mm512_loadu_si512(xl + 32));
  }
}

template <int BITS>
float row_dot_q16(const QWeight& w, int64_t r, const PreparedX& px, float* sb, float* cs,
                 __m512i bidx, __m512i lidx) {
  const int64_t gs = w.group_size, nb = w.cols / kBlock, bytes = int64_t(w.row_bytes());
  const __m512 bias_terms = affine_row_params_v(w, r, px.gsum.data(), sb, nullptr);
  // cs[b] = scale of block b's group * dx_b; zeros past the end.
  int64_t b0 = 0;
  for (; b0 < nb; b0 += L)
    _mm512_storeu_ps(cs + b0, _mm512_mul_ps(_mm512_permutexvar_ps(bidx, _mm512_loadu_ps(sb + b0 * kBlock / gs)),
                                            _mm512_loadu_ps(px.dx.data() + b0)));
  _mm512_storeu_ps(cs + b0, _mm512_setzero_ps());
  // Lane l sums 8 (4-bit) or 4 (8-bit) consecutive codes: block l / 4 or l / 8 of the chunk.
  constexpr int kBlocksPerChunk = BITS == 4 ? 4 : 2;
  const uint8_t* q = w.data + r * bytes;
  const int16_t* xq = px.xq.data();
  const int16_t* xr = px.xr.data();
  constexpr int64_t kXPerChunk = BITS == 4 ? 128 : 64;
  // ah += sum_h * scale * dx, al += sum_l * scale * dx (the xl part, / kLo at the end).
  auto chunk = [&](__m512i v, int64_t j, __m512& ah, __m512& al) {
    const __m512 ls = _mm512_permutexvar_ps(lidx, _mm512_loadu_ps(cs + j * kBlocksPerChunk));
    __m512i sh, sl;
    chunk_dot<BITS>(v, xq + j * kXPerChunk, xr + j * kXPerChunk, &sh, &sl);
    ah = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sh), ls, ah);
    al = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sl), ls, al);
  };
  // Two chunks per step into separate accumulators: the FMA latency would otherwise bound it.
  __m512 h0 = _mm512_setzero_ps(), h1 = h0, l0 = h0, l1 = h0;
  const int64_t full = bytes / 64;
  int64_t j = 0;
  for (; j + 2 <= full; j += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(q + j * 64) + 4096, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(q + j * 64) + 4160, _MM_HINT_T0);
    chunk(_mm512_loadu_si512(q + j * 64), j, h0, l0);
    chunk(_mm512_loadu_si512(q + j * 64 + 64), j + 1, h1, l1);
  }
  if (j < full) chunk(_mm512_loadu_si512(q + j * 64), j, h0, l0), ++j;
  if (j * 64 < bytes) chunk(_mm512_maskz_loadu_epi32(tail_mask((bytes - j * 64) / 4), q + j * 64), j, h1, l1);
  const __m512 acc = _mm512_fmadd_ps(_mm512_add_ps(l0, l1), _mm512_set1_ps(1.0f / kLo), _mm512_add_ps(h0, h1));
  return _mm512_reduce_add_ps(_mm512_add_ps(acc, bias_terms));  // one reduction per row
}

void matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  if (!px.q16) return kernels_avx512().matvec_rows(w, px, y, r0, r1);
  float* sb = scratch(1, params_size(w));
  float* cs = scratch(2, size_t(w.cols / kBlock + 2 * L));
  __m512i bidx, lidx;
  if (w.bits == 4) {
    lane_indices<4>(w.group_size, &bidx, &lidx);
    for (int64_t r = r0; r < r1; ++r) y[r] = row_dot_q16<4>(w, r, px, sb, cs, bidx, lidx);
  } else {
    lane_indices<8>(w.group_size, &bidx, &lidx);
    for (int64_t r = r0; r < r1; ++r) y[r] = row_dot_q16<8>(w, r, px, sb, cs, bidx, lidx);
  }
}

}  // namespace
}  // namespace moeflux::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop

namespace moeflux::cpu {
const Kernels& kernels_avx512_vnni() {
  static const Kernels k = [] {
    Kernels t = kernels_avx512();
    t.prepare_special = prepare_q16;
    t.matvec_rows = matvec_rows;
    return t;
  }();
  return k;
}
}  // namespace moeflux::cpu
