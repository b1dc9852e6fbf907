// AVX-512 (F/BW/VL/DQ) CPU kernels: fused dequant + dot for every QWeight format. Affine
// 2/4/8-bit codes are decoded with shifts and masks against lane-interleaved x (kernels.h);
// bf16 / f16 / fp8 rows convert 16 values per step (fp8 e4m3 via its f16 bit pattern).
// Tested against the reference in tests/ops/test_ops_cpu.cpp; benchmarked by bench_ops.
#include <immintrin.h>

#include <algorithm>
#include <utility>

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

float dot(const float* a, const float* b, int64_t n) {
  __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    c0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), c0);
    c1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + L), _mm512_loadu_ps(b + i + L), c1);
  }
  for (; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    c0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), c0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(c0, c1));
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i),
                                                    _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// y += a * x, product rounded first (no FMA), as the scalar loop. The empty asm keeps the
// compiler from contracting the multiply and add into an FMA (this file targets FMA).
void add_scaled(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    __m512 p = _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, x + i));
    asm("" : "+v"(p));
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), p));
  }
}

// silu(g) * u = g * u / (1 + e^-g), 16 at a time.
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_mask_storeu_ps(out + i, m, _mm512_div_ps(_mm512_mul_ps(g, u), _mm512_add_ps(one, e)));
  }
}

// 4 rows x NT (1..4) tokens: up to 16 accumulators, 4 + NT loads per 4 NT FMAs (FMA-bound
// at NT = 4). The loops are unrolled by pragma: without it -O2 keeps c[][] on the stack (a
// load and a store around every FMA, measured at a third of the rate).
template <int NT>
void dot4xt(const float* const* w, const float* const* x, int64_t n, float out[4][4]) {
  __m512 c[4][NT];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) c[j][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    __m512 wv[4], xv[NT];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) wv[j] = _mm512_maskz_loadu_ps(m, w[j] + i);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x[t] + i);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) c[j][t] = _mm512_fmadd_ps(wv[j], xv[t], c[j][t]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) out[j][t] = _mm512_reduce_add_ps(c[j][t]);
}

// ---- dense and fp8 rows ----

// Rows are read one after another, so each loop step prefetches the bytes kCodesAhead further
// on (the next rows' once near a row's end): a 2048-column bf16 row is one 4 KiB page, at which
// the hardware prefetchers stop. With the unrolled step (without it -O2 kept c[] on the stack:
// a load and a store around every FMA) the router's 128 x 2048 bf16 matvec on one Zen 5 core took
// 7.7 instead of 18.0-21.6 us in L2 and 20.1-20.9 instead of 26.0-29.1 us from DRAM
// (a9dc2a6:docs/benchmarks.md). The sums are unchanged.
template <DType T>
float dense_row_dot(const uint8_t* row, const float* x, int64_t n) {
  constexpr int64_t es = T == DType::F32 ? 4 : 2;  // bytes per element
  __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
#pragma GCC unroll 4
    for (int64_t b = 0; b < 4 * L * es; b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(row) + i * es + b + kCodesAhead, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      c[j] = _mm512_fmadd_ps(load16<T>(row, i + j * L, 0xffff), _mm512_loadu_ps(x + i + j * L), c[j]);
  }
  for (; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    c[0] = _mm512_fmadd_ps(load16<T>(row, i, m), _mm512_maskz_loadu_ps(m, x + i), c[0]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(c[0], c[1]), _mm512_add_ps(c[2], c[3])));
}

template <DType T>
void dense_row_decode(const uint8_t* row, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += L) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, m, load16<T>(row, i, m));
  }
}

// fp8 block scales: one scale per (block_rows x block_cols); blocks may be partial at edges.
inline float fp8_scale(const QWeight& w, int64_t r, int64_t cb) {
  const int64_t nbc = (w.cols + w.block_cols - 1) / w.block_cols;
  return load_f32(w.sdtype, w.block_scales, size_t((r / w.block_rows) * nbc + cb)) * kFp8Unscale;
}

float fp8_row_dot(const QWeight& w, int64_t r, const float* x) {
  const uint8_t* row = w.data + r * w.cols;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c0 = 0, cb = 0; c0 < w.cols; c0 += w.block_cols, ++cb) {
    const int64_t c1 = std::min(w.cols, c0 + w.block_cols);
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    int64_t c = c0;
    for (; c + 2 * L <= c1; c += 2 * L) {
      b0 = _mm512_fmadd_ps(fp8x16(row + c, 0xffff), _mm512_loadu_ps(x + c), b0);
      b1 = _mm512_fmadd_ps(fp8x16(row + c + L, 0xffff), _mm512_loadu_ps(x + c + L), b1);
    }
    for (; c < c1; c += L) {
      const __mmask16 m = tail_mask(c1 - c);
      b0 = _mm512_fmadd_ps(fp8x16(row + c, m), _mm512_maskz_loadu_ps(m, x + c), b0);
    }
    acc = _mm512_fmadd_ps(_mm512_add_ps(b0, b1), _mm512_set1_ps(fp8_scale(w, r, cb)), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

void fp8_row_decode(const QWeight& w, int64_t r, float* out) {
  const uint8_t* row = w.data + r * w.cols;
  for (int64_t c0 = 0, cb = 0; c0 < w.cols; c0 += w.block_cols, ++cb) {
    const int64_t c1 = std::min(w.cols, c0 + w.block_cols);
    const __m512 s = _mm512_set1_ps(fp8_scale(w, r, cb));
    for (int64_t c = c0; c < c1; c += L) {
      const __mmask16 m = tail_mask(c1 - c);
      _mm512_mask_storeu_ps(out + c, m, _mm512_mul_ps(fp8x16(row + c, m), s));
    }
  }
}

// ---- affine fast path (2 / 4 / 8-bit codes, lane-interleaved x) ----

template <int BITS, int K>
inline __m512 code(__m512i v) {
  constexpr int P = 32 / BITS;
  const __m512i m = _mm512_set1_epi32((1 << BITS) - 1);
  if constexpr (K == 0) return _mm512_cvtepi32_ps(_mm512_and_si512(v, m));
  else if constexpr (K == P - 1) return _mm512_cvtepi32_ps(_mm512_srli_epi32(v, BITS * K));
  else return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, BITS * K), m));
}

// Code K in place (times 2^(BITS*K)), for x prescaled by 2^-(BITS*K): one AND, no shift.
// The top code is shifted down instead, keeping the int32 conversion non-negative.
template <int BITS, int K>
inline __m512 code_shifted(__m512i v) {
  constexpr int P = 32 / BITS;
  if constexpr (K == P - 1) return code<BITS, K>(v);
  else return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(((1 << BITS) - 1) << (BITS * K))));
}

// Rows r + i * stride (i < R) of y = W x, scales / biases of type S, read side by side: R
// streams of codes keep more DRAM lines in flight than one, and each x vector load serves R
// rows (R = 4 is 10-25% faster from DRAM on Zen 5, slower on Intel:
// matvec_row_streams()). Per row: the scales go to its sb slice (padded with zeros for the
// permute) and the bias terms sum_g bias_g * gsum_g are summed aside; the codes are dotted
// chunk by chunk, each chunk's sum scaled by its lanes' group scales, and the bias terms are
// added last. The arithmetic of each row is the same for every R.
template <int BITS, DType S, int R>
void affine_rows_block(const QWeight& w, const PreparedX& px, float* y, int64_t r, int64_t stride, float* sb,
                       __m512i lg) {
  constexpr int P = 32 / BITS, CH = P * L;
  const int64_t words = w.cols / P;
  const float* xs = px.xs.data();
  __m512 bias[R], acc[R];
  const uint32_t* q[R];
  const int64_t sn = start_rows<S, R>(w, r, stride, px.gsum.data(), nullptr, sb, bias, q);
  // The chunks' sums start from zero and take the bias terms at the end (as the VNNI kernel's):
  // begun from start_rows' output, they lived on the stack.
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  GroupCursor gc(CH, w.group_size);
  const int64_t ahead = prefetch_distance(words * 4, R, stride);
  for (int64_t wi = 0, j = 0; wi < words; wi += L, ++j, gc.next()) {
    const __mmask16 tm = tail_mask(words - wi);
    __m512i v[R];
    __m512 c[R][2];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      // Software prefetch whole blocks ahead: the decode is heavy enough that the hardware
      // prefetcher alone leaves DRAM idle (measured: +50% on cold 4-bit rows).
      _mm_prefetch(reinterpret_cast<const char*>(q[i] + wi) + ahead, _MM_HINT_T0);
      v[i] = words - wi >= L ? _mm512_loadu_si512(q[i] + wi) : _mm512_maskz_loadu_epi32(tm, q[i] + wi);
      c[i][0] = c[i][1] = _mm512_setzero_ps();
    }
    const float* xc = xs + j * CH;
    [&]<int... K>(std::integer_sequence<int, K...>) {
      ([&] {
        const __m512 xv = _mm512_loadu_ps(xc + K * L);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) c[i][K & 1] = _mm512_fmadd_ps(code_shifted<BITS, K>(v[i]), xv, c[i][K & 1]);
      }(), ...);
    }(std::make_integer_sequence<int, P>{});
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512 sv = _mm512_permutexvar_ps(lg, _mm512_loadu_ps(sb + i * sn + gc.g));
      acc[i] = _mm512_fmadd_ps(_mm512_add_ps(c[i][0], c[i][1]), sv, acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) y[r + i * stride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], bias[i]));  // one reduction per row
}

// Row r decoded (w = q * s + b) in the lane-interleaved order of the prepared x.
template <int BITS>
void affine_row_decode(const QWeight& w, int64_t r, float* out, float* sb, float* bb, __m512i lg) {
  constexpr int P = 32 / BITS, CH = P * L;
  const int64_t gs = w.group_size, words = w.cols / P;
  affine_row_params(w, r, nullptr, sb, bb);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(w.data + r * int64_t(w.row_bytes()));
  GroupCursor gc(CH, gs);
  for (int64_t wi = 0, j = 0; wi < words; wi += L, ++j, gc.next()) {
    const __m512i v = words - wi >= L ? _mm512_loadu_si512(q + wi) : _mm512_maskz_loadu_epi32(tail_mask(words - wi), q + wi);
    const __m512 sv = _mm512_permutexvar_ps(lg, _mm512_loadu_ps(sb + gc.g));
    const __m512 bv = _mm512_permutexvar_ps(lg, _mm512_loadu_ps(bb + gc.g));
    float* oc = out + j * CH;
    [&]<int... K>(std::integer_sequence<int, K...>) {
      (_mm512_storeu_ps(oc + K * L, _mm512_fmadd_ps(code<BITS, K>(v), sv, bv)), ...);
    }(std::make_integer_sequence<int, P>{});
  }
}

// Row r of a 4-bit group-lane weight decoded in its own order (for_each_interleaved_lanes):
// each chunk's lane l belongs to group 16 b + l, so a block's 16 scales load as they are.
void lanes_row_decode(const QWeight& w, int64_t r, float* out, float* sb, float* bb) {
  const int64_t ng = w.cols / w.group_size, wg = w.group_size / 8;
  affine_row_params(w, r, nullptr, sb, bb);  // padded with zeros: a partial block's lanes decode to 0
  const uint32_t* q = reinterpret_cast<const uint32_t*>(w.data + r * int64_t(w.row_bytes()));
  float* oc = out;
  for (int64_t b = 0; 16 * b < ng; ++b) {
    const int64_t nb = std::min<int64_t>(L, ng - 16 * b);
    const __mmask16 mb = tail_mask(nb);
    const __m512 sv = _mm512_loadu_ps(sb + 16 * b), bv = _mm512_loadu_ps(bb + 16 * b);
    const uint32_t* qb = q + 16 * b * wg;
    for (int64_t t = 0; t < wg; ++t, oc += 8 * L) {
      const __m512i v = nb == L ? _mm512_loadu_si512(qb + t * L) : _mm512_maskz_loadu_epi32(mb, qb + t * nb);
      [&]<int... K>(std::integer_sequence<int, K...>) {
        (_mm512_storeu_ps(oc + K * L, _mm512_fmadd_ps(code<4, K>(v), sv, bv)), ...);
      }(std::make_integer_sequence<int, 8>{});
    }
  }
}

template <int BITS>
void affine_matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  MF_ASSERT(px.shifted);  // PRECOND: x prepared for in-place codes
  const __m512i lg = lane_groups<32 / BITS>(w.group_size);
  for_row_blocks(w, r0, r1, [&]<DType S, int R>(int64_t r, int64_t stride, float* sb) {
    affine_rows_block<BITS, S, R>(w, px, y, r, stride, sb, lg);
  });
}

void matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
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

// Row r of w as f32 in the layout of px (interleaved or natural); returns its length.
int64_t decode_row(const QWeight& w, const PreparedX& px, int64_t r, float* out, float* sb,
                   float* bb) {
  MF_ASSERT(!px.shifted);  // PRECOND: decoded rows hold true codes
  if (px.group_lanes) {
    MF_ASSERT(w.group_lanes);  // PRECOND: x prepared for this weight's layout
    lanes_row_decode(w, r, out, sb, bb);
    return px.stride;
  }
  // prepare_x lays x out in the group-lane order for every such weight at 16 lanes
  MF_ASSERT(!(px.interleaved && w.group_lanes));
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
    for (int64_t t = 0; t < px.T; t += 4) {
      const int nt = int(std::min<int64_t>(4, px.T - t));
      const float* xs[4];
      for (int u = 0; u < 4; ++u) xs[u] = px.token(t + std::min(u, nt - 1));
      float out[4][4];
      switch (nt) {
        case 1: dot4xt<1>(rows, xs, n, out); break;
        case 2: dot4xt<2>(rows, xs, n, out); break;
        case 3: dot4xt<3>(rows, xs, n, out); break;
        default: dot4xt<4>(rows, xs, n, out); break;
      }
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
const Kernels& kernels_avx512() {
  static const Kernels k{L,     nullptr,    matvec_rows, matmul_rows, decode_row, dot,
                         axpy,  add_scaled, swiglu,      attend_avx512, nullptr,  nullptr,
                         nullptr, nullptr, nullptr};
  return k;
}
}  // namespace moeflux::cpu
