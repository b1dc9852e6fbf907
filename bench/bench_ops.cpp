// bench_ops: Google Benchmark of the optimised CPU ops at real shapes (Qwen3-30B-A3B expert
// and attention projections) per ISA level and thread count, reporting us/run, GB/s of weight
// bytes and % of the measured read-bandwidth ceiling (matvec) or FMA peak (matmul).
// Weights rotate through copies spanning 128 MiB, so every run reads them from DRAM
// (BENCH_OPS_ROTATE_MB changes the span).
// Run: build/bench/bench_ops [--benchmark_filter=Matvec] [--ceiling_mb=1024]
#include <benchmark/benchmark.h>

#include <time.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_pool.h"
#include "core/aligned.h"
#include "backend/cpu/ceilings.h"
#include "backend/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/group_lanes.h"
#include "util/random_weights.h"

namespace moeflux::bench {
namespace {

struct Ceilings {
  double bw1 = 0, bw_all = 0, fma1 = 0, fma_all = 0;
};
using Clock = std::chrono::steady_clock;
Ceilings g_ceil;
int g_cores = 1;
// Bytes the copies span: > 4x a 32 MiB L3. BENCH_OPS_ROTATE_MB=1 keeps them in cache instead
// (the kernel's compute rate, without DRAM).
size_t rotate_bytes() {
  const char* e = std::getenv("BENCH_OPS_ROTATE_MB");
  return (e && std::atol(e) > 0 ? size_t(std::atol(e)) : size_t(128)) << 20;
}

// Copies of one weight, far enough apart in memory that reading them in turn misses cache. Made
// on first use (ready()), so that a filtered run makes only the sets its benchmarks read: every
// set spans BENCH_OPS_ROTATE_MB, which must exceed the L3 (300 MiB on a 16-core Intel server VM).
struct WeightSet {
  std::function<test::OwnedWeight()> make;
  bool lanes;
  test::OwnedWeight base;
  // 64-byte aligned, as pack tensors are (kDenseAlign): a std::vector's 16-byte alignment makes
  // every 64-byte load of codes straddle two lines.
  std::vector<AlignedVector<uint8_t>> data, scales, biases;
  std::vector<QWeight> views;
  size_t bytes = 0;  // weight + scale + bias bytes of one copy
  // lanes: every copy's codes rewritten in the group-lane layout (backend/cpu/group_lanes.h), as a
  // repacked resident pack holds them.
  WeightSet(std::function<test::OwnedWeight()> m, bool l) : make(std::move(m)), lanes(l) {}
  void ready() {
    if (!views.empty()) return;
    base = make();
    bytes = base.data.size() + base.scales.size() + base.biases.size();
    const size_t copies = std::max<size_t>(2, rotate_bytes() / bytes);
    for (size_t i = 0; i < copies; ++i) {
      data.emplace_back(base.data.begin(), base.data.end());
      scales.emplace_back(base.scales.begin(), base.scales.end());
      biases.emplace_back(base.biases.begin(), base.biases.end());
      QWeight w = base.w;
      w.data = data.back().data();
      if (w.format == WFormat::Affine) w.scales = scales.back().data(), w.biases = biases.back().data();
      if (w.format == WFormat::Fp8Block) w.block_scales = scales.back().data();
      if (lanes) {
        to_group_lanes_in_place(w, /*on_pool=*/false);
        w.group_lanes = true;
      }
      views.push_back(w);
    }
  }
};

double thread_cpu_s() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}


void set_level(benchmark::State& st, CpuIsa isa, int threads) {
  if (isa > cpu_isa_detected()) st.SkipWithError("ISA not supported here");
  else set_cpu_isa(isa);
  set_cpu_threads(threads);
}

void bm_matvec(benchmark::State& st, WeightSet* ws, CpuIsa isa, int threads) {
  ws->ready();
  set_level(st, isa, threads);
  const QWeight& w0 = ws->views[0];
  const auto x = test::randn(size_t(w0.cols), 1);
  std::vector<float> y(static_cast<size_t>(w0.rows));
  size_t i = 0;
  const auto t0 = Clock::now();
  const double c0 = thread_cpu_s();
  for (auto _ : st) {
    matvec(ws->views[i], x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % ws->views.size();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double gbs = double(ws->bytes) * double(st.iterations()) / s / 1e9;
  const double ceil = threads == 1 ? g_ceil.bw1 : g_ceil.bw_all;
  st.counters["GB/s"] = gbs;
  st.counters["ceil%"] = 100.0 * gbs / ceil;
  // On a shared machine wall time includes time other processes held the core; one thread's
  // CPU time (which still counts its memory stalls) gives the kernel's own rate.
  if (threads == 1) st.counters["GB/s_cpu"] = double(ws->bytes) * double(st.iterations()) / (thread_cpu_s() - c0) / 1e9;
  st.SetLabel(ws->base.w.describe());
}

// One x prepared on one thread for a weight at a level's integer path (the step before each
// projection of a decode token that no other thread shares): us per x.
void bm_prepare(benchmark::State& st, WeightSet* ws, CpuIsa isa) {
  ws->ready();
  set_level(st, isa, 1);
  const cpu::Kernels& k = isa == CpuIsa::Avx512Vnni ? cpu::kernels_avx512_vnni() : cpu::kernels_avx2();
  const QWeight& w = ws->views[0];
  const auto x = test::randn(size_t(w.cols), 2);
  cpu::PreparedX px;
  for (auto _ : st) {
    cpu::prepare_for(k, w, x.data(), &px);
    benchmark::DoNotOptimize(px.xd.data());
  }
  st.SetLabel(ws->base.w.describe());
}

// One parallel region whose chunks do nothing: the pool's own cost of a region (publish, claim,
// join), which a decode token pays ~190 times. guided: the chunking of the matvec regions.
void bm_region(benchmark::State& st, int threads, bool guided) {
  set_cpu_threads(threads);
  ThreadPool& pool = cpu_thread_pool();
  for (auto _ : st) {
    if (guided) pool.parallel_for_guided(512, 4, 4, [](int64_t b, int64_t e) { benchmark::DoNotOptimize(b + e); });
    else pool.parallel_for(threads, 1, [](int64_t b, int64_t e) { benchmark::DoNotOptimize(b + e); });
  }
}

void bm_matmul(benchmark::State& st, WeightSet* ws, int64_t T, CpuIsa isa, int threads) {
  ws->ready();
  set_level(st, isa, threads);
  const QWeight& w0 = ws->views[0];
  const auto x = test::randn(size_t(T * w0.cols), 1);
  std::vector<float> y(static_cast<size_t>(T * w0.rows));
  size_t i = 0;
  const auto t0 = Clock::now();
  for (auto _ : st) {
    matmul(ws->views[i], x.data(), T, y.data());
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % ws->views.size();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double gflops = 2.0 * double(T * w0.rows * w0.cols) * double(st.iterations()) / s / 1e9;
  st.counters["GFLOP/s"] = gflops;
  st.counters["fma_peak%"] = 100.0 * gflops / (threads == 1 ? g_ceil.fma1 : g_ceil.fma_all);
  st.counters["GB/s"] = double(ws->bytes) * double(st.iterations()) / s / 1e9;
  st.counters["us/token"] = 1e6 * s / double(st.iterations() * T);
  st.SetLabel(ws->base.w.describe() + " T=" + std::to_string(T));
}

// One decode token through 8 routed experts, each expert's matrices taken from the rotating
// copies, so that every call reads from DRAM: swiglu_experts (two parallel regions), or fused,
// swiglu_experts_combined (the experts and their weighted sum in one region: decode's path on 8
// threads or more; the sets in group-lane order, as a repacked resident pack holds them).
void bm_experts(benchmark::State& st, WeightSet* gu, WeightSet* dn, CpuIsa isa, int threads, bool fused) {
  gu->ready();
  dn->ready();
  set_level(st, isa, threads);
  constexpr int kK = 8;
  const int64_t dim = gu->views[0].cols;
  const auto x = test::randn(size_t(dim), 1);
  std::vector<float> out(static_cast<size_t>(kK * dim)), wt(kK, 1.0f / kK);
  const size_t ng = gu->views.size(), nd = dn->views.size();
  size_t i = 0;
  const auto t0 = Clock::now();
  for (auto _ : st) {
    const QWeight *g[kK], *u[kK], *d[kK];
    float* o[kK];
    for (int k = 0; k < kK; ++k) {
      g[k] = &gu->views[(i + 2 * size_t(k)) % ng], u[k] = &gu->views[(i + 2 * size_t(k) + 1) % ng];
      d[k] = &dn->views[(i / 2 + size_t(k)) % nd], o[k] = out.data() + k * dim;
    }
    if (fused) swiglu_experts_combined(kK, g, u, d, x.data(), wt.data(), out.data());
    else swiglu_experts(kK, g, u, d, x.data(), o);
    benchmark::DoNotOptimize(out.data());
    i = (i + 2 * kK) % ng;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double gbs = double(kK) * double(2 * gu->bytes + dn->bytes) * double(st.iterations()) / s / 1e9;
  st.counters["GB/s"] = gbs;
  st.counters["ceil%"] = 100.0 * gbs / (threads == 1 ? g_ceil.bw1 : g_ceil.bw_all);
  st.SetLabel("8 x (" + gu->base.w.describe() + " x2, " + dn->base.w.describe() + ")" + (gu->lanes ? ", lanes" : ""));
}

// A decode step of 8 sequences through one layer's routed experts, as a step of 8 qwen3-30b-a3b
// sequences routes them (64 choices over 50 distinct experts: 14 with two tokens, 36 with one),
// swiglu_experts_batch over the rotating copies. GB/s: the 50 experts' bytes.
void bm_experts_batch(benchmark::State& st, WeightSet* gu, WeightSet* dn, int threads) {
  gu->ready();
  dn->ready();
  set_level(st, cpu_isa_default(), threads);
  constexpr int kN = 50, kTwo = 14;
  const int64_t dim = gu->views[0].cols;
  const auto x = test::randn(size_t(2 * kN * dim), 1);
  std::vector<float> out(static_cast<size_t>(2 * kN * dim));
  std::vector<int64_t> T(kN);
  for (int k = 0; k < kN; ++k) T[size_t(k)] = k % 3 == 0 && k / 3 < kTwo ? 2 : 1;
  const size_t ng = gu->views.size(), nd = dn->views.size();
  size_t i = 0;
  const auto t0 = Clock::now();
  for (auto _ : st) {
    const QWeight *g[kN], *u[kN], *d[kN];
    const float* xs[kN];
    float* o[kN];
    for (int k = 0; k < kN; ++k) {
      g[k] = &gu->views[(i + 2 * size_t(k)) % ng], u[k] = &gu->views[(i + 2 * size_t(k) + 1) % ng];
      d[k] = &dn->views[(i / 2 + size_t(k)) % nd], xs[k] = x.data() + 2 * k * dim, o[k] = out.data() + 2 * k * dim;
    }
    swiglu_experts_batch(kN, g, u, d, xs, T.data(), o);
    benchmark::DoNotOptimize(out.data());
    i = (i + 2 * kN) % ng;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double gbs = double(kN) * double(2 * gu->bytes + dn->bytes) * double(st.iterations()) / s / 1e9;
  st.counters["GB/s"] = gbs;
  st.counters["ceil%"] = 100.0 * gbs / (threads == 1 ? g_ceil.bw1 : g_ceil.bw_all);
  st.SetLabel("50 x (" + gu->base.w.describe() + " x2, " + dn->base.w.describe() + "), 64 tokens, lanes");
}

// Decode's attention over 32 positions and the o projection in one parallel region
// (attention_project; Qwen3-30B-A3B: 32 query heads, 4 kv heads of 128), wo from the rotating
// copies. GB/s: wo's bytes.
void bm_attention_project(benchmark::State& st, WeightSet* wo, CpuIsa isa, int threads) {
  wo->ready();
  set_level(st, isa, threads);
  const int64_t n_heads = 32, n_kv = 4, hd = 128, len0 = 31;
  const auto q = test::randn(size_t(n_heads * hd), 1), k = test::randn(size_t((len0 + 1) * n_kv * hd), 2),
             v = test::randn(size_t((len0 + 1) * n_kv * hd), 3);
  std::vector<float> att(static_cast<size_t>(n_heads * hd)), out(static_cast<size_t>(wo->views[0].rows));
  size_t i = 0;
  const auto t0 = Clock::now();
  for (auto _ : st) {
    attention_project(q.data(), k.data(), v.data(), len0, 0, n_heads, n_kv, hd, 0.088f, nullptr, att.data(),
                      wo->views[i], out.data());
    benchmark::DoNotOptimize(out.data());
    i = (i + 1) % wo->views.size();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double gbs = double(wo->bytes) * double(st.iterations()) / s / 1e9;
  st.counters["GB/s"] = gbs;
  st.counters["ceil%"] = 100.0 * gbs / (threads == 1 ? g_ceil.bw1 : g_ceil.bw_all);
  st.SetLabel("ctx 32, wo " + wo->base.w.describe() + ", lanes");
}

void bm_attention(benchmark::State& st, int64_t n_ctx, CpuIsa isa, int threads) {
  set_level(st, isa, threads);
  const int64_t n_heads = 32, n_kv = 4, hd = 128;
  const auto q = test::randn(size_t(n_heads * hd), 1), k = test::randn(size_t(n_ctx * n_kv * hd), 2),
             v = test::randn(size_t(n_ctx * n_kv * hd), 3);
  std::vector<float> out(static_cast<size_t>(n_heads * hd));
  for (auto _ : st) {
    attention(q.data(), k.data(), v.data(), n_ctx, n_heads, n_kv, hd, hd, 0.088f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["GB/s"] = benchmark::Counter(double(2 * n_ctx * n_kv * hd * 4) * double(st.iterations()) / 1e9,
                                           benchmark::Counter::kIsRate);  // K and V bytes
  st.SetLabel("q32 kv4 d128 ctx=" + std::to_string(n_ctx));
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string s;
  std::getline(f, s);
  return s;
}

void register_all(std::vector<std::unique_ptr<WeightSet>>& keep) {
  auto add_set = [&](std::function<test::OwnedWeight()> make, bool lanes = false) {
    return keep.emplace_back(std::make_unique<WeightSet>(std::move(make), lanes)).get();
  };
  const std::vector<int> thread_counts = g_cores > 1 ? std::vector<int>{1, g_cores} : std::vector<int>{1};
    // Real shapes, 4-bit g64 (the MLX default): expert gate/up, expert down, q / k (v) / o projections,
  // the output head (175 MB: the largest single matvec of a decode step).
  struct Shape { int64_t rows, cols; const char* what; };
  const Shape shapes[] = {{768, 2048, "expert_gate_up"}, {2048, 768, "expert_down"},
                          {4096, 2048, "attn_q"}, {512, 2048, "attn_kv"}, {2048, 4096, "attn_o"},
                          {151936, 2048, "lm_head"},
                          // Qwen3-Next / Qwen3.5 experts (512 wide) and Qwen3-235B-A22B's down (1536 wide)
                          {512, 2048, "expert512_gate_up"}, {2048, 512, "expert512_down"}, {4096, 1536, "expert1536_down"}};
  const CpuIsa isas_q[] = {CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Avx512Vnni};  // + x in int8 digits
  for (const Shape& s : shapes) {
    WeightSet* ws = add_set([s] { return test::random_affine(s.rows, s.cols, 4, 64, DType::BF16, 1); });
    for (CpuIsa isa : isas_q)
      for (int t : thread_counts)
        benchmark::RegisterBenchmark((std::string("Matvec/q4g64/") + s.what + "/" + std::string(cpu_isa_name(isa)) + "/threads:" + std::to_string(t)).c_str(),
                                     bm_matvec, ws, isa, t)->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  // The same shapes in the group-lane layout, at the levels whose integer matvec reads it.
  for (const Shape& s : shapes) {
    if (s.rows > 4096) continue;
    WeightSet* ws = add_set([s] { return test::random_affine(s.rows, s.cols, 4, 64, DType::BF16, 1); }, /*lanes=*/true);
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512Vnni})
      for (int t : thread_counts)
        benchmark::RegisterBenchmark((std::string("Matvec/q4g64lanes/") + s.what + "/" + std::string(cpu_isa_name(isa)) + "/threads:" + std::to_string(t)).c_str(),
                                     bm_matvec, ws, isa, t)->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  // One token through 8 experts of Qwen3-30B-A3B shape (gate / up / down), as decode runs them.
  for (CpuIsa isa : isas_q)
    for (int t : thread_counts)
      benchmark::RegisterBenchmark((std::string("SwigluExperts/q4g64/k8/") + std::string(cpu_isa_name(isa)) + "/threads:" + std::to_string(t)).c_str(),
                                   bm_experts, keep[0].get(), keep[1].get(), isa, t, false)->UseRealTime()->Unit(benchmark::kMicrosecond);
  // The same with group-lane weights in one region and the sum (decode's path on 8+ threads),
  // and decode's attention with the o projection, at the levels with an integer path on them.
  {
    WeightSet* gu = add_set([] { return test::random_affine(768, 2048, 4, 64, DType::BF16, 1); }, /*lanes=*/true);
    WeightSet* dn = add_set([] { return test::random_affine(2048, 768, 4, 64, DType::BF16, 1); }, /*lanes=*/true);
    WeightSet* wo = add_set([] { return test::random_affine(2048, 4096, 4, 64, DType::BF16, 1); }, /*lanes=*/true);
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512Vnni})
      for (int t : thread_counts) {
        const std::string at = std::string(cpu_isa_name(isa)) + "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(("FusedExperts/q4g64lanes/k8/" + at).c_str(), bm_experts, gu, dn, isa, t, true)
            ->UseRealTime()->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("AttentionProject/q4g64lanes/ctx32/" + at).c_str(), bm_attention_project, wo, isa, t)
            ->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
    for (int t : thread_counts)
      benchmark::RegisterBenchmark(("ExpertsBatch/q4g64lanes/n50/threads:" + std::to_string(t)).c_str(), bm_experts_batch, gu,
                                   dn, t)->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  // Every format at the attention-q shape (4096 x 2048).
  struct Fmt { const char* name; test::OwnedWeight (*make)(); };
  const Fmt fmts[] = {
      {"q2g64", [] { return test::random_affine(4096, 2048, 2, 64, DType::BF16, 2); }},
      {"q3g64", [] { return test::random_affine(4096, 2048, 3, 64, DType::BF16, 3); }},
      {"q4g32", [] { return test::random_affine(4096, 2048, 4, 32, DType::BF16, 4); }},
      {"q4g128", [] { return test::random_affine(4096, 2048, 4, 128, DType::BF16, 5); }},
      {"q6g64", [] { return test::random_affine(4096, 2048, 6, 64, DType::BF16, 6); }},
      {"q8g64", [] { return test::random_affine(4096, 2048, 8, 64, DType::BF16, 7); }},
      {"bf16", [] { return test::random_dense(4096, 2048, DType::BF16, 8); }},
      {"f16", [] { return test::random_dense(4096, 2048, DType::F16, 9); }},
      {"f32", [] { return test::random_dense(4096, 2048, DType::F32, 10); }},
      {"fp8b128", [] { return test::random_fp8(4096, 2048, 128, 128, DType::F32, 11); }},
  };
  for (const Fmt& f : fmts) {
    WeightSet* ws = add_set(f.make);
    const bool digit_x = f.name[0] == 'q' && (f.name[1] == '4' || f.name[1] == '8');
    for (CpuIsa isa : isas_q) {
      if (isa == CpuIsa::Avx512Vnni && !digit_x) continue;
      for (int t : thread_counts)
        benchmark::RegisterBenchmark((std::string("Matvec/") + f.name + "/attn_q/" + std::string(cpu_isa_name(isa)) + "/threads:" + std::to_string(t)).c_str(),
                                     bm_matvec, ws, isa, t)->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
  // The router of a Qwen3-30B-A3B layer (128 experts), kept in bf16 by the converter.
  {
    WeightSet* ws = add_set([] { return test::random_dense(128, 2048, DType::BF16, 13); });
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512})
      for (int t : thread_counts)
        benchmark::RegisterBenchmark((std::string("Matvec/bf16/router/") + std::string(cpu_isa_name(isa)) + "/threads:" + std::to_string(t)).c_str(),
                                     bm_matvec, ws, isa, t)->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  // The reference level once, for scale.
  benchmark::RegisterBenchmark("Matvec/q4g64/expert_gate_up/scalar/threads:1", bm_matvec, keep[0].get(),
                               CpuIsa::Scalar, 1)->UseRealTime()->Unit(benchmark::kMicrosecond);
  // Batched prefill / grouped experts: one expert's gate over T tokens.
  for (int64_t T : {1, 4, 16, 32, 64, 128})
    for (int t : thread_counts)
      benchmark::RegisterBenchmark(("Matmul/q4g64/expert_gate_up/T:" + std::to_string(T) + "/threads:" + std::to_string(t)).c_str(),
                                   bm_matmul, keep[0].get(), T, cpu_isa_default(), t)->UseRealTime()->Unit(benchmark::kMicrosecond);
  // Small batches (a decode step of several sequences) and a prefill chunk over group-lane
  // weights, as a repacked resident pack holds them: attention q and o, an expert, the output head.
  for (const Shape& s : {Shape{4096, 2048, "attn_q"}, Shape{2048, 4096, "attn_o"}, Shape{768, 2048, "expert_gate_up"},
                         Shape{2048, 768, "expert_down"}, Shape{151936, 2048, "lm_head"}}) {
    WeightSet* ws = add_set([s] { return test::random_affine(s.rows, s.cols, 4, 64, DType::BF16, 1); }, /*lanes=*/true);
    for (int64_t T : {1, 2, 4, 8, 16, 64})
      for (int t : thread_counts)
        benchmark::RegisterBenchmark(("Matmul/q4g64lanes/" + std::string(s.what) + "/T:" + std::to_string(T) + "/threads:" + std::to_string(t)).c_str(),
                                     bm_matmul, ws, T, cpu_isa_default(), t)->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  // x prepares at the decode shapes' widths (q / k / v / gate / up: 2048, down: 768, o: 4096).
  for (const Shape& s : {Shape{16, 2048, "x2048"}, Shape{16, 768, "x768"}, Shape{16, 4096, "x4096"}}) {
    WeightSet* ws = add_set([s] { return test::random_affine(s.rows, s.cols, 4, 64, DType::BF16, 12); }, /*lanes=*/true);
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512Vnni})
      benchmark::RegisterBenchmark((std::string("Prepare/q4g64lanes/") + s.what + "/" + std::string(cpu_isa_name(isa))).c_str(),
                                   bm_prepare, ws, isa)->Unit(benchmark::kMicrosecond);
  }
  for (int t : thread_counts)
    for (bool guided : {false, true})
      benchmark::RegisterBenchmark((std::string("Pool/") + (guided ? "guided512" : "items") + "/threads:" + std::to_string(t)).c_str(),
                                   bm_region, t, guided)->UseRealTime()->Unit(benchmark::kMicrosecond);
  for (int64_t ctx : {32, 512, 4096})
    for (int t : thread_counts)
      benchmark::RegisterBenchmark(("Attention/ctx:" + std::to_string(ctx) + "/threads:" + std::to_string(t)).c_str(),
                                   bm_attention, ctx, cpu_isa_default(), t)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace
}  // namespace moeflux::bench

int main(int argc, char** argv) {
  using namespace moeflux;
  size_t ceiling_mb = 1024;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ceiling_mb=", 13) == 0) ceiling_mb = std::stoul(argv[i] + 13);
    else args.push_back(argv[i]);
  }
  int n = int(args.size());
  benchmark::Initialize(&n, args.data());
  bench::g_cores = physical_core_count();
  auto& c = bench::g_ceil;
  c.bw1 = bench::read_bandwidth_gbs(ceiling_mb << 20, 1);
  c.bw_all = bench::read_bandwidth_gbs(ceiling_mb << 20, bench::g_cores);
  c.fma1 = bench::fma_peak_gflops(1);
  c.fma_all = bench::fma_peak_gflops(bench::g_cores);
  benchmark::AddCustomContext("cpu_isa", std::string(cpu_isa_name(cpu_isa_detected())));
  benchmark::AddCustomContext("physical_cores", std::to_string(bench::g_cores));
  benchmark::AddCustomContext("loadavg_at_start", bench::load_average());
  benchmark::AddCustomContext("read_GB/s (1 thread / all)", std::to_string(c.bw1) + " / " + std::to_string(c.bw_all));
  benchmark::AddCustomContext("fma_GFLOP/s (1 thread / all)", std::to_string(c.fma1) + " / " + std::to_string(c.fma_all));
  std::vector<std::unique_ptr<bench::WeightSet>> keep;
  bench::register_all(keep);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::printf("loadavg at end: %s\n", bench::load_average().c_str());
  return 0;
}
