// The split of GPU expert cache misses between the copy and the CPU (--moe-misses auto), and
// the smoothing of the rates it is made from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/miss_split.h"

namespace moeflux {
namespace {

int on_cpu(const std::vector<bool>& v) {
  int n = 0;
  for (bool b : v) n += b;
  return n;
}

TEST(MissSplit, EqualRatesSplitEqualMissesInHalf) {
  TierRates r;
  r.h2d_bps = r.cpu_bps = 1e9;
  const std::vector<size_t> bytes(8, 1000000);
  const std::vector<int32_t> rows(8, 1);
  EXPECT_EQ(on_cpu(split_misses(bytes, rows, r)), 4);
}

TEST(MissSplit, BothSidesFinishWithinOneMissOfEachOther) {
  const std::vector<size_t> bytes(16, 1000000);
  const std::vector<int32_t> rows(16, 1);
  for (const double cpu_bps : {0.25e9, 1e9, 3e9, 7e9}) {
    SCOPED_TRACE(cpu_bps);
    TierRates r;
    r.h2d_bps = 3e9, r.cpu_bps = cpu_bps;
    const int n = on_cpu(split_misses(bytes, rows, r));
    const double c = 1e6 / r.h2d_bps, p = 1e6 / r.cpu_bps;
    EXPECT_LE(std::abs(n * p - (16 - n) * c), std::max(c, p) * (1 + 1e-9));
  }
  TierRates r;
  r.h2d_bps = 3e9, r.cpu_bps = 1e12;  // a CPU far faster than the link takes all
  EXPECT_EQ(on_cpu(split_misses(bytes, rows, r)), 16);
  r.cpu_bps = 1e6;  // far slower takes none
  EXPECT_EQ(on_cpu(split_misses(bytes, rows, r)), 0);
}

TEST(MissSplit, ExpertsWithManyRowsGoToTheCopy) {
  TierRates r;
  r.h2d_bps = r.cpu_bps = 1e9;
  // One expert routed 40 rows costs the CPU 40 copies' time: the copy takes it, the CPU the rest.
  const std::vector<size_t> bytes(5, 1000000);
  const std::vector<int32_t> rows = {1, 40, 1, 1, 1};
  const std::vector<bool> cpu = split_misses(bytes, rows, r);
  EXPECT_FALSE(cpu[1]);
  EXPECT_EQ(on_cpu(cpu), 2);  // the copy: it (1 unit) and two 1-row experts; the CPU: two
}

TEST(MissSplit, NoMissesNoSplit) {
  EXPECT_TRUE(split_misses({}, {}, TierRates{}).empty());
}

TEST(TierRates, FirstSampleSetsThenSmooths) {
  TierRates r;
  r.add_h2d(50e9, 1.0);
  EXPECT_DOUBLE_EQ(r.h2d_bps, 50e9);
  r.add_h2d(100e9, 1.0);
  EXPECT_DOUBLE_EQ(r.h2d_bps, 60e9);
  r.add_h2d(1e9, 0.0);  // no time measured: ignored
  r.add_cpu(0.0, 1.0);  // no work: ignored
  EXPECT_DOUBLE_EQ(r.h2d_bps, 60e9);
  EXPECT_EQ(r.cpu_samples, 0u);
}

}  // namespace
}  // namespace moeflux
