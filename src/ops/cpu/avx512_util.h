// AVX-512 helpers shared by kernels_avx512.cpp and kernels_avx512_vnni.cpp. Included INSIDE
// their `#pragma GCC target` region and anonymous namespace (after `constexpr int L = 16`),
// so each file gets its own copies compiled for its ISA; not a standalone header.
// NOLINT(build/header_guard): deliberately re-included per ISA file.

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

