// The choice between two ways of running a kind of step from their measured times
// (--moe-misses auto).
#include <gtest/gtest.h>

#include <array>

#include "backend/arm_choice.h"

namespace moeflux {
namespace {

// Runs `steps` steps whose arms take cost[arm] seconds a row (rows a step), returning how many
// went to each arm.
std::array<int, 2> run(ArmChoice& c, std::array<double, 2> cost, int steps, int64_t rows = 1) {
  std::array<int, 2> n{0, 0};
  for (int i = 0; i < steps; ++i) {
    const int arm = c.pick();
    ++n[size_t(arm)];
    c.record(arm, cost[size_t(arm)] * double(rows), rows);
  }
  return n;
}

TEST(ArmChoice, TriesBothInTurnFirst) {
  ArmChoice c(3, 10);
  for (int i = 0; i < 6; ++i) {
    const int arm = c.pick();
    EXPECT_EQ(arm, i % 2) << "step " << i;
    c.record(arm, 1.0, 1);
  }
}

TEST(ArmChoice, KeepsToTheFasterArmAndProbesTheOther) {
  for (int fast = 0; fast < 2; ++fast) {
    ArmChoice c(3, 16);
    std::array<double, 2> cost{2e-3, 2e-3};
    cost[size_t(fast)] = 1e-3;
    const auto n = run(c, cost, 3 * 2 + 160);
    EXPECT_EQ(c.chosen(), fast);
    EXPECT_EQ(n[size_t(1 - fast)], 3 + 10) << "explored 3 times, then probed once every 16 of 160 steps";
    EXPECT_DOUBLE_EQ(c.estimate(fast), 1e-3);
    EXPECT_DOUBLE_EQ(c.estimate(1 - fast), 2e-3);
  }
}

TEST(ArmChoice, ComparesTimeARowNotTimeAStep) {
  ArmChoice c(2, 8);
  for (int i = 0; i < 4; ++i) {  // arm 0: 8 rows in 8 ms; arm 1: 2 rows in 4 ms
    const int arm = c.pick();
    c.record(arm, arm == 0 ? 8e-3 : 4e-3, arm == 0 ? 8 : 2);
  }
  EXPECT_EQ(c.chosen(), 0);
  EXPECT_DOUBLE_EQ(c.estimate(1), 2e-3);
}

TEST(ArmChoice, OneSlowStepDoesNotMoveTheChoice) {
  ArmChoice c(5, 64);
  run(c, {1e-3, 1.5e-3}, 10);
  c.record(0, 1.0, 1);  // a step that built the tables, or met a busy machine
  EXPECT_EQ(c.chosen(), 0);
  EXPECT_DOUBLE_EQ(c.estimate(0), 1e-3);
}

TEST(ArmChoice, FollowsAChangeInTheWorkload) {
  ArmChoice c(3, 4);
  run(c, {1e-3, 3e-3}, 20);
  EXPECT_EQ(c.chosen(), 0);
  run(c, {5e-3, 3e-3}, 60);  // arm 0 slows: the probes of arm 1 see it
  EXPECT_EQ(c.chosen(), 1);
}

TEST(ArmChoice, AnArmThatNeverRecordsStopsBeingTried) {
  ArmChoice c(2, 1000);
  int arm1 = 0;
  for (int i = 0; i < 40; ++i) {
    const int arm = c.pick();
    if (arm == 1) {
      ++arm1;
      c.record(1, 0, 1);  // failed steps: no time
    } else {
      c.record(0, 1e-3, 1);
    }
  }
  EXPECT_EQ(arm1, 8);
  EXPECT_EQ(c.chosen(), 0);
}

}  // namespace
}  // namespace moeflux
