// Stream-compute probe (a developer tool; needs AVX-512 VNNI to run): does a streaming loop's rate from DRAM fall with
// the vector work per 64-byte line (a sum of memory time and compute time), and what does a
// software prefetch do to it? Each thread streams its own slice of a 2 GiB buffer (2 MiB
// pages), one sequential stream; per line: a load, then W dependent-free vpdpbusd (0: a plain
// add), and optionally a prefetch D bytes ahead (T0 or T1). Prints the median GB/s of 5 passes.
// Built as build/dev/stream_compute_probe (scripts/device-check.sh's `ladder` step builds it by hand).
// Run: stream_compute_probe THREADS [SLICE_KIB REPEATS] (with a slice: each thread streams its own small
// slice REPEATS times, from cache: the loop's compute-bound rate)
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

static std::atomic<int> sink{0};

template <int W, int HINT>  // HINT: 0 none, 1 T0, 2 T1
__attribute__((noinline)) int stream(const uint8_t* p, size_t n, size_t ahead) {
  __m512i acc[4][3];  // independent chains: throughput, not latency, bounds the vector work
  for (auto& a : acc)
    for (auto& x : a) x = _mm512_setzero_si512();
  const __m512i d = _mm512_set1_epi8(3), m = _mm512_set1_epi8(0x0f);
  for (size_t i = 0; i < n; i += 256) {
    if constexpr (HINT == 1) _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead), _MM_HINT_T0),
                             _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 128), _MM_HINT_T0);
    if constexpr (HINT == 2) _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead), _MM_HINT_T1),
                             _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 128), _MM_HINT_T1);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      if constexpr (HINT == 1) { if (k == 1 || k == 3) _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 64 * k), _MM_HINT_T0); }
      if constexpr (HINT == 2) { if (k == 1 || k == 3) _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 64 * k), _MM_HINT_T1); }
      __m512i v = _mm512_load_si512(p + i + 64 * k);
      asm volatile("" : "+v"(v));
      if constexpr (W == 0) {
        acc[k][0] = _mm512_add_epi32(acc[k][0], v);
      } else {
        const __m512i lo = _mm512_and_si512(v, m), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
#pragma GCC unroll 12
        for (int w = 0; w < W; ++w) acc[k][w % 3] = _mm512_dpbusd_epi32(acc[k][w % 3], (w & 1) ? hi : lo, d);
      }
    }
  }
  __m512i t = _mm512_setzero_si512();
  for (auto& a : acc)
    for (auto& x : a) t = _mm512_add_epi32(t, x);
  return _mm512_reduce_add_epi32(t);
}

using Fn = int (*)(const uint8_t*, size_t, size_t);

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 16;
  const size_t bytes = size_t(2) << 30;
  uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(size_t(2) << 20, bytes));
  madvise(buf, bytes, MADV_HUGEPAGE);
  std::memset(buf, 1, bytes);
  struct V {
    const char* name;
    Fn fn;
    size_t ahead;
  };
  const V vs[] = {
      {"read", stream<0, 0>, 0},          {"read+T0@4K", stream<0, 1>, 4096}, {"read+T1@4K", stream<0, 2>, 4096},
      {"read+T0@1K", stream<0, 1>, 1024}, {"dp2", stream<2, 0>, 0},           {"dp6", stream<6, 0>, 0},
      {"dp12", stream<12, 0>, 0},         {"dp6+T0@4K", stream<6, 1>, 4096},  {"dp6+T0@1K", stream<6, 1>, 1024},
      {"dp6+T1@4K", stream<6, 2>, 4096},  {"dp6+T0@16K", stream<6, 1>, 16384}, {"dp2+T0@4K", stream<2, 1>, 4096},
      {"dp12+T0@4K", stream<12, 1>, 4096},
  };
  const size_t small = argc > 3 ? size_t(std::atoi(argv[2])) << 10 : 0;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 1;
  const size_t slice = small ? small + 16384 + 4096 : bytes / size_t(T) / 4096 * 4096;
  std::printf("threads %d, slice %zu KiB x %d\n", T, (small ? small : slice) >> 10, reps);
  for (int round = 0; round < 2; ++round)
    for (const V& v : vs) {
      std::vector<double> r;
      for (int pass = 0; pass < 5; ++pass) {
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        std::vector<std::thread> th;
        for (int t = 0; t < T; ++t)
          th.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load()) {
            }
            for (int k = 0; k < reps; ++k)
              sink.fetch_add(v.fn(buf + size_t(t) * slice, small ? small : slice - v.ahead - 512, v.ahead));
          });
        while (ready.load() < T) {
        }
        const auto t0 = std::chrono::steady_clock::now();
        go.store(true);
        for (auto& x : th) x.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.push_back(double(small ? small : slice) * T * reps / s / 1e9);
      }
      std::sort(r.begin(), r.end());
      std::printf("round %d %-12s median %6.1f GB/s (min %6.1f max %6.1f)\n", round, v.name, r[2], r[0], r[4]);
      std::fflush(stdout);
    }
}
