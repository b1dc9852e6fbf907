// Decode speed of a pack with experts read through the memory map versus through a warm expert
// cache (every expert already resident: no reads, no stalls), same tokens, same process. Tells
// whether the streaming path costs anything beyond its I/O.
// Usage: stream_warm PACK [TOKENS=16] [PASSES=3]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/session.h"
#include "stream/expert_cache.h"
#include "stream/streaming.h"

using namespace moeflux;

namespace {
double decode_tps(const Model& m, const std::vector<int32_t>& ids) {
  Session s(m);
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t id : ids) s.forward(std::span<const int32_t>(&id, 1), {.all_logits = false});
  return double(ids.size()) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: stream_warm PACK [TOKENS] [PASSES]\n");
    return 2;
  }
  const int n = argc > 2 ? std::atoi(argv[2]) : 16, passes = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(1000 + 37 * i);
  try {
    StreamOptions off;
    off.enabled = false;
    StreamOptions on;
    on.budget = "100%";
    on.cache.prefetch = false;
    auto mapped = load_model(argv[1], off);
    auto cached = load_model(argv[1], on);
    decode_tps(*cached, ids);  // fills the cache
    decode_tps(*mapped, ids);  // maps the pages
    for (int p = 0; p < passes; ++p) {
      ExpertCache& cache = *expert_cache(*cached);
      cache.reset_stats();
      const double a = decode_tps(*mapped, ids), b = decode_tps(*cached, ids);
      const auto st = cache.stats();
      std::printf("pass %d: mmap %.2f tok/s | warm cache %.2f tok/s (misses %llu, stall %.3f s)\n", p, a, b,
                  (unsigned long long)st.misses, st.stall_s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stream_warm: %s\n", e.what());
    return 1;
  }
}
