// Kernel ladder probe (a developer tool; needs AVX-512 VNNI to run): where
// between a bare streaming loop and the engine's decode regions the read rate is lost. One
// 2 MiB-page arena holds a 4-bit group-lane weight of 2048 columns (codes, then bf16 scales and
// biases: 1152 bytes a row, ~1.8 GB in all, far beyond the caches). Modes, each on THREADS threads:
//   loop    each thread streams its slice of the codes: a load, 6 vpdpbusd and a T0 prefetch
//           4 KiB ahead per 64 bytes (the stream-compute probe's dp6+T0@4K);
//   slices  each thread (std::thread) runs the engine's VNNI matvec_rows once over its own
//           slice of rows (four spread streams, the kernel's own prefetches; no pool);
//   chunks  the same in chunks of CHUNK_KIB (default 64) of codes, one after another;
//   region  the engine's matvec() over the whole weight: one region of the pool;
//   hot     each thread's matvec_rows over its first 128 rows, 2000 times: from L2, the
//           kernel's compute rate;
//   decode  matvec() over consecutive 5120-row views (5.9 MB, a layer's q/k/v), region after
//           region, as a decode runs them.
//   decodeprep  decode without the x prepare per region (x prepared once; the engine's guided
//           chunks, parallel_for_guided, at least 32 rows);
//   decodeslab  the same in one slab of rows per thread;
//   decodeshuf  decode with the views in a scattered order (no region continues the last one's stream);
//   persist the views in one parallel region: guided chunks per view, a spin barrier between views.
//   decodeman  decodeprep with the chunks claimed by hand (the control for decodepf);
//   decodepf   decodeman whose threads, out of chunks, prefetch the next view (PF_* settings below);
//   decodeown  decodeman with each thread's first chunk its own, which it prefetches when out of work;
//   decodeshared / decoderot / decodepriv  decodeprep with x prepared per region: into one shared px,
//           into 32 px in turn, or by each thread into its own.
// Prints the median and best GB/s (codes + scales + biases; codes only for loop) of 5 passes.
// Built as build/dev/kernel_ladder_probe (scripts/device-check.sh's `ladder` step builds it by hand).
// Run: kernel_ladder_probe THREADS MODE [CHUNK_KIB]   (MOEFLUX_* settings apply to the engine's modes)
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "format/qweight.h"

using namespace moeflux;
static std::atomic<int> sink{0};

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) int loop_dp6(const uint8_t* p, size_t n) {
  __m512i acc[4][3];
  for (auto& a : acc)
    for (auto& x : a) x = _mm512_setzero_si512();
  const __m512i d = _mm512_set1_epi8(3), m = _mm512_set1_epi8(0x0f);
  for (size_t i = 0; i < n; i += 256) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096 + 64 * k), _MM_HINT_T0);
      __m512i v = _mm512_load_si512(p + i + 64 * k);
      asm volatile("" : "+v"(v));
      const __m512i lo = _mm512_and_si512(v, m), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
#pragma GCC unroll 6
      for (int w = 0; w < 6; ++w) acc[k][w % 3] = _mm512_dpbusd_epi32(acc[k][w % 3], (w & 1) ? hi : lo, d);
    }
  }
  __m512i t = _mm512_setzero_si512();
  for (auto& a : acc)
    for (auto& x : a) t = _mm512_add_epi32(t, x);
  return _mm512_reduce_add_epi32(t);
}

// fn(t) on T std::threads started together; returns the seconds from the start to the last end.
template <typename F>
double on_threads(int T, F&& fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> th;
  for (int t = 0; t < T; ++t)
    th.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      fn(t);
    });
  while (ready.load() < T) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true);
  for (auto& x : th) x.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The engine's guided chunks over n rows on T threads: each (rows left) / 2T, in multiples of
// 4, at least 32. Returns the chunks' starts and n.
std::vector<int64_t> guided_bounds(int64_t n, int T) {
  std::vector<int64_t> at{0};
  while (at.back() < n) at.push_back(std::min(n, at.back() + std::max<int64_t>(32, ((n - at.back()) / (2 * T) + 3) / 4 * 4)));
  return at;
}

// Prefetch of [p, p + bytes), a line at a time, with hint 0 (T0), 1 (T1) or 2 (T2).
void prefetch_lines(const uint8_t* p, int64_t bytes, int hint) {
  for (int64_t o = 0; o < bytes; o += 64) {
    const char* q = reinterpret_cast<const char*>(p + o);
    if (hint == 0) _mm_prefetch(q, _MM_HINT_T0);
    else if (hint == 2) _mm_prefetch(q, _MM_HINT_T2);
    else _mm_prefetch(q, _MM_HINT_T1);
  }
}

// PF_HINT (default 1) and PF_MAX_KB in bytes (default 1 GiB: no cap) of the prefetching modes.
int pf_hint() { return std::getenv("PF_HINT") ? std::atoi(std::getenv("PF_HINT")) : 1; }
int64_t pf_max_bytes() { return (std::getenv("PF_MAX_KB") ? std::atoll(std::getenv("PF_MAX_KB")) : 1 << 20) << 10; }

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: ladder THREADS MODE [CHUNK_KIB]\n"), 2;
  const int T = std::atoi(argv[1]);
  const std::string mode = argv[2];
  const int64_t chunk_kib = argc > 3 ? std::atoi(argv[3]) : 64;
  const int64_t cols = 2048, gs = 64, code_b = cols / 2, par_b = cols / gs * 2;
  const int64_t rows = 1600 * 1024;
  const size_t bytes = size_t(rows) * size_t(code_b + 2 * par_b);
  const size_t alloc = (bytes + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
  uint8_t* arena = static_cast<uint8_t*>(std::aligned_alloc(size_t(2) << 20, alloc));
  madvise(arena, alloc, MADV_HUGEPAGE);
  for (size_t i = 0; i < bytes; ++i) arena[i] = uint8_t(i * 2654435761u >> 13);
  uint16_t* params = reinterpret_cast<uint16_t*>(arena + rows * code_b);
  for (int64_t i = 0; i < 2 * rows * (cols / gs); ++i) params[i] = 0x3c00 + uint16_t(i % 64);  // bf16 ~ 0.008
  QWeight w;
  w.format = WFormat::Affine, w.dtype = DType::U32, w.rows = rows, w.cols = cols, w.bits = 4, w.group_size = int(gs);
  w.sdtype = DType::BF16, w.group_lanes = true;
  w.data = arena, w.scales = arena + rows * code_b, w.biases = arena + rows * (code_b + par_b);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (int64_t i = 0; i < cols; ++i) x[size_t(i)] = float((i * 37) % 101 - 50) / 50.0f;
  set_cpu_threads(T);
  const cpu::Kernels& k = cpu::kernels_avx512_vnni();
  const cpu::Kernels& k_ = k;
  cpu::PreparedX px;
  if (!k.prepare_special(w, x.data(), &px)) return std::fprintf(stderr, "x not prepared\n"), 1;
  auto view = [&](int64_t r0, int64_t n) {  // rows [r0, r0 + n) as a weight of their own
    QWeight v = w;
    v.rows = n, v.data = w.data + r0 * code_b, v.scales = w.scales + r0 * par_b, v.biases = w.biases + r0 * par_b;
    return v;
  };
  const int64_t slice = rows / T;
  std::vector<double> r;
  for (int pass = 0; pass < 6; ++pass) {
    double s = 0, b = double(bytes);
    if (mode == "loop") {
      const size_t sl = size_t(rows * code_b / T) / 4096 * 4096;
      s = on_threads(T, [&](int t) { sink.fetch_add(loop_dp6(arena + size_t(t) * sl, sl - 8192)); });
      b = double(sl) * T;
    } else if (mode == "slices") {
      s = on_threads(T, [&](int t) { k.matvec_rows(w, px, y.data(), t * slice, (t + 1) * slice); });
    } else if (mode == "chunks") {
      const int64_t cr = chunk_kib * 1024 / code_b;
      s = on_threads(T, [&](int t) {
        for (int64_t r0 = t * slice; r0 < (t + 1) * slice; r0 += cr)
          k.matvec_rows(w, px, y.data(), r0, std::min((t + 1) * slice, r0 + cr));
      });
    } else if (mode == "hot") {  // the kernel's compute rate: 128 rows (147 KB) per thread, from L2
      const int reps = 2000;
      s = on_threads(T, [&](int t) {
        for (int k = 0; k < reps; ++k) k_.matvec_rows(w, px, y.data(), t * slice, t * slice + 128);
      });
      b = double(reps) * T * 128 * double(code_b + 2 * par_b);
    } else if (mode == "region") {
      const auto t0 = std::chrono::steady_clock::now();
      matvec(w, x.data(), y.data());
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else if (mode == "decode") {
      const int64_t n = 5120;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t r0 = 0; r0 + n <= rows; r0 += n) {
        const QWeight v = view(r0, n);
        matvec(v, x.data(), y.data() + r0);
      }
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b = double(rows / n * n) * double(code_b + 2 * par_b);
    } else if (mode == "decodeshuf") {
      // decode's regions in a scattered order (view i * 97 mod views): no region starts where the
      // last one ended, as in the engine, where each region reads another weight.
      const int64_t n = 5120, views = rows / n;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < views; ++i) {
        const int64_t r0 = (i * 97 % views) * n;
        const QWeight v = view(r0, n);
        matvec(v, x.data(), y.data() + r0);
      }
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b = double(views * n) * double(code_b + 2 * par_b);
    } else if (mode == "decodeprep" || mode == "decodeslab") {
      // decode's regions without the per-region x prepare (x prepared once): guided chunks as
      // the engine's (at least 32 rows, multiples of 4) or one slab per thread. VIEW_ROWS sets
      // the view's rows (default 5120: the rate against a region's size).
      const int64_t n = std::getenv("VIEW_ROWS") ? std::max(64, std::atoi(std::getenv("VIEW_ROWS"))) : 5120;
      ThreadPool& pool = cpu_thread_pool();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t r0 = 0; r0 + n <= rows; r0 += n) {
        const QWeight v = view(r0, n);
        float* yv = y.data() + r0;
        auto fn = [&](int64_t lo, int64_t hi) { k_.matvec_rows(v, px, yv, lo, hi); };
        if (mode == "decodeprep") pool.parallel_for_guided(n, 32, 4, fn);
        else pool.parallel_for(n, (n / T + 3) / 4 * 4, fn);
      }
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b = double(rows / n * n) * double(code_b + 2 * par_b);
    } else if (mode == "decodeman" || mode == "decodepf") {
      // decode's regions (one pool region per view, x prepared once) with the
      // guided chunks claimed by hand; decodepf: a thread that finds no chunk left prefetches the
      // NEXT view's lines (codes, scales, biases; 4 KiB of codes a claim from a shared cursor) until
      // every thread has run out of chunks. PF_HINT=0/1/2 (T0/T1/T2, default 1); PF_ORDER=chunks:
      // the cursor walks 4 KiB unit j of every first-round chunk start before unit j + 1 (so that
      // each of the next region's first chunks starts warm), else the view in order; PF_MAX_KB: cap
      // per view (default the whole view).
      const int64_t n = 5120, views = rows / n;
      const int hint = pf_hint();
      const bool by_chunks = std::getenv("PF_ORDER") && std::string(std::getenv("PF_ORDER")) == "chunks";
      const int64_t pf_max = pf_max_bytes();
      const std::vector<int64_t> at = guided_bounds(n, T);
      const int64_t nch = int64_t(at.size()) - 1;
      // The prefetch units of a view: row ranges of 4 rows (4 KiB of codes), in cursor order.
      std::vector<int64_t> units;
      if (by_chunks) {
        for (int64_t j = 0;; ++j) {
          bool any = false;
          for (int64_t c = 0; c < std::min<int64_t>(nch, T); ++c)
            if (at[size_t(c)] + 4 * j < at[size_t(c) + 1]) units.push_back(at[size_t(c)] + 4 * j), any = true;
          if (!any) break;
        }
        for (int64_t r = at[size_t(std::min<int64_t>(nch, T))]; r < n; r += 4) units.push_back(r);
      } else {
        for (int64_t r = 0; r < n; r += 4) units.push_back(r);
      }
      const int64_t max_units = std::min<int64_t>(int64_t(units.size()), pf_max / (4 * code_b));
      std::vector<std::atomic<int64_t>> next(static_cast<size_t>(views)), cursor(static_cast<size_t>(views));
      std::vector<std::atomic<int>> out_of_work(static_cast<size_t>(views));
      for (int64_t i = 0; i < views; ++i) next[size_t(i)].store(0), cursor[size_t(i)].store(0), out_of_work[size_t(i)].store(0);
      ThreadPool& pool = cpu_thread_pool();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t vi = 0; vi < views; ++vi) {
        const QWeight v = view(vi * n, n);
        float* yv = y.data() + vi * n;
        pool.parallel_for(T, 1, [&](int64_t, int64_t) {
          for (int64_t c; (c = next[size_t(vi)].fetch_add(1)) < nch;)
            k_.matvec_rows(v, px, yv, at[size_t(c)], at[size_t(c) + 1]);
          out_of_work[size_t(vi)].fetch_add(1);
          if (mode != "decodepf" || vi + 1 == views) return;
          const QWeight nv = view((vi + 1) * n, n);
          for (int64_t u; out_of_work[size_t(vi)].load(std::memory_order_relaxed) < T &&
                          (u = cursor[size_t(vi)].fetch_add(1)) < max_units;) {
            const int64_t r = units[size_t(u)];
            prefetch_lines(nv.data + r * code_b, 4 * code_b, hint);
            prefetch_lines(nv.scales + r * par_b, 4 * par_b, hint);
            prefetch_lines(nv.biases + r * par_b, 4 * par_b, hint);
          }
        });
      }
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b = double(views * n) * double(code_b + 2 * par_b);
    } else if (mode == "decodeown") {
      // decodeman with each thread's first chunk its own: chunk t < T of every
      // view goes to the thread with id t (ids fixed per OS thread) unless another thread runs out
      // of chunks first and takes it; a thread out of chunks prefetches ITS chunk of the next view
      // into its own caches while some thread still works (PF_HINT as above; PF_MAX_KB caps it per thread, 0: no prefetch).
      const int64_t n = 5120, views = rows / n;
      const int hint = pf_hint();
      const int64_t pf_max = pf_max_bytes();
      const std::vector<int64_t> at = guided_bounds(n, T);
      const int64_t nch = int64_t(at.size()) - 1, own = std::min<int64_t>(nch, T);
      std::vector<std::atomic<int64_t>> next(static_cast<size_t>(views));
      std::vector<std::atomic<bool>> taken(static_cast<size_t>(views * own));
      std::vector<std::atomic<int>> out_of_work(static_cast<size_t>(views));
      for (int64_t i = 0; i < views; ++i) next[size_t(i)].store(own), out_of_work[size_t(i)].store(0);
      for (auto& t : taken) t.store(false);
      static std::atomic<int> ids{0};
      ThreadPool& pool = cpu_thread_pool();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t vi = 0; vi < views; ++vi) {
        const QWeight v = view(vi * n, n);
        float* yv = y.data() + vi * n;
        pool.parallel_for(T, 1, [&](int64_t, int64_t) {
          thread_local int id = ids.fetch_add(1);
          auto run = [&](int64_t c) { k_.matvec_rows(v, px, yv, at[size_t(c)], at[size_t(c) + 1]); };
          if (id < own && !taken[size_t(vi * own + id)].exchange(true)) run(id);
          for (int64_t c; (c = next[size_t(vi)].fetch_add(1)) < nch;) run(c);
          for (int64_t c = 0; c < own; ++c)
            if (!taken[size_t(vi * own + c)].load(std::memory_order_relaxed) && !taken[size_t(vi * own + c)].exchange(true)) run(c);
          out_of_work[size_t(vi)].fetch_add(1);
          if (vi + 1 == views || id >= own || pf_max == 0) return;
          // 4 rows (4 KiB of codes and their parameters) at a time while some thread still works.
          const QWeight nv = view((vi + 1) * n, n);
          const int64_t r1 = std::min(at[size_t(id) + 1], at[size_t(id)] + pf_max / code_b);
          for (int64_t r = at[size_t(id)]; r < r1 && out_of_work[size_t(vi)].load(std::memory_order_relaxed) < T; r += 4) {
            prefetch_lines(nv.data + r * code_b, 4 * code_b, hint);
            prefetch_lines(nv.scales + r * par_b, 4 * par_b, 1);
            prefetch_lines(nv.biases + r * par_b, 4 * par_b, 1);
          }
        });
      }
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b = double(views * n) * double(code_b + 2 * par_b);
    } else if (mode == "decodeshared" || mode == "decoderot" || mode == "decodepriv") {
      // decodeprep with x prepared again for every region: by the caller into
      // one shared px (decodeshared: what matvec does), by the caller into one of 32 px in turn
      // (decoderot: no line of it is cached by the other cores when it is written), or by every
      // thread into its own px as its first step in the region (decodepriv). x itself is rewritten
      // by the caller before each region (as a norm's output is). Prints the caller's mean
      // prepare time.
      const int64_t n = 5120;
      ThreadPool& pool = cpu_thread_pool();
      static std::vector<cpu::PreparedX> rot(32);
      std::atomic<int64_t> region{0};
      double prep_s = 0;
      int64_t regions = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t r0 = 0; r0 + n <= rows; r0 += n, ++regions) {
        const QWeight v = view(r0, n);
        float* yv = y.data() + r0;
        x[size_t(r0 / n % cols)] += 0.0f;  // the caller writes x (a norm's output)
        for (int64_t i = 0; i < cols; i += 16) x[size_t(i)] = float((i * 37) % 101 - 50) / 50.0f;
        cpu::PreparedX* p = &px;
        if (mode != "decodepriv") {
          const auto a = std::chrono::steady_clock::now();
          p = mode == "decoderot" ? &rot[size_t(regions % 32)] : &px;
          k.prepare_special(w, x.data(), p);
          prep_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
          pool.parallel_for_guided(n, 32, 4, [&](int64_t lo, int64_t hi) { k_.matvec_rows(v, *p, yv, lo, hi); });
        } else {
          region.fetch_add(1);
          pool.parallel_for_guided(n, 32, 4, [&](int64_t lo, int64_t hi) {
            thread_local cpu::PreparedX own;
            thread_local int64_t own_region = -1;
            if (own_region != region.load(std::memory_order_relaxed))
              k_.prepare_special(w, x.data(), &own), own_region = region.load(std::memory_order_relaxed);
            k_.matvec_rows(v, own, yv, lo, hi);
          });
        }
      }
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b = double(rows / n * n) * double(code_b + 2 * par_b);
      if (pass == 5 && mode != "decodepriv")  // printed before the mode's summary line
        std::printf("  %s: the caller's prepare %.2f us a region\n", mode.c_str(), 1e6 * prep_s / double(regions));
    } else if (mode == "persist") {
      // decode's regions as one parallel region: per 5120-row view the same guided chunks from a
      // counter of its own, then a spin barrier (all threads) before the next view.
      const int64_t n = 5120, views = rows / n;
      const std::vector<int64_t> at = guided_bounds(n, T);
      const int64_t nch = int64_t(at.size()) - 1;
      std::vector<std::atomic<int64_t>> next(static_cast<size_t>(views));
      std::vector<std::atomic<int>> arrived(static_cast<size_t>(views));
      for (int64_t i = 0; i < views; ++i) next[size_t(i)].store(0), arrived[size_t(i)].store(0);
      const auto t0 = std::chrono::steady_clock::now();
      cpu_thread_pool().parallel_for(T, 1, [&](int64_t, int64_t) {
        for (int64_t vi = 0; vi < views; ++vi) {
          const QWeight v = view(vi * n, n);
          for (int64_t c; (c = next[size_t(vi)].fetch_add(1)) < nch;)
            k_.matvec_rows(v, px, y.data() + vi * n, at[size_t(c)], at[size_t(c) + 1]);
          arrived[size_t(vi)].fetch_add(1);
          while (arrived[size_t(vi)].load() < T) cpu_relax();
        }
      });
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b = double(views * n) * double(code_b + 2 * par_b);
    } else {
      return std::fprintf(stderr, "unknown mode %s\n", mode.c_str()), 2;
    }
    if (pass > 0) r.push_back(b / s / 1e9);  // the first pass warms the pool and the pages
  }
  std::sort(r.begin(), r.end());
  if (std::getenv("VIEW_ROWS")) std::printf("view %s rows: ", std::getenv("VIEW_ROWS"));
  std::printf("threads %d %-7s chunk %3lld KiB: median %6.1f GB/s, best %6.1f (y[1] %g)\n", T, mode.c_str(),
              (long long)chunk_kib, r[r.size() / 2], r.back(), double(y[1]));
  return 0;
}
