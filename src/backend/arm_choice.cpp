#include "backend/arm_choice.h"

#include <algorithm>
#include <vector>

namespace moeflux {

ArmChoice::ArmChoice(int explore, int probe_every)
    : explore_(std::max(1, explore)), probe_every_(std::max(2 * kBlock, probe_every)), wait_(probe_every_) {}

bool ArmChoice::exploring() const {
  // Until the ratios are in; an arm whose steps record nothing ends it after 8 x explore blocks.
  return ratios_.size() < size_t(explore_) && blocks_ < uint64_t(8 * explore_);
}

int ArmChoice::pick() {
  if (block_left_ == 0) {
    if (exploring()) {
      block_arm_ = int(blocks_ % 2);
    } else if (since_probe_ >= uint64_t(wait_)) {
      block_arm_ = 1 - chosen(), since_probe_ = 0;
    } else {
      block_arm_ = chosen();
    }
    ++blocks_, block_left_ = kBlock;
  }
  --block_left_, ++since_probe_;
  return block_arm_;
}

void ArmChoice::record(int arm, double seconds, int64_t rows) {
  ++steps_[arm];
  if (block_left_ != 0 || arm != block_arm_ || !(seconds > 0) || rows <= 0) return;
  const double s = seconds / double(rows);  // the block's last step
  if (last_arm_ >= 0 && last_arm_ != arm) {
    const bool probing = !exploring();
    const int before = chosen();
    ratios_.push_back(arm == 1 ? s / last_sample_ : last_sample_ / s);
    if (ratios_.size() > kKeep) ratios_.pop_front();
    if (chosen() != before) wait_ = probe_every_;
    else if (probing && arm != before) wait_ = std::min(2 * wait_, kBackoff * probe_every_);  // a probe confirmed it
  }
  last_arm_ = arm, last_sample_ = s;
}

double ArmChoice::ratio() const {
  if (ratios_.empty()) return 0;
  std::vector<double> v(ratios_.begin(), ratios_.end());
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace moeflux
