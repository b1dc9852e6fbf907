#include "backend/arm_choice.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace moeflux {

ArmChoice::ArmChoice(int explore, int probe_every) : explore_(std::max(1, explore)), probe_every_(std::max(2, probe_every)) {}

int ArmChoice::chosen() const {
  const double a = estimate(0), b = estimate(1);
  return a > 0 && b > 0 && b < a ? 1 : 0;
}

int ArmChoice::pick() {
  const uint64_t n = picks_++;
  // Each arm in turn until both have their samples (an arm whose steps record nothing stops
  // being tried after 4 x explore of them).
  const auto exploring = [&](int arm) {
    return samples_[arm].size() < size_t(explore_) && steps_[arm] < uint64_t(4 * explore_);
  };
  if (exploring(0) || exploring(1)) {
    if (!exploring(0)) return 1;
    if (!exploring(1)) return 0;
    return steps_[1] < steps_[0] ? 1 : 0;
  }
  const int best = chosen();
  return n % uint64_t(probe_every_) == 0 ? 1 - best : best;
}

void ArmChoice::record(int arm, double seconds, int64_t rows) {
  ++steps_[arm];
  if (!(seconds > 0) || rows <= 0) return;
  std::deque<double>& s = samples_[arm];
  s.push_back(seconds / double(rows));
  if (s.size() > kKeep) s.pop_front();
}

double ArmChoice::estimate(int arm) const {
  const std::deque<double>& s = samples_[arm];
  if (s.empty()) return 0;
  std::vector<double> v(s.begin(), s.end());
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace moeflux
