// AVX-512 helpers shared by kernels_avx512.cpp and kernels_avx512_vnni.cpp. Included INSIDE
// their `#pragma GCC target` region and anonymous namespace (after `constexpr int L = 16`),
// so each file gets its own copies compiled for its ISA; not a standalone header.
// NOLINT(build/header_guard): deliberately re-included per ISA file.

// v, pinned in a register: the compiler otherwise folds a load of codes into each instruction
// that uses them (the AND and the shift of a 4-bit chunk: two loads of the same line). Reading
// each 64-byte line of codes from DRAM twice ran a 4-row loop at 25 vs 41 GB/s on one Zen 5
// core (a9dc2a6:docs/benchmarks.md).
inline __m512i in_register(__m512i v) {
  asm("" : "+v"(v));
  return v;
}

inline __mmask16 tail_mask(int64_t n) { return n >= L ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }

// e4m3fn -> f32 / 256: the 7 low bits shifted into an f16 (exponent bias 15 vs 7) give the
// value times 2^-8 for normals and subnormals alike; S.1111.111 (NaN) is patched.
inline __m512 fp8x16(const uint8_t* p, __mmask16 m) {
  const __m256i h = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, p));
  const __m256i em = _mm256_and_si256(h, _mm256_set1_epi16(0x7f));
  __m256i bits = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x80)), 8),
                                 _mm256_slli_epi16(em, 7));
  const __mmask16 nan = _mm256_cmpeq_epi16_mask(em, _mm256_set1_epi16(0x7f));
  bits = _mm256_mask_mov_epi16(bits, nan, _mm256_set1_epi16(0x7e00));
  return _mm512_cvtph_ps(bits);
}
constexpr float kFp8Unscale = 256.0f;

// 16 values at element i of a float tensor of type T (F32 / F16 / BF16 / F8_E4M3 / 256).
template <DType T>
inline __m512 load16(const uint8_t* base, int64_t i, __mmask16 m) {
  if constexpr (T == DType::F32) return _mm512_maskz_loadu_ps(m, base + 4 * i);
  if constexpr (T == DType::F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, base + 2 * i));
  if constexpr (T == DType::BF16)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, base + 2 * i)), 16));
  if constexpr (T == DType::F8_E4M3) return fp8x16(base + i, m);
}

inline __m512 load16_dyn(DType t, const uint8_t* base, int64_t i, __mmask16 m) {
  switch (t) {
    case DType::F16: return load16<DType::F16>(base, i, m);
    case DType::BF16: return load16<DType::BF16>(base, i, m);
    default: return load16<DType::F32>(base, i, m);
  }
}

// e^x for x in [-87.3, 88.7] (clamped outside), exp_poly.h's reduction and polynomial, times 2^n
// by scalef. Within ~2 ulps of expf.
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x));
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  return _mm512_scalef_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f))), n);
}

// Affine fast path: lane l of a chunk starts at code l * P; its group offset within the chunk
// (P * L codes; 0 when a group spans the chunk).
template <int P>
inline __m512i lane_groups(int64_t gs) {
  alignas(64) int32_t idx[L];
  for (int l = 0; l < L; ++l) idx[l] = gs < P * L ? int32_t(l * P / gs) : 0;
  return _mm512_load_si512(idx);
}

// Rows [r0, r1) of an affine matvec through block.template operator()<S, R>(r, stride, sb):
// rows r, r + stride, ..., r + (R - 1) * stride side by side, R = 4 where
// matvec_row_streams(w.group_lanes) says so, then single rows; S is w's scale type and sb per-thread
// scratch for R rows' scales. Four rows side by side are four streams of codes: adjacent rows
// interleave them inside each 4 KiB page. Where matvec_row_spread() allows and each quarter of
// the range holds at least kSpreadMinBytes of codes, the four rows are r0 + k + {0, 1, 2, 3} * q
// (q = a quarter): four sequential streams. With the single load of codes, a paired harness on
// Zen 5 gained 1-13 points of its read ceiling per op from the two together, neither
// alone; the model's decode did not show it through a VM's noise (a9dc2a6:docs/benchmarks.md).
// Shorter quarters restart the streams too often. Each row's arithmetic is the same
// either way.
constexpr int64_t kSpreadMinBytes = 16 << 10;
template <typename Block>
inline void for_row_blocks(const QWeight& w, int64_t r0, int64_t r1, Block&& block) {
  float* sb = scratch(1, size_t(4 * (w.cols / w.group_size + 2 * L)));
  auto rows = [&]<DType S>() {
    int64_t r = r0;
    if (matvec_row_streams(w.group_lanes) == 4) {
      const int64_t q = (r1 - r0) / 4;
      if (matvec_row_spread() && q * int64_t(w.row_bytes()) >= kSpreadMinBytes) {
        for (int64_t k = 0; k < q; ++k) block.template operator()<S, 4>(r0 + k, q, sb);
        r = r0 + 4 * q;
      }
      for (; r + 4 <= r1; r += 4) block.template operator()<S, 4>(r, 1, sb);
    }
    for (; r < r1; ++r) block.template operator()<S, 1>(r, 1, sb);
  };
  switch (w.sdtype) {
    case DType::F16: return rows.template operator()<DType::F16>();
    case DType::BF16: return rows.template operator()<DType::BF16>();
    default: return rows.template operator()<DType::F32>();
  }
}

// Bytes ahead of each row's code reads that the affine matvec prefetches: whole blocks of R
// rows ahead, at least matvec_codes_ahead(). Rows of a block are read side by side, so a distance
// shorter than the block lands in rows of the same block, which are being read already: with
// 4 KiB, 4096-column rows (2 KiB each) were half unprefetched (attn_o in bench_ops: 1 thread
// 21 -> 30 GB/s, 2 threads 36 -> 50 GB/s on a 2-vCPU Zen 5 VM with whole blocks).
// Spread rows (stride > 1) each run on through the rows after them: matvec_codes_ahead() itself.
// kCodesAhead: the single-row float loop's distance (kernels_avx512.cpp).
constexpr int64_t kCodesAhead = 4096;
inline int64_t prefetch_distance(int64_t row_bytes, int R, int64_t stride) {
  const int64_t ahead = matvec_codes_ahead();
  if (stride > 1 || ahead == 0) return ahead;
  const int64_t block = row_bytes * R;
  return (ahead + block - 1) / block * block;
}

// The per-row start of the affine matvec kernels: row r's scales (times x's step dx_g per
// group, when dx is given) into sb, padded with 16 zeros for the lane permutes, and its bias
// terms sum_g bias_g * gsum_g returned as unreduced lanes. sbytes: bytes of one row's scales.
template <DType S>
inline __m512 row_scales_bias(const QWeight& w, int64_t r, int64_t sbytes, const float* gsum, const float* dx,
                              float* sb) {
  const int64_t ng = w.cols / w.group_size;
  const uint8_t *sp = w.scales + r * sbytes, *bp = w.biases + r * sbytes;
  __m512 acc = _mm512_setzero_ps();
  int64_t g = 0;
  for (; g < ng; g += L) {
    const __mmask16 m = tail_mask(ng - g);
    const __m512 sv = load16<S>(sp, g, m);
    _mm512_storeu_ps(sb + g, dx ? _mm512_mul_ps(sv, _mm512_loadu_ps(dx + g)) : sv);
    acc = _mm512_fmadd_ps(load16<S>(bp, g, m), _mm512_loadu_ps(gsum + g), acc);
  }
  _mm512_storeu_ps(sb + g, _mm512_setzero_ps());
  return acc;
}

// The start of a block of R affine rows r + i * stride: the scales and biases of the rows
// matvec_params_ahead() further on in each row's stream prefetched (+5-11% decode on Zen 5,
// kernels.h), then per row its scales (times dx) into sb at i * sn, its bias terms into
// bias[i] (unreduced lanes; the callers add them after the codes' sums, which then stay in
// registers) and its codes' address into q[i]. Returns sn, the floats of sb per row.
template <DType S, int R>
inline int64_t start_rows(const QWeight& w, int64_t r, int64_t stride, const float* gsum, const float* dx, float* sb,
                          __m512* bias, const uint32_t** q) {
  const int64_t ng = w.cols / w.group_size, sn = ng + 2 * L, words = w.cols * w.bits / 32;
  const int64_t sbytes = ng * int64_t(sizeof(uint16_t)) * (S == DType::F32 ? 2 : 1);
  prefetch_block_params(w, r, R, stride, size_t(sbytes));
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    bias[i] = row_scales_bias<S>(w, r + i * stride, sbytes, gsum, dx, sb + i * sn);
    q[i] = reinterpret_cast<const uint32_t*>(w.data) + (r + i * stride) * words;
  }
  return sn;
}

// Scales of row r into sb and (if bb) biases into bb, each padded with >= 16 zeros after
// the n_groups values; returns the lanes of sum_g bias_g * gsum_g (0 without gsum), unreduced.
inline __m512 affine_row_params_v(const QWeight& w, int64_t r, const float* gsum, float* sb, float* bb) {
  const int64_t ng = w.cols / w.group_size;
  __m512 acc = _mm512_setzero_ps();
  int64_t g = 0;
  for (; g < ng; g += L) {
    const __mmask16 m = tail_mask(ng - g);
    const __m512 bv = load16_dyn(w.sdtype, w.biases, r * ng + g, m);
    _mm512_storeu_ps(sb + g, load16_dyn(w.sdtype, w.scales, r * ng + g, m));
    if (bb) _mm512_storeu_ps(bb + g, bv);
    if (gsum) acc = _mm512_fmadd_ps(bv, _mm512_loadu_ps(gsum + g), acc);
  }
  _mm512_storeu_ps(sb + g, _mm512_setzero_ps());
  if (bb) _mm512_storeu_ps(bb + g, _mm512_setzero_ps());
  return acc;
}
// The same, reduced: sum_g bias_g * gsum_g.
inline float affine_row_params(const QWeight& w, int64_t r, const float* gsum, float* sb, float* bb) {
  return _mm512_reduce_add_ps(affine_row_params_v(w, r, gsum, sb, bb));
}
inline size_t params_size(const QWeight& w) { return size_t(w.cols / w.group_size + 2 * L); }


// acc plus one scale group's term of the VNNI integer dots: the three digit sums (s0: the 2^16
// digit, then 2^8, then 1) times scale * dx, plus bias * gsum. S1 * 256 + S2 is exact in int32
// (|S_k| < 2^18) and rounded once by its conversion, as fma(cvt(S1), 256, cvt(S2)) rounds it
// once: every kernel that uses this gets the same bits.
inline __m512 add_digit_sums(__m512 acc, __m512i s0, __m512i s1, __m512i s2, __m512 sv, __m512 dxv, __m512 bv,
                             __m512 gsv) {
  const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(s1, 8), s2);
  const __m512 tt = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(low));
  return _mm512_fmadd_ps(bv, gsv, _mm512_fmadd_ps(tt, _mm512_mul_ps(sv, dxv), acc));
}
