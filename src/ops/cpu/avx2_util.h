// AVX2 helpers shared by kernels_avx2.cpp and kernels_avx2_int.cpp. Included INSIDE their
// `#pragma GCC target` region and anonymous namespace, so each file gets its own copies compiled
// for the ISA; not a standalone header.
// NOLINT(build/header_guard): deliberately re-included per ISA file.

// The sum of v's 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
