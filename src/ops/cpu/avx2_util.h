// AVX2 helpers shared by kernels_avx2.cpp and kernels_avx2_int.cpp. Included INSIDE their
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
