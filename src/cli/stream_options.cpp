// Expert streaming options: parsing into StreamOptions, the end-of-run report.
#include "cli/stream_options.h"

#include <unistd.h>

#include <cstdio>

#include "cli/load_progress.h"
#include "cli/model_path.h"
#include "core/error.h"
#include "format/pack_store.h"
#include "stream/routing_profile.h"
#include "stream/stream_report.h"

namespace moeflux::cli {

void add_stream_options(CLI::App* sub, StreamArgs& a) {
  auto* g = sub->add_option_group("expert streaming (packs)");
  g->add_option("--expert-cache", a.expert_cache,
                "Host memory for experts: a size (8G, 512M), a share of all experts (30%) or auto "
                "(no cache when all experts fit in half the RAM: the pack is read into memory, or mapped with --mmap)");
  g->add_option("--io", a.io, "Expert reads: buffered (page cache), direct (O_DIRECT), mmap (no cache)")
      ->check(CLI::IsMember({"buffered", "direct", "mmap"}));
  g->add_option("--io-engine", a.engine, "pread (reader threads) or uring (io_uring)")
      ->check(CLI::IsMember({"pread", "uring"}));
  g->add_option("--io-threads", a.io_threads, "Demand reader threads (pread; plus half as many low-priority prefetch readers) or queue depth (uring)")
      ->check(CLI::Range(1, 256));
  g->add_option("--cache-policy", a.policy, "Eviction: lru or lfu (frequency, LRU among equals)")
      ->check(CLI::IsMember({"lru", "lfu"}))
      ->each([&a](const std::string&) { a.cache_policy_given = true; });
  g->add_flag("--no-prefetch", a.no_prefetch, "Do not prefetch the next layer's predicted experts");
  g->add_flag("--no-verify-experts", a.no_verify,
              "Do not check the checksum of expert records read from disk into the expert cache or the "
              "resident copy (checked by default; dense weights are always checked at load)");
  g->add_flag("--verify-experts", a.verify, "Accepted for compatibility: expert records are checked by default");
  g->add_option("--pin-profile", a.pin_profile, "Routing profile (JSON) whose most used experts stay resident");
  g->add_option("--pin-share", a.pin_share, "Share of the cache the pinned experts may take")
      ->check(CLI::Range(0.0, 1.0));
  g->add_option("--save-profile", a.save_profile, "Write this run's expert usage counts (a routing profile)");
  g->add_flag("--mlock", a.mlock, "Lock the dense weights in RAM");
  g->add_flag("--mmap", a.mmap,
              "Map a pack that fits in half the RAM instead of copying it into (huge-page) memory: "
              "faster start, shared page cache, slower decode");
  g->add_flag("--no-repack", a.no_repack,
              "Keep a resident pack's 4-bit weights in file order (by default they are rewritten at load "
              "into the layout the integer decode kernels of AVX-512 VNNI and, on AMD, AVX2 read fastest, "
              "where those kernels are in use)");
  g->add_flag("--stats", a.stats, "Print expert cache statistics to stderr");
}

StreamOptions StreamArgs::options() const {
  StreamOptions o;
  o.enabled = io != "mmap";
  o.budget = expert_cache;
  o.cache.io = io == "direct" ? IoMode::Direct : IoMode::Buffered;
  o.cache.engine = engine == "uring" ? IoEngine::Uring : IoEngine::Pread;
  o.cache.io_threads = io_threads;
  o.cache.policy = policy == "lfu" ? CachePolicy::Lfu : CachePolicy::Lru;
  o.cache.prefetch = !no_prefetch;
  if (verify && no_verify) fail("--verify-experts and --no-verify-experts contradict each other");
  o.cache.verify = !no_verify;
  o.pin_profile = pin_profile;
  o.pin_share = pin_share;
  o.mlock_dense = mlock;
  o.resident = !mmap;
  o.need_cache = !save_profile.empty() || cache_policy_given;
  if (!o.enabled && (verify || !pin_profile.empty() || !save_profile.empty()))
    fail("--verify-experts, --pin-profile and --save-profile need the expert cache (not --io mmap)");
  parse_cache_budget(expert_cache, 1);  // syntax check before loading anything
  return o;
}

void check_stream_args(const std::string& dir, const StreamArgs& a) {
  if (a.checked) return;
  a.checked = true;
  const StreamOptions o = a.options();
  if (check_model_path(dir) == ModelPathKind::Checkpoint) {
    if (a.expert_cache != "auto")
      std::fprintf(stderr, "warning: --expert-cache applies only to packs; %s is a checkpoint directory, read through "
                   "its memory map (moeflux convert makes a pack of it)\n", dir.c_str());
    return;
  }
  check_pack_cache_budget(dir, o);
}

std::unique_ptr<Model> load_model_cli(const std::string& dir, const StreamArgs& a, const ComputeArgs& c,
                                      double* load_s) {
  check_stream_args(dir, a);
  auto backend = make_backend(c.backend_options(a.no_repack ? Repack::Off : Repack::Auto));
  LoadProgress progress(isatty(STDERR_FILENO) ? stderr : nullptr, dir);
  auto m = load_model(dir, a.options(), std::move(backend));
  const double secs = progress.finish();
  if (load_s) *load_s = secs;
  if (!expert_cache(*m) && (!a.save_profile.empty() || !a.pin_profile.empty()))
    fail(dir, ": --save-profile / --pin-profile need a pack (convert the checkpoint first)");
  return m;
}

void finish_streaming(const Model& m, const StreamArgs& a, double elapsed_s) {
  if (!expert_cache(m)) {
    if (a.stats) std::fprintf(stderr, "expert cache: not in use (checkpoint directory or --io mmap)\n");
    return;
  }
  const ExpertCache& c = *expert_cache(m);
  if (!a.save_profile.empty()) save_routing_profile(a.save_profile, c.layers(), c.access_counts());
  if (a.stats) std::fprintf(stderr, "%s", format_stream_stats(c.stats(), c.options(), elapsed_s).c_str());
}

}  // namespace moeflux::cli
