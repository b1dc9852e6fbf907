// AVX2 helpers shared by kernels_avx2.cpp, kernels_avx2_int.cpp and attend_avx2.cpp. Included INSIDE their
// `#pragma GCC target` region and anonymous namespace, so each file gets its own copies compiled
// for the ISA (after core/dtype.h); not a standalone header.
// NOLINT(build/header_guard): deliberately re-included per ISA file.

// The sum of v's 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 elements from element i on (f32, f16 or bf16) as f32: dense rows, scales, biases.
template <DType T>
inline __m256 load8(const uint8_t* base, int64_t i) {
  if constexpr (T == DType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(base) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + 2 * i));
  if constexpr (T == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Lanes [0, n) set (n clamped to [0, 8]): the mask of maskload / maskstore.
inline __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The min(n, 8) floats at p (the rest zero), and their store: a plain load / store when n >= 8
// (masked stores are slow on AMD: ~12 cycles on Zen 3), masked only at a tail.
inline __m256 loadn(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(n));
}
inline void storen(float* p, __m256 v, int64_t n) {
  if (n >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, tail_mask(n), v);
}

// e^x for x <= 88 (clamped to [-87.3, 88]), exp_poly.h's reduction and polynomial, times 2^n
// through the exponent bits (n in [-126, 127]). Within ~2 ulps of expf.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x));
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
