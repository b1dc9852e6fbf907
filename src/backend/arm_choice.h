// Which of two ways to run a kind of step is faster, learnt from the steps themselves
// (--moe-misses auto: a step's experts through the device tables, or split between the copy
// and the CPU). Steps run in blocks of three of one arm; a block's sample is its last step's
// time a row (the first two pay for the switch: the device tables switch an entry to a slot
// that the other arm filled at the end of the step after the one that routed to it). Adjacent
// blocks of the two arms give a ratio, arm 1's time over arm 0's, that the slow drift of a workload (a context that grows, a cache that warms after a prefill) does not
// bias; the choice follows the median of the last ratios. The arms alternate until `explore`
// ratios are in, then the faster one runs, the other for one block after `probe_every` steps;
// each probe that leaves the choice as it was doubles the wait for the next (up to kBackoff
// times), and a change of choice brings it back to `probe_every`.
// Free of CUDA so that it is tested on any machine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>

namespace moeflux {

class ArmChoice {
 public:
  static constexpr int kBlock = 3;    // steps of one arm in a row
  static constexpr int kBackoff = 8;  // the longest wait between probes, in probe_every

  explicit ArmChoice(int explore = 4, int probe_every = 64);

  int pick();  // the arm of the next step
  // The step just picked ran arm `arm`: `rows` rows in `seconds` (no sample unless both are
  // positive).
  void record(int arm, double seconds, int64_t rows);
  // Median of the last ratios of arm 1's time a row to arm 0's; 0 before any.
  double ratio() const;
  int chosen() const { return ratios_.empty() || ratio() >= 1.0 ? 0 : 1; }
  uint64_t steps(int arm) const { return steps_[arm]; }

 private:
  static constexpr size_t kKeep = 7;  // ratios the median is of
  bool exploring() const;
  int explore_, probe_every_;
  int wait_;                            // steps between probes now
  int block_arm_ = 0, block_left_ = 0;  // the current block's arm and its steps still to pick
  uint64_t blocks_ = 0, since_probe_ = 0;  // blocks begun; steps since the last probe
  int last_arm_ = -1;                      // the last finished block's arm (-1: none) ...
  double last_sample_ = 0;                 // ... and its sample
  std::deque<double> ratios_;
  uint64_t steps_[2] = {0, 0};
};

}  // namespace moeflux
