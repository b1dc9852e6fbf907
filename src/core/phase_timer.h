// Wall time per named phase of a forward pass, for finding the serial parts of a run on a
// machine without a profiler: once enable_phases() has run (moeflux bench --phases), the totals
// are printed to stderr at exit. Off (one relaxed load per phase) otherwise.
#pragma once
#include <chrono>

namespace moeflux {

bool phases_enabled();
void enable_phases();
void phase_add(const char* name, double seconds);

// Adds the wall time from its start (or the last next()) to the current phase name (a string
// literal) when phases are enabled; next() closes that phase and opens another, so the phases
// of one scope do not overlap.
class PhaseTimer {
 public:
  explicit PhaseTimer(const char* name) : name_(phases_enabled() ? name : nullptr) {
    if (name_) t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() { next(nullptr); }
  void next(const char* name) {
    if (!name_) return;
    const auto t = std::chrono::steady_clock::now();
    phase_add(name_, std::chrono::duration<double>(t - t0_).count());
    name_ = name, t0_ = t;
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace moeflux
