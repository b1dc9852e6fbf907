// Phase totals (see phase_timer.h), kept in a small map under a mutex and printed at exit.
#include "core/phase_timer.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace moeflux {

namespace {
struct Phases {
  std::mutex mu;
  std::map<std::string, std::pair<double, long>> total;  // seconds, calls
  ~Phases() {
    for (const auto& [name, v] : total)
      std::fprintf(stderr, "phase %-28s %10.3f ms %8ld calls\n", name.c_str(), 1e3 * v.first, v.second);
  }
};
Phases& phases() {
  static Phases p;
  return p;
}
}  // namespace

std::atomic<bool> g_phases{false};

bool phases_enabled() { return g_phases.load(std::memory_order_relaxed); }

void enable_phases() { g_phases.store(true); }

void phase_add(const char* name, double seconds) {
  Phases& p = phases();
  std::lock_guard<std::mutex> lock(p.mu);
  auto& v = p.total[name];
  v.first += seconds, ++v.second;
}

}  // namespace moeflux
