// Human-readable and JSON summaries of the expert cache statistics (--stats, moeflux bench).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "stream/expert_cache.h"

namespace moeflux {

// Several lines; `elapsed_s` (the run's wall time, > 0) gives the share of time stalled.
std::string format_stream_stats(const ExpertCacheStats& s, const ExpertCacheOptions& o, double elapsed_s);
// "2.94 GiB" from 1e9 bytes up, else "413.99 MiB".
std::string human_bytes(double bytes);
// The process's peak resident set size in bytes (getrusage).
uint64_t peak_rss_bytes();
nlohmann::ordered_json stream_stats_json(const ExpertCacheStats& s, const ExpertCacheOptions& o);

}  // namespace moeflux
