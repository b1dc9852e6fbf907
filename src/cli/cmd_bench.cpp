// `moeflux bench`: llama-bench style table. pp<N>: prefill of N random tokens; tg<N>: N tokens
// decoded one at a time from an empty context, or (-d D, test "tg<N> @ d<D>") after D random
// tokens prefilled before the clock starts; t/s as mean +- sd over -r runs. Decode rows add
// the weight bytes read per token, the achieved GB/s and its share of the machine's read
// bandwidth; prefill rows the weight GFLOP/s (2 x parameters used per token) and its share of
// the FMA peak; both ceilings are measured by this run on the same threads (before and after
// the tests; the higher value is used). The bytes per token count the weights only: at depth,
// attention also reads the KV cache (2 x layers x kv heads x head_dim x 4 bytes a position).
// --alternate NAME measures each test with the tuning switch NAME (backend/cpu/tuning_switch.h) as set
// and flipped, in alternation (decode token by token, prefill run by run): two rows, and the
// paired steps' ratios, which a noisy machine disturbs less than runs in separate processes.
// --top-logits N: the steps leave the logits on the backend and bring each sequence's N largest
// to the host (what the samplers of run, chat and serve ask for: top-k 40 takes 56), instead of
// every logit.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/compute_options.h"
#include "cli/stream_options.h"
#include "core/error.h"
#include "core/phase_timer.h"
#include "core/thread_pool.h"
#include "engine/model_stats.h"
#include "engine/engine.h"
#include "stream/streaming.h"
#include "stream/disk_bench.h"
#include "stream/routing_profile.h"
#include "stream/stream_report.h"

namespace moeflux::cli {

namespace {
struct BenchArgs {
  std::string model;
  int pp = 512, tg = 128, reps = 5, depth = 0, top_logits = 0;
  std::vector<int> seqs;  // --seqs: decode this many sequences together (aggregate t/s)
  bool json = false, profile = false, phases = false;
  std::string alternate;
  ComputeArgs compute;
  StreamArgs stream;
};

struct Row {
  std::string test;
  double mean = 0, sd = 0;  // tokens/s
  std::vector<double> samples;     // tokens/s of each measured run, in order (JSON samples_ts)
  double gbs = 0, bw_pct = 0, gflops = 0, fma_pct = 0;
  double seconds = 0;              // measured runs, warm-up excluded
  std::vector<double> ratios;      // --alternate, the flipped row: its t/s over the default's, run by run
  PoolProfile pool;                // --profile: the thread pool over the measured runs
  Backend::StageTimes stages;      // --profile: the backend's device time per stage
  bool streamed = false;           // expert cache statistics of the measured runs:
  ExpertCacheStats cache;
  double gpu_miss_bytes = 0;       // routed experts in no GPU slot when used, measured runs
  double gpu_miss_tokens = 0;      // ... over this many tokens (with --alternate both variants' runs)
};

std::pair<double, double> mean_sd(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return {m, v.size() > 1 ? std::sqrt(s / double(v.size() - 1)) : 0.0};
}

// The q-quantile of v (0 < q < 1), interpolated between order statistics.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double at = q * double(v.size() - 1);
  const size_t i = size_t(at);
  return i + 1 < v.size() ? v[i] + (at - double(i)) * (v[i + 1] - v[i]) : v[i];
}

std::string num(double v, int prec) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

}  // namespace

Runner register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Benchmark prefill and decode (llama-bench style table)");
  sub->add_option("-m,--model", a->model, "Model directory or pack")->required();
  sub->add_option("-p,--n-prompt", a->pp, "Prompt tokens for the prefill test (0: skip)")->check(CLI::Range(0, 1 << 20));
  sub->add_option("-n,--n-gen", a->tg, "Tokens for the decode test (0: skip)")->check(CLI::Range(0, 1 << 20));
  sub->add_option("-d,--n-depth", a->depth, "Tokens of context prefilled (untimed) before each run (default 0)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("-r,--repetitions", a->reps, "Runs per test")->check(CLI::Range(1, 1000));
  add_compute_options(sub, a->compute);
  sub->add_flag("--json", a->json, "Print the results as JSON");
  sub->add_flag("--profile", a->profile,
                "Also report the thread pool's parallel regions per token, how busy the threads were in them and how the "
                "caller waited for their last chunks; on the cuda backend the device time per stage and the kernel "
                "launches per token");
  sub->add_flag("--phases", a->phases, "Also print the wall time of each phase of the forward pass to stderr at exit");
  sub->add_option("--alternate", a->alternate,
                  "Measure each test also with this tuning switch flipped, the two runs of each repetition in "
                  "alternating order (an A/B in one process; e.g. MOEFLUX_MERGED_ROUTE; an unknown name lists them)");
  sub->add_option("--seqs", a->seqs,
                  "Also decode this many sequences together (comma-separated counts, e.g. 2,4,8): a row tgN xS "
                  "each, with the aggregate t/s of all S sequences")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  sub->add_option("--top-logits", a->top_logits,
                  "Bring only the N largest logits of each sequence's last row to the host (the rest stay on the "
                  "backend), as the samplers of run, chat and serve do (0: every logit)")
      ->check(CLI::Range(0, 1 << 20));
  add_stream_options(sub, a->stream);
  return [a]() {
    a->compute.apply();
    if (a->phases) enable_phases();
    auto model = load_model_cli(a->model, a->stream, a->compute);
    Backend& be = *model->backend;
    const bool alt = !a->alternate.empty();
    if (alt) {
      const auto names = be.ab_switches();
      if (std::find(names.begin(), names.end(), a->alternate) == names.end()) {
        std::string all;
        for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
        fail("--alternate: the ", be.name(), " backend has no A/B switch named ", a->alternate, " (there are: ",
             all.empty() ? "none" : all, ")");
      }
    }
    const int threads = std::atoi(be.fact("threads").c_str());
    if (int64_t(a->depth) + a->pp + 1 > model->cfg.max_seq_len || int64_t(a->depth) + a->tg + 1 > model->cfg.max_seq_len)
      fail("depth plus test length exceeds the model's context of ", model->cfg.max_seq_len, " tokens");
    const ModelStats ms = model_stats(*model);
    if (!a->json) std::fprintf(stderr, "measuring ceilings (%s)...\n", be.describe().c_str());
    // The ceilings are measured before the tests and again after them, and the higher value
    // is used: on a shared machine one measurement can land in a busy moment and make the
    // percentages look better than they are.
    Backend::Ceilings ceil = be.measure_ceilings();
    double bw = ceil.read_gbs, fma = ceil.fma_gflops;
    ExpertCache* cache = expert_cache(*model);
    double disk = 0;
    bool disk_direct = false;
    if (cache) {
      std::vector<std::string> files;
      for (size_t i = 0; i < cache->n_layers(); ++i) files.push_back(cache->files().path(int(i)));
      disk = bench::disk_read_gbs(files, uint64_t(2) << 30, &disk_direct);
    }
    // Starts the cache statistics at the first measured run.
    // The GPU expert cache's miss bytes (a backend fact, a running count) at the first measured run.
    auto gpu_misses = [&] { return std::strtod(be.fact("gpu_miss_bytes").c_str(), nullptr); };
    double gpu_misses0 = 0;
    auto stats_from = [&](int r) {
      if (cache && r == 0) cache->reset_stats();
      if (r == 0) gpu_misses0 = gpu_misses();
    };
    auto stats_into = [&](Row& row) {
      if (cache) row.streamed = true, row.cache = cache->stats();
      row.gpu_miss_bytes = gpu_misses() - gpu_misses0;
    };
    std::mt19937 rng(42);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(model->cfg.vocab_size - 1));
    using Clock = std::chrono::steady_clock;
    std::vector<Row> rows;
    Engine engine(*model);
    auto seq = engine.new_sequence();
    Sequence& s = *seq;
    // One sequence's tokens through the engine (the single-sequence forward).
    std::vector<TopLogits> tops(1 + size_t(std::max(0, a->seqs.empty() ? 0 : *std::max_element(a->seqs.begin(), a->seqs.end()))));
    for (TopLogits& t : tops) t.n = a->top_logits;
    auto opts = [&](size_t i) { return ForwardOptions{.all_logits = false, .top = a->top_logits > 0 ? &tops[i] : nullptr}; };
    auto forward = [&](std::span<const int32_t> ids) {
      const StepItem item{&s, ids, opts(0)};
      engine.step({&item, 1});
    };
    // One test: reps + 1 runs from an empty context (or -d tokens of it), the first a warm-up;
    // `prepare` and the depth's prefill run before the clock starts.
    std::vector<int32_t> context(static_cast<size_t>(a->depth));
    const std::string at = a->depth > 0 ? " @ d" + std::to_string(a->depth) : "";
    // A test is `steps` timed steps of step_tokens tokens each (prefill: one step; decode: a step
    // a token). With --alternate the two variants (the switch as set, then flipped) alternate:
    // decode token by token within each run, in pairs whose order alternates (noise on the scale
    // of a run disturbs both sides of a pair alike); prefill run by run, the order reversed every
    // other repetition. Rows in variant order.
    const int n_var = alt ? 2 : 1;
    const bool alt_default = alt && be.ab_switch(a->alternate);
    auto measure = [&](const std::string& name, int step_tokens, int steps, auto&& prepare, auto&& step) {
      std::vector<Row> vrows(static_cast<size_t>(n_var));
      std::vector<std::vector<double>> tps(static_cast<size_t>(n_var));
      for (int v = 0; v < n_var; ++v)
        vrows[size_t(v)].test = name + at + (v == 1 ? " " + a->alternate + "=" + (alt_default ? "0" : "1") : "");
      const bool per_step = alt && steps >= 2;
      double measured_tokens = 0;
      const int runs = alt && !per_step ? 2 : 1;  // per repetition
      for (int r = -1; r < a->reps; ++r)
        for (int i = 0; i < runs; ++i) {
          prepare();
          s.reset();
          if (!context.empty()) {
            for (auto& t : context) t = tok(rng);
            forward(context);
          }
          if (i == 0) stats_from(r);
          double sec[2] = {0, 0}, pair[2] = {0, 0};
          int64_t done[2] = {0, 0};
          for (int k = 0; k < steps; ++k) {
            const int v = per_step ? (k % 2) ^ (k / 2 % 2) : r % 2 != 0 ? runs - 1 - i : i;
            if (alt) be.set_ab_switch(a->alternate, v == 0 ? alt_default : !alt_default);
            const bool prof = r >= 0 && a->profile;
            if (prof) ThreadPool::reset_profile(), ThreadPool::set_profiling(true), be.set_stage_profiling(true);
            const auto t0 = Clock::now();
            step(k);
            const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
            if (prof) {
              Row& pr = vrows[size_t(v)];
              pr.pool += ThreadPool::profile(), ThreadPool::set_profiling(false);
              const Backend::StageTimes st = be.stage_times();
              be.set_stage_profiling(false);
              for (const auto& stage : st.seconds) {
                auto it = std::find_if(pr.stages.seconds.begin(), pr.stages.seconds.end(),
                                       [&](const auto& p) { return p.first == stage.first; });
                if (it == pr.stages.seconds.end()) pr.stages.seconds.push_back(stage);
                else it->second += stage.second;
              }
              pr.stages.launches += st.launches;
            }
            sec[v] += dt, done[v] += step_tokens, pair[v] = dt;
            if (per_step && k % 2 == 1 && r >= 0) vrows[1].ratios.push_back(pair[0] / pair[1]);  // flipped's speed / default's
          }
          if (r < 0) continue;
          measured_tokens += double(done[0] + done[1]);
          for (int v = 0; v < n_var; ++v)
            if (done[v] > 0) tps[size_t(v)].push_back(double(done[v]) / sec[v]), vrows[size_t(v)].seconds += sec[v];
        }
      if (alt) be.set_ab_switch(a->alternate, alt_default);
      for (int v = 0; v < n_var; ++v) {
        Row& row = vrows[size_t(v)];
        stats_into(row);  // with --alternate, the cache statistics cover both variants' runs
        row.gpu_miss_tokens = measured_tokens;
        std::tie(row.mean, row.sd) = mean_sd(tps[size_t(v)]);
        row.samples = tps[size_t(v)];
      }
      if (alt && !per_step)
        for (size_t r = 0; r < tps[0].size(); ++r) vrows[1].ratios.push_back(tps[1][r] / tps[0][r]);
      return vrows;
    };
    if (a->pp > 0) {
      std::vector<int32_t> ids(static_cast<size_t>(a->pp));
      for (Row& row : measure(
               "pp" + std::to_string(a->pp), a->pp, 1, [&] { for (auto& t : ids) t = tok(rng); },
               [&](int) { forward(ids); })) {
        row.gflops = row.mean * 2.0 * double(ms.params_per_token) / 1e9;
        rows.push_back(row);
      }
    }
    if (a->tg > 0) {
      for (Row& row : measure("tg" + std::to_string(a->tg), 1, a->tg, [] {}, [&](int) {
             const int32_t id = tok(rng);
             forward(std::span<const int32_t>(&id, 1));
           })) {
        row.gbs = row.mean * double(ms.bytes_per_token) / 1e9;
        rows.push_back(row);
      }
      // Several sequences decoded together, one token of each per step (each from the same
      // context length as the one-sequence test); t/s counts the tokens of all of them.
      for (int n_seq : a->seqs) {
        if (n_seq < 2) continue;
        std::vector<std::unique_ptr<Sequence>> many;
        for (int i = 0; i < n_seq; ++i) many.push_back(engine.new_sequence());
        std::vector<int32_t> ids(static_cast<size_t>(n_seq));
        std::vector<StepItem> items(static_cast<size_t>(n_seq));
        for (Row& row : measure(
                 "tg" + std::to_string(a->tg) + " x" + std::to_string(n_seq), n_seq, a->tg,
                 [&] {
                   for (auto& q : many) {
                     q->reset();
                     if (context.empty()) continue;
                     for (auto& t : context) t = tok(rng);
                     const StepItem item{q.get(), context, {.all_logits = false}};
                     engine.step({&item, 1});
                   }
                 },
                 [&](int) {
                   for (int i = 0; i < n_seq; ++i)
                     ids[size_t(i)] = tok(rng), items[size_t(i)] = StepItem{many[size_t(i)].get(), {&ids[size_t(i)], 1}, opts(size_t(i))};
                   engine.step(items);
                 })) {
          row.gbs = 0;  // the bytes a step reads depend on how the sequences' experts overlap
          rows.push_back(row);
        }
      }
    }
    ceil = be.measure_ceilings();
    bw = std::max(bw, ceil.read_gbs), fma = std::max(fma, ceil.fma_gflops);
    for (Row& r : rows) {
      if (r.test[0] == 't') r.bw_pct = bw > 0 ? 100.0 * r.gbs / bw : 0.0;
      else if (fma > 0) r.fma_pct = 100.0 * r.gflops / fma;  // 0: not measured on this backend
    }
    const std::string isa = be.fact("isa");
    // Weights in the backend's own layout: the resident pack's, or the expert cache's records as read
    const bool slots = cache && cache->transforms_records();
    double measured_s = 0;  // for --stats: the measured runs' time, which the cache statistics cover
    for (const auto& r : rows) measured_s += r.seconds;
    // The backend as the table names it: "cpu (avx512vnni, repacked)", "cuda (NVIDIA H100 80GB HBM3)".
    const std::string what = isa.empty() ? be.fact("device") : isa;
    const std::string note = what + (model->prepared_tensors || slots ? ", repacked" : "") +
                             (be.fact("fast_prefill") == "1" ? ", fast prefill" : "");
    const std::string backend_label = note.empty() ? be.name() : std::string(be.name()) + " (" + note + ")";
    if (a->json) {
      nlohmann::ordered_json j = {{"model", a->model}, {"arch", model->cfg.arch}, {"weight_bytes", ms.weight_bytes},
                                  {"params", ms.params}, {"bytes_per_token", ms.bytes_per_token},
                                  {"params_per_token", ms.params_per_token}, {"backend", be.name()}, {"isa", isa},
                                  {"repacked_tensors", model->prepared_tensors}, {"repacked_cache_records", slots},
                                  {"threads", threads}, {"depth", a->depth}, {"read_bw_gbs", bw}, {"fma_peak_gflops", fma},
                                  {"tests", nlohmann::ordered_json::array()}};
      if (cache) j["disk_read_gbs"] = disk, j["disk_read_direct"] = disk_direct;
      for (const auto& r : rows) {
        nlohmann::ordered_json t = {{"test", r.test}, {"tps_mean", r.mean}, {"tps_sd", r.sd}, {"gbs", r.gbs},
                                    {"read_bw_pct", r.bw_pct}, {"gflops", r.gflops}, {"fma_pct", r.fma_pct},
                                    {"samples_ts", r.samples}};
        if (!r.ratios.empty()) t["paired_ratios"] = r.ratios, t["paired_ratio_median"] = quantile(r.ratios, 0.5);
        if (r.streamed) {
          t["expert_cache"] = stream_stats_json(r.cache, cache->options());
          t["stall_pct"] = r.seconds > 0 ? 100.0 * r.cache.stall_s / r.seconds : 0.0;
        }
        j["tests"].push_back(t);
      }
      std::printf("%s\n", j.dump(1).c_str());
      finish_streaming(*model, a->stream, measured_s);
      return 0;
    }
    std::printf("| model | size | params | backend | threads | test | t/s | weights/token | GB/s | %% read bw | GFLOP/s | %% FMA peak |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : rows) {
      const bool tg = r.test[0] == 't';
      const bool one = r.gbs > 0;  // a one-sequence decode row
      std::printf("| %s | %s | %.2f M | %s | %d | %s | %.2f +- %.2f | %s | %s | %s | %s | %s |\n",
                  model->cfg.arch.c_str(), human_bytes(double(ms.weight_bytes)).c_str(), double(ms.params) / 1e6,
                  backend_label.c_str(), threads, r.test.c_str(), r.mean, r.sd,
                  tg && one ? human_bytes(double(ms.bytes_per_token)).c_str() : "",
                  tg && one ? num(r.gbs, 2).c_str() : "", tg && one && bw > 0 ? num(r.bw_pct, 1).c_str() : "",
                  tg ? "" : num(r.gflops, 1).c_str(), tg || fma <= 0 ? "" : num(r.fma_pct, 1).c_str());
    }
    if (alt) {
      std::printf("\npaired (--alternate %s, as set: %s; decode token by token, prefill run by run):", a->alternate.c_str(),
                  alt_default ? "on" : "off");
      std::printf("\n");
      for (const auto& r : rows) {
        if (r.ratios.empty()) continue;
        const auto faster = std::count_if(r.ratios.begin(), r.ratios.end(), [](double x) { return x > 1.0; });
        std::printf("- %s / as set: median ratio %.4f, quartiles %.4f / %.4f; faster in %zd of %zu pairs\n", r.test.c_str(),
                    quantile(r.ratios, 0.5), quantile(r.ratios, 0.25), quantile(r.ratios, 0.75), ssize_t(faster),
                    r.ratios.size());
      }
    }
    if (a->profile) {
      const int running = std::max(1, std::atoi(be.fact("threads_running").c_str()));  // threads that run chunks
      std::printf("\n| test | parallel regions / token | us / region | %% of time in regions | threads busy %% of region time "
                  "| caller's wait, us / region | regions the caller slept in %% | worker sleeps / token "
                  "| regions stalled %% | regions on the caller alone %% |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
      for (const auto& r : rows) {
        const double tokens = r.mean * r.seconds;  // tokens over the measured runs
        const PoolProfile& p = r.pool;
        const double regions = p.regions ? double(p.regions) : 1.0;
        std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", r.test.c_str(),
                    double(p.regions) / tokens, 1e6 * p.region_s / regions, 100.0 * p.region_s / r.seconds,
                    p.region_s > 0 ? 100.0 * p.busy_s / (p.region_s * running) : 0.0, 1e6 * p.tail_s / regions,
                    100.0 * double(p.slept) / regions, double(p.worker_sleeps) / tokens,
                    100.0 * double(p.stalls) / regions, 100.0 * double(p.inline_regions) / regions);
      }
    }
    if (a->profile && std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.stages.seconds.empty(); })) {
      std::printf("\ndevice time per stage (ops timed one by one, steps not recorded as graphs):\n\n");
      std::printf("| test | stage | us / token | %% of device time |\n|---|---|---|---|\n");
      for (const auto& r : rows) {
        const double tokens = r.mean * r.seconds;
        double total = 0;
        for (const auto& st : r.stages.seconds) total += st.second;
        for (const auto& [name, sec] : r.stages.seconds)
          std::printf("| %s | %s | %.1f | %.1f |\n", r.test.c_str(), name.c_str(), 1e6 * sec / tokens, 100 * sec / total);
        std::printf("| %s | all (%.1f kernel launches / token) | %.1f | 100 |\n", r.test.c_str(),
                    double(r.stages.launches) / tokens, 1e6 * total / tokens);
      }
    }
    if (threads > 0)
      std::printf("\nceilings measured now on %d threads (best of before and after the tests): read %.1f GB/s, FMA %.1f GFLOP/s (%s)\n",
                  threads, bw, fma, isa.c_str());
    else
      std::printf("\nceilings measured now (best of before and after the tests): read %.1f GB/s (%s)\n", bw,
                  be.describe().c_str());
    if (cache) {
      const ExpertCacheOptions& o = cache->options();
      std::printf("\nexpert streaming: budget %s of %s experts (%s), %s I/O via %s, prefetch %s; disk sequential "
                  "read %.2f GB/s (%s, measured now)\n\n",
                  human_bytes(double(o.budget_bytes)).c_str(), human_bytes(double(cache->total_bytes())).c_str(),
                  std::string(cache_policy_name(o.policy)).c_str(), std::string(io_mode_name(o.io)).c_str(),
                  std::string(io_engine_name(o.engine)).c_str(), o.prefetch ? "on" : "off", disk,
                  disk_direct ? "direct" : "buffered");
      std::printf("| test | t/s | hit %% | hits in flight %% | read GiB | I/O GB/s | stall %% | prefetch precision %% | recall %% |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|\n");
      for (const auto& r : rows) {
        const ExpertCacheStats& c = r.cache;
        const double lk = c.lookups ? double(c.lookups) : 1.0;
        std::printf("| %s | %.2f | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f | %.1f |\n", r.test.c_str(), r.mean,
                    100 * c.hit_rate(), 100.0 * double(c.inflight_hits) / lk, double(c.bytes_read) / double(1ull << 30),
                    c.io_gbs(), r.seconds > 0 ? 100 * c.stall_s / r.seconds : 0.0, 100 * c.precision(),
                    100 * c.recall());
      }
    }
    if (const std::string g = be.fact("gpu_expert_cache"); !g.empty()) {
      std::printf("\ngpu expert cache: %s\n", g.c_str());
      if (ceil.h2d_gbs > 0) std::printf("host-to-device: %.1f GB/s (pinned, measured now)\n", ceil.h2d_gbs);
    }
    if (const std::string d = be.fact("device_tables"); !d.empty()) std::printf("device tables: %s\n", d.c_str());
    if (!be.fact("gpu_miss_bytes").empty() && ceil.h2d_gbs > 0) {
      // The acceptance bound of a streamed decode: max(resident time, miss bytes / pinned rate).
      // With --alternate a test's two variants share one count.
      std::printf("\n| test | ms / token | GPU misses MB / token | their link time at %.1f GB/s, ms / token |\n|---|---|---|---|\n",
                  ceil.h2d_gbs);
      for (const auto& r : rows) {
        const double mb = r.gpu_miss_tokens > 0 ? r.gpu_miss_bytes / r.gpu_miss_tokens / 1e6 : 0.0;
        std::printf("| %s | %.3f | %.2f | %.3f |\n", r.test.c_str(), r.mean > 0 ? 1e3 / r.mean : 0.0, mb,
                    mb / ceil.h2d_gbs);
      }
    }
    if (const std::string c = be.fact("cpu_experts"); !c.empty()) std::printf("cpu experts: %s\n", c.c_str());
    if (const std::string a = be.fact("auto_choice"); !a.empty()) std::printf("auto choice: %s\n", a.c_str());
    if (const std::string g = be.fact("gpu_memory"); !g.empty()) std::printf("gpu memory: %s\n", g.c_str());
    finish_streaming(*model, a->stream, measured_s);
    return 0;
  };
}

}  // namespace moeflux::cli
