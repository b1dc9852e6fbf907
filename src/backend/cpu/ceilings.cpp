// Read-bandwidth and FMA-peak measurements (see ceilings.h). The vector loops are compiled
// per ISA with target attributes and picked with cpu_isa_detected(): a ceiling is the
// machine's, whatever level the kernels are set to (a scalar run is compared with it too).
#include "backend/cpu/ceilings.h"

#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"

// g++ 12 flags the intrinsics headers' deliberately undefined vectors once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace moeflux::bench {

namespace {
using Clock = std::chrono::steady_clock;

__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float v : t) s += v;
  return s;
}

float sum_scalar(const float* p, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// 12 independent FMA chains hide the 4-cycle latency at 2 FMAs per cycle.
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(float(j));
  const __m512 m = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12  // without it -O2 keeps a[] in memory and measures half the peak
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, b);
  }
  for (int j = 1; j < 12; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(float(j));
  const __m256 m = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, b);
  }
  alignas(32) float t[8];
  for (int j = 1; j < 12; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  _mm256_store_ps(t, a[0]);
  return t[0];
}

std::atomic<float> g_sink{0};  // keeps the sums alive
}  // namespace

void ReadBuffer::Free::operator()(float* p) const { std::free(p); }

ReadBuffer::ReadBuffer(size_t bytes) {
  // At least 4x the last-level cache the CPU reports, so the passes stream from DRAM.
  const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc > 0) bytes = std::max(bytes, 4 * size_t(llc));
  // Whole 2 MiB pages that ask for transparent huge pages, as resident packs do: fewer TLB
  // misses while reading, and 512x fewer page faults while filling (4x a VM's reported LLC
  // can be 2 GiB, ~10 s of 4 KiB faults).
  constexpr size_t kPage = size_t(2) << 20;
  bytes = (bytes + kPage - 1) / kPage * kPage;
  n_ = bytes / sizeof(float);
  p_.reset(static_cast<float*>(std::aligned_alloc(kPage, bytes)));
  if (!p_) fail("read-bandwidth measurement: cannot allocate ", bytes >> 20, " MiB");
  ::madvise(p_.get(), bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages still work
  std::memset(p_.get(), 0, bytes);  // fault the pages in
}

double read_bandwidth_gbs(size_t bytes, int threads, int reps) {
  const ReadBuffer buf(bytes);
  return read_bandwidth_gbs(buf, threads, reps);
}

double read_bandwidth_gbs(const ReadBuffer& buf, int threads, int reps) {
  const size_t n = buf.floats();
  const float* p = buf.data();
  ThreadPool pool(threads);
  const CpuIsa isa = cpu_isa_detected();
  const int64_t chunk = 1 << 20;  // floats (4 MiB) per task
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pool.parallel_for(int64_t(n) / chunk + 1, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const size_t lo = size_t(c) * chunk, hi = std::min(n, lo + chunk);
        if (lo >= hi) continue;
        const float s = isa >= CpuIsa::Avx512 ? sum_avx512(p + lo, hi - lo)
                        : isa == CpuIsa::Avx2 ? sum_avx2(p + lo, hi - lo)
                                              : sum_scalar(p + lo, hi - lo);
        g_sink.store(s, std::memory_order_relaxed);
      }
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(n * sizeof(float)) / s / 1e9);
  }
  return best;
}

double fma_peak_gflops(int threads) {
  const CpuIsa isa = cpu_isa_detected();
  const int lanes = isa >= CpuIsa::Avx512 ? 16 : isa == CpuIsa::Avx2 ? 8 : 0;
  if (lanes == 0) return 0;
  const int64_t iters = 4'000'000;
  ThreadPool pool(threads);
  double best = 0;
  for (int r = 0; r < 30; ++r) {  // best of 30 (~8 ms each): a shared machine has quiet moments
    const auto t0 = Clock::now();
    pool.parallel_for(threads, 1, [&](int64_t, int64_t) {
      g_sink.store(lanes == 16 ? fma_loop_avx512(iters) : fma_loop_avx2(iters), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(threads) * double(iters) * 12 * lanes * 2 / s / 1e9);
  }
  return best;
}

}  // namespace moeflux::bench
