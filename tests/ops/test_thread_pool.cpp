// ThreadPool (core/thread_pool.h): coverage of the index range, exceptions, back-to-back jobs,
// nesting, the caller's poll-then-sleep wait with its profile counters and its wake-ups, and
// more threads than CPUs: bounded time, narrowing on stalls (and the width rule alone), refused
// and capped counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 7, 1000, 4099})
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          EXPECT_LE(e - b, grain);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << threads << " " << n << " " << grain;
      }
  }
}

// Guided chunks: every index once; each chunk a multiple of `mult` and at least min_grain,
// except one that ends the range; on several threads, the first chunk the longest.
TEST(ThreadPool, GuidedChunksCoverEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5})
    for (int64_t n : {0, 1, 7, 1000, 4099})
      for (auto grain : {std::pair<int64_t, int64_t>{1, 1}, {3, 1}, {8, 4}, {128, 128}, {5000, 1}}) {
        const int64_t min_grain = grain.first, mult = grain.second;  // clang 14: no lambda capture of bindings
        ThreadPool pool(threads);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> longest{0}, first_len{0};
        pool.parallel_for_guided(n, min_grain, mult, [&](int64_t b, int64_t e) {
          EXPECT_LT(b, e);
          if (e < n) {
            EXPECT_EQ((e - b) % mult, 0) << b << " " << e;
            EXPECT_GE(e - b, min_grain);
          }
          if (b == 0) first_len = e - b;
          for (int64_t cur = longest.load(); e - b > cur && !longest.compare_exchange_weak(cur, e - b);) {
          }
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << threads << " " << n << " " << min_grain;
        if (n > 0) {
          EXPECT_EQ(first_len.load(), longest.load()) << threads << " " << n << " " << min_grain;
        }
        if (threads > 1 && n >= 1000 && min_grain == 1) {
          EXPECT_LT(first_len.load(), n);  // really split
        }
      }
}

TEST(ThreadPool, ExceptionReachesTheCallerAndPoolSurvives) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1, [](int64_t b, int64_t) {
                 if (b == 57) throw std::runtime_error("chunk 57");
               }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

// Decode issues thousands of small jobs back to back: workers pick each up without the lock
// while spinning, and after sleeping (the pause between the two batches outlasts the spin).
TEST(ThreadPool, BackToBackJobsEachRunOnce) {
  ThreadPool pool(3);
  for (int batch = 0; batch < 2; ++batch) {
    for (int job = 0; job < 500; ++job) {
      const int64_t n = 1 + job % 17;
      std::atomic<int64_t> sum{0};
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum += i + 1;
      });
      ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> count{0};
  pool.parallel_for(8, 1, [&](int64_t, int64_t) {
    pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { count += e - b; });
  });
  EXPECT_EQ(count.load(), 80);
}

// A caller whose workers are still in their chunks after its poll sleeps on them, and counts
// it; the result is the same. (An explicit max_running: the pool runs 3 threads on any machine.)
TEST(ThreadPool, CallerSleepsOnSlowWorkersAndCountsIt) {
  ThreadPool pool(3, 3);
  ASSERT_EQ(pool.running(), 3);
  const auto caller = std::this_thread::get_id();
  ThreadPool::reset_profile();
  ThreadPool::set_profiling(true);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 3; ++job)
    pool.parallel_for(3, 1, [&](int64_t b, int64_t e) {
      // The workers' chunks outlast the caller's by 10 ms, and the caller's are long enough
      // that the region is slow, not stalled on one thread (which would narrow the pool).
      std::this_thread::sleep_for(std::chrono::milliseconds(std::this_thread::get_id() == caller ? 10 : 20));
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
  ThreadPool::set_profiling(false);
  EXPECT_EQ(sum.load(), 3 * 6);
  const PoolProfile p = ThreadPool::profile();
  EXPECT_EQ(p.regions, 3u);
  EXPECT_GT(p.tail_s, 0.0);
  EXPECT_GE(p.slept, 1u);  // the workers' 10 ms more outlast the caller's poll
}

// Workers that sleep in every region's chunks make the caller sleep on them in every region:
// the workers' done slots and the caller's wait must not lose a wake-up between them (a lost
// one hangs the test).
TEST(ThreadPool, CallerSleepingInEveryRegionMissesNoWorker) {
  ThreadPool pool(4, 4);
  for (int job = 0; job < 300; ++job) {
    std::atomic<int64_t> sum{0};
    const int64_t n = 4 + job % 5;
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      std::this_thread::sleep_for(std::chrono::microseconds(2 * ThreadPool::kStallUs));
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
  }
}

// Seconds that `jobs` regions of `n` short chunks take on `pool`.
double batch_seconds(ThreadPool& pool, int jobs, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  for (int job = 0; job < jobs; ++job)
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        double x = double(i + job);
        for (int k = 0; k < 200; ++k) x = x * 0.999 + 1.0;  // ~0.5 us of work
        out[size_t(i)] = x;
      }
    });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Four times as many threads as CPUs finish a batch of small regions about as fast as one
// per CPU (the threads beyond the CPUs do not run), not hundreds of times slower.
TEST(ThreadPool, MoreThreadsThanCpusFinishInBoundedTime) {
  const int cpus = available_cpus();
  ThreadPool fit(cpus), over(4 * cpus);
  EXPECT_EQ(over.size(), 4 * cpus);
  EXPECT_EQ(over.running(), cpus);
  batch_seconds(fit, 200, 64), batch_seconds(over, 200, 64);  // warm-up
  const double t_fit = batch_seconds(fit, 2000, 64), t_over = batch_seconds(over, 2000, 64);
  EXPECT_LT(t_over, 3 * t_fit + 0.1) << "one per CPU " << t_fit << " s, four per CPU " << t_over << " s";
}

// The same with all of those threads running (max_running): the region waits for no thread
// that took no chunk, and no wait spins while a thread with work is off its CPU for long.
TEST(ThreadPool, OversubscribedThreadsFinishInBoundedTime) {
  const int cpus = available_cpus();
  ThreadPool fit(cpus, cpus), over(4 * cpus, 4 * cpus);
  EXPECT_EQ(over.running(), 4 * cpus);
  batch_seconds(fit, 200, 64), batch_seconds(over, 200, 64);
  const double t_fit = batch_seconds(fit, 2000, 64), t_over = batch_seconds(over, 2000, 64);
  EXPECT_LT(t_over, 5 * t_fit + 0.2) << "one per CPU " << t_fit << " s, four per CPU " << t_over << " s";
}

// Regions that wait long on one thread (as on one that lost its CPU), two in a row, narrow the
// pool by one thread; after a quiet spell it widens again. Results are the same throughout.
TEST(ThreadPool, StalledRegionNarrowsThePoolThenItWidens) {
  ThreadPool pool(2, 2);
  ASSERT_EQ(pool.width(), 2);
  const auto caller = std::this_thread::get_id();
  ThreadPool::reset_profile();
  ThreadPool::set_profiling(true);
  for (int job = 0; job < 100 && pool.width() == 2; ++job) {
    std::atomic<int64_t> sum{0};
    // The caller's chunk gives the worker time to claim the other, which then runs 10x longer.
    pool.parallel_for(2, 1, [&](int64_t b, int64_t e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::this_thread::get_id() == caller ? 1 : 10));
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
    ASSERT_EQ(sum.load(), 3);
  }
  ThreadPool::set_profiling(false);
  EXPECT_EQ(pool.width(), 1);
  EXPECT_GE(ThreadPool::profile().stalls, 1u);
  // Narrowed to one thread, a region runs on the caller and counts as an inline region.
  ThreadPool::reset_profile();
  ThreadPool::set_profiling(true);
  std::atomic<int64_t> inline_sum{0};
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { inline_sum += e - b; });
  ThreadPool::set_profiling(false);
  EXPECT_EQ(inline_sum.load(), 10);
  EXPECT_EQ(ThreadPool::profile().regions, 1u);
  if (pool.width() == 1) {  // (not widened yet: the quiet spell is 20 ms)
    EXPECT_EQ(ThreadPool::profile().inline_regions, 1u);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // longer than the first quiet spell
  std::atomic<int64_t> sum{0};
  std::atomic<int> width_in_region{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    width_in_region = pool.width();
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
  EXPECT_EQ(width_in_region.load(), 2);  // (afterwards it may have narrowed again on a busy machine)
}

// The width rule (PoolWidth), on a clock of the test's own: regions that do not stall never
// narrow the pool, however many, nor do stalls kStallPairNs apart; two stalls closer than that
// drop one thread (not below one); after a quiet spell the width rises again, one thread per
// region; a drop soon after a rise doubles the spell (up to its most), and 5 s without a drop
// bring it back to the least.
TEST(ThreadPool, WidthDropsOnlyOnStallsInPairsAndRisesAfterQuietSpells) {
  constexpr int64_t ms = 1'000'000, kMin = PoolWidth::kQuietMinNs, kPair = PoolWidth::kStallPairNs;
  PoolWidth rule(4);
  int64_t t = 0;
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(rule.update(false, t += 1000), 4) << i;  // 100 ms of unstalled regions
  for (int i = 0; i < 100; ++i) ASSERT_EQ(rule.update(true, t += kPair + 1), 4) << i;  // lone stalls
  EXPECT_EQ(rule.update(true, t += kPair), 3);  // a pair
  EXPECT_EQ(rule.update(true, t += 1), 3);      // the first of the next pair at this width
  EXPECT_EQ(rule.update(false, t += 1), 3);
  EXPECT_EQ(rule.update(true, t += 1), 2);
  const int64_t narrowed = t;
  EXPECT_EQ(rule.update(false, narrowed + kMin - 1), 2);  // still quiet
  EXPECT_EQ(rule.update(false, narrowed + kMin), 3);
  EXPECT_EQ(rule.update(false, narrowed + kMin + 1), 4);  // one per region once the spell is over
  EXPECT_EQ(rule.update(false, narrowed + kMin + 2), 4);  // never above running
  // A drop soon after the rise: the next spell is twice as long.
  t = narrowed + kMin + 10 * ms;
  EXPECT_EQ(rule.update(true, t), 4);
  EXPECT_EQ(rule.update(true, t += 1), 3);
  EXPECT_EQ(rule.update(false, t + 2 * kMin - 1), 3);
  EXPECT_EQ(rule.update(false, t + 2 * kMin), 4);
  // Drops right after each rise double the spell up to kQuietMaxNs.
  int64_t spell = 2 * kMin;
  for (int i = 0; i < 12; ++i) {
    const int64_t rise = t + spell;
    ASSERT_EQ(rule.update(true, rise + 1), 4) << i;
    t = rise + 2;
    ASSERT_EQ(rule.update(true, t), 3) << i;
    spell = std::min(2 * spell, PoolWidth::kQuietMaxNs);
    ASSERT_EQ(rule.update(false, t + spell - 1), 3) << i;
    ASSERT_EQ(rule.update(false, t + spell), 4) << i;
  }
  EXPECT_EQ(spell, PoolWidth::kQuietMaxNs);
  // kQuietResetNs without a drop: the least spell again.
  t += PoolWidth::kQuietResetNs + spell;
  EXPECT_EQ(rule.update(false, t), 4);
  EXPECT_EQ(rule.update(true, t += ms), 4);
  EXPECT_EQ(rule.update(true, t += ms), 3);
  EXPECT_EQ(rule.update(false, t + kMin), 4);
  // Never below one thread; a pool of one stays at one.
  PoolWidth two(2), one(1);
  EXPECT_EQ(two.update(true, ms), 2);
  EXPECT_EQ(two.update(true, 2 * ms), 1);
  EXPECT_EQ(two.update(true, 3 * ms), 1);
  EXPECT_EQ(two.update(true, 4 * ms), 1);
  EXPECT_EQ(one.update(true, ms), 1);
  EXPECT_EQ(one.update(true, 2 * ms), 1);
  EXPECT_EQ(one.update(false, 10 * kMin), 1);
}

// An item that waits for another item of its region (ThreadPool::wait_until) returns once it
// is ready, and a long wait counts as a stall of the region.
TEST(ThreadPool, WaitUntilOutlastsAStalledItemAndCountsIt) {
  ThreadPool pool(2, 2);
  std::atomic<bool> ready{false};
  std::atomic<int> waited{0};
  std::thread::id ran[2];
  ThreadPool::reset_profile();
  ThreadPool::set_profiling(true);
  pool.parallel_for(2, 1, [&](int64_t b, int64_t) {
    ran[b] = std::this_thread::get_id();
    if (b == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      ready.store(true);
    } else {
      ThreadPool::wait_until([&] { return ready.load(); });
      EXPECT_TRUE(ready.load());
      ++waited;
    }
  });
  ThreadPool::set_profiling(false);
  EXPECT_EQ(waited.load(), 1);
  const PoolProfile p = ThreadPool::profile();
  EXPECT_EQ(p.regions, 1u);
  if (ran[0] != ran[1]) {
    EXPECT_EQ(p.stalls, 1u);  // chunk 1 waited ~3 ms (unless one thread ran both in order)
  }
}

// Thread counts: negative or above kMaxThreads are refused with a message naming the count;
// more than the CPUs warns once and runs one thread per CPU, the work still split as asked.
TEST(ThreadPool, ThreadCountsAreCheckedAndCapped) {
  for (int bad : {-1, kMaxThreads + 1, 1024}) {
    try {
      set_cpu_threads(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("threads: " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  const int cpus = available_cpus();
  testing::internal::CaptureStderr();
  set_cpu_threads(4 * cpus);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find(std::to_string(4 * cpus) + " threads on " + std::to_string(cpus) + " CPUs"), std::string::npos)
      << warning;
  EXPECT_EQ(cpu_threads(), 4 * cpus);
  EXPECT_EQ(cpu_thread_pool().size(), 4 * cpus);
  EXPECT_EQ(cpu_thread_pool().running(), cpus);
  set_cpu_threads(0);
  EXPECT_EQ(cpu_thread_pool().size(), physical_core_count());
  EXPECT_GE(physical_core_count(), 1);
  EXPECT_LE(physical_core_count(), available_cpus());
}

// The command line refuses an absurd count at once, naming it (it used to start 1024 threads).
TEST(ThreadPool, BenchRefusesAnAbsurdThreadCount) {
  std::string out;
  const int rc = test::run_command(test::moeflux_exe() + " bench -m " + test::fixture_dir("qwen3_moe/q4") +
                                       " -p 1 -n 1 -r 1 -t 1024 2>&1",
                                   &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("threads: 1024"), std::string::npos) << out;
}

}  // namespace
}  // namespace moeflux
