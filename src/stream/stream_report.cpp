// Formatting of ExpertCacheStats.
#include "stream/stream_report.h"

#include <sys/resource.h>

#include <cstdio>

namespace moeflux {

namespace {
double pct(uint64_t a, uint64_t b) { return b ? 100.0 * double(a) / double(b) : 0.0; }
}  // namespace

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  return buf;
}

uint64_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return uint64_t(u.ru_maxrss) * 1024;  // kilobytes on Linux
}

std::string format_stream_stats(const ExpertCacheStats& s, const ExpertCacheOptions& o, double elapsed_s) {
  char buf[1024];
  std::string out;
  std::snprintf(buf, sizeof buf, "expert cache: host budget %s (%s), %s I/O via %s x%d, prefetch %s%s\n",
                human_bytes(double(s.budget_bytes)).c_str(), std::string(cache_policy_name(o.policy)).c_str(),
                std::string(io_mode_name(o.io)).c_str(), std::string(io_engine_name(o.engine)).c_str(),
                o.io_threads, o.prefetch ? "on" : "off", o.verify ? ", records checked" : ", records not checked");
  out += buf;
  std::snprintf(buf, sizeof buf,
                "  host tier: %llu lookups, %llu hits (%.1f%%), %llu hits in flight, %llu misses; "
                "resident %s, peak %s, %llu evictions\n",
                (unsigned long long)s.lookups, (unsigned long long)s.hits, pct(s.hits, s.lookups),
                (unsigned long long)s.inflight_hits, (unsigned long long)s.misses, human_bytes(double(s.resident_bytes)).c_str(),
                human_bytes(double(s.peak_bytes)).c_str(), (unsigned long long)s.evictions);
  out += buf;
  std::snprintf(buf, sizeof buf,
                "  prefetch: %llu issued, %llu used, %llu dropped (no room); prediction precision %.1f%%, "
                "recall %.1f%%\n",
                (unsigned long long)s.prefetch_issued, (unsigned long long)s.prefetch_used,
                (unsigned long long)s.prefetch_dropped, 100 * s.precision(), 100 * s.recall());
  out += buf;
  std::snprintf(buf, sizeof buf,
                "  I/O: %llu reads, %s, %.2f GB/s while reading (%.2f s busy), %llu failed, %llu repacked; "
                "stalled %.3f s (%.1f%% of %.3f s)\n",
                (unsigned long long)s.reads, human_bytes(double(s.bytes_read)).c_str(), s.io_gbs(), s.io_busy_s,
                (unsigned long long)s.failures, (unsigned long long)s.transformed, s.stall_s,
                elapsed_s > 0 ? 100 * s.stall_s / elapsed_s : 0.0, elapsed_s);
  out += buf;
  std::snprintf(buf, sizeof buf, "  process peak RSS %s\n", human_bytes(double(peak_rss_bytes())).c_str());
  out += buf;
  return out;
}

nlohmann::ordered_json stream_stats_json(const ExpertCacheStats& s, const ExpertCacheOptions& o) {
  return {{"budget_bytes", s.budget_bytes},
          {"policy", cache_policy_name(o.policy)},
          {"io", io_mode_name(o.io)},
          {"io_engine", io_engine_name(o.engine)},
          {"prefetch", o.prefetch},
          {"lookups", s.lookups},
          {"hits", s.hits},
          {"inflight_hits", s.inflight_hits},
          {"misses", s.misses},
          {"hit_rate", s.hit_rate()},
          {"prefetch_issued", s.prefetch_issued},
          {"prefetch_used", s.prefetch_used},
          {"prefetch_dropped", s.prefetch_dropped},
          {"precision", s.precision()},
          {"recall", s.recall()},
          {"reads", s.reads},
          {"bytes_read", s.bytes_read},
          {"io_busy_s", s.io_busy_s},
          {"io_gbs", s.io_gbs()},
          {"stall_s", s.stall_s},
          {"evictions", s.evictions},
          {"failures", s.failures},
          {"repacked_records", s.transformed},
          {"peak_bytes", s.peak_bytes}};
}

}  // namespace moeflux
