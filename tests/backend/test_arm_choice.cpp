// The choice between two ways of running a kind of step from their measured times
// (--moe-misses auto).
#include <gtest/gtest.h>

#include <array>
#include <functional>

#include "backend/arm_choice.h"

namespace moeflux {
namespace {

// Runs `steps` steps; step i of arm a takes cost(i, a, previous arm) seconds a row. Returns how
// many went to each arm.
using Cost = std::function<double(int step, int arm, int prev)>;
std::array<int, 2> run(ArmChoice& c, const Cost& cost, int steps, int64_t rows = 1) {
  std::array<int, 2> n{0, 0};
  int prev = -1;
  for (int i = 0; i < steps; ++i) {
    const int arm = c.pick();
    ++n[size_t(arm)];
    c.record(arm, cost(i, arm, prev) * double(rows), rows);
    prev = arm;
  }
  return n;
}
Cost fixed(double a0, double a1) {
  return [=](int, int arm, int) { return arm ? a1 : a0; };
}

TEST(ArmChoice, TriesBothInTurnInBlocks) {
  ArmChoice c(3, 100);  // 3 ratios: 4 blocks
  for (int i = 0; i < 4 * ArmChoice::kBlock; ++i) {
    const int arm = c.pick();
    EXPECT_EQ(arm, i / ArmChoice::kBlock % 2) << "step " << i;
    c.record(arm, 1e-3, 1);
  }
}

TEST(ArmChoice, KeepsToTheFasterArmAndProbesTheOther) {
  for (int fast = 0; fast < 2; ++fast) {
    SCOPED_TRACE(fast);
    ArmChoice c(3, 16);
    const auto n = run(c, fast ? fixed(2e-3, 1e-3) : fixed(1e-3, 2e-3), 400);
    EXPECT_EQ(c.chosen(), fast);
    EXPECT_DOUBLE_EQ(c.ratio(), fast ? 0.5 : 2.0);
    // Exploring: 4 blocks (3 ratios), 2 of them the slow arm's; then probes of one block after
    // 16, 32, 64, 128, 128 ... steps (each starts at the end of a block).
    const int probes = n[size_t(1 - fast)] / ArmChoice::kBlock - 2;
    EXPECT_EQ(n[size_t(1 - fast)] % ArmChoice::kBlock, 0);
    EXPECT_GE(probes, 4);
    EXPECT_LE(probes, 5);
  }
}

// A choice that holds is probed less and less often: at most one block in kBackoff x
// probe_every steps once the waits have grown, and never less.
TEST(ArmChoice, ProbesLessOftenWhileTheChoiceHolds) {
  ArmChoice c(3, 16);
  run(c, fixed(1e-3, 1.25e-3), 2000);
  const auto n = run(c, fixed(1e-3, 1.25e-3), 4000);
  const int longest = ArmChoice::kBackoff * 16;
  EXPECT_GE(n[1], ArmChoice::kBlock * (4000 / (longest + 2 * ArmChoice::kBlock) - 1));
  EXPECT_LE(n[1], ArmChoice::kBlock * (4000 / longest + 1));
  EXPECT_EQ(c.chosen(), 0);
}

TEST(ArmChoice, ComparesTimeARowNotTimeAStep) {
  ArmChoice c(2, 8);
  for (int i = 0; i < 12; ++i) {  // arm 0: 8 rows in 8 ms; arm 1: 2 rows in 4 ms
    const int arm = c.pick();
    c.record(arm, arm == 0 ? 8e-3 : 4e-3, arm == 0 ? 8 : 2);
  }
  EXPECT_EQ(c.chosen(), 0);
  EXPECT_DOUBLE_EQ(c.ratio(), 2.0);
}

// The first steps after a switch of arms pay for it (here the first two, 3x): the blocks'
// last steps compare the arms as they run when kept to.
TEST(ArmChoice, TheCostOfSwitchingDoesNotDecide) {
  for (int fast = 0; fast < 2; ++fast) {
    ArmChoice c(4, 32);
    int since = 0, prev = -1;
    for (int i = 0; i < 300; ++i) {
      const int arm = c.pick();
      since = arm == prev ? since + 1 : 0, prev = arm;
      c.record(arm, (arm == fast ? 1e-3 : 1.2e-3) * (i > 0 && since < 2 ? 3 : 1), 1);
    }
    EXPECT_EQ(c.chosen(), fast);
  }
}

// Both arms slow as the context grows (and faster again at each new sequence): arm 1 is 10%
// faster at any one time. Samples of the two arms taken at different times would compare the
// times, not the arms.
TEST(ArmChoice, ADriftingWorkloadDoesNotDecide) {
  for (int fast = 0; fast < 2; ++fast) {
    ArmChoice c(4, 48);
    run(c, [&](int i, int arm, int) { return (1e-3 + 1e-4 * (i % 128)) * (arm == fast ? 1.0 : 1.1); }, 1000);
    EXPECT_EQ(c.chosen(), fast);
  }
}

TEST(ArmChoice, OneSlowStepDoesNotMoveTheChoice) {
  ArmChoice c(5, 64);
  run(c, fixed(1e-3, 1.5e-3), 40);
  ASSERT_EQ(c.chosen(), 0);
  run(c, [](int i, int arm, int) { return i == 1 ? 1.0 : (arm ? 1.5e-3 : 1e-3); }, 40);  // a busy machine, once
  EXPECT_EQ(c.chosen(), 0);
}

TEST(ArmChoice, FollowsAChangeInTheWorkload) {
  ArmChoice c(3, 8);
  run(c, fixed(1e-3, 3e-3), 40);
  EXPECT_EQ(c.chosen(), 0);
  run(c, fixed(5e-3, 3e-3), 200);  // arm 0 slows: the probes of arm 1 see it
  EXPECT_EQ(c.chosen(), 1);
}

TEST(ArmChoice, AnArmThatNeverRecordsStopsBeingTried) {
  ArmChoice c(2, 1000);
  const auto n = run(c, fixed(1e-3, 0), 100);  // arm 1's steps fail: no time
  EXPECT_EQ(n[1], 8 * ArmChoice::kBlock);      // 8 x explore blocks, half of them arm 1's
  EXPECT_EQ(c.chosen(), 0);
}

}  // namespace
}  // namespace moeflux
