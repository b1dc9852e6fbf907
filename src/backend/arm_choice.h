// Which of two ways to run a kind of step is faster, learnt from the steps themselves
// (--moe-misses auto: a step's experts through the device tables, or split between the copy
// and the CPU). Each way is tried a few times in turn, then the faster one by median time a
// row runs, the other tried again every `probe_every` steps so that a change in the workload
// is seen. Free of CUDA so that it is tested on any machine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>

namespace moeflux {

class ArmChoice {
 public:
  static constexpr int kArms = 2;
  // explore: samples of each arm before choosing; probe_every: steps between tries of the
  // arm not chosen (at least 2).
  explicit ArmChoice(int explore = 5, int probe_every = 32);

  int pick();  // the arm of the next step
  // A step of `rows` rows that ran arm `arm` in `seconds` (ignored unless both are positive).
  void record(int arm, double seconds, int64_t rows);
  // Median seconds a row of the arm's last samples; 0 before any.
  double estimate(int arm) const;
  uint64_t steps(int arm) const { return steps_[arm]; }
  int chosen() const;  // the arm with the lower estimate (0 on a tie or with no samples)

 private:
  static constexpr size_t kKeep = 7;  // samples an estimate is the median of
  int explore_, probe_every_;
  std::deque<double> samples_[kArms];
  uint64_t steps_[kArms] = {0, 0};
  uint64_t picks_ = 0;
};

}  // namespace moeflux
