// ThreadPool (core/thread_pool.h): coverage of the index range, exceptions, back-to-back jobs,
// nesting, and the caller's poll-then-sleep wait with its profile counters and its wake-ups.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

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
      for (auto [min_grain, mult] : {std::pair<int64_t, int64_t>{1, 1}, {3, 1}, {8, 4}, {128, 128}, {5000, 1}}) {
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

// The caller polls for the workers' last chunks for caller_spin_us(), then sleeps: with no
// poll it sleeps on slow workers, with a long one it does not; the result is the same.
TEST(ThreadPool, CallerPollsThenSleepsAndCountsIt) {
  ThreadPool pool(3);
  const int saved = ThreadPool::caller_spin_us();
  const auto caller = std::this_thread::get_id();
  auto slept_with = [&](int spin_us) {
    ThreadPool::set_caller_spin_us(spin_us);
    ThreadPool::reset_profile();
    ThreadPool::set_profiling(true);
    std::atomic<int64_t> sum{0};
    for (int job = 0; job < 3; ++job)
      pool.parallel_for(3, 1, [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() != caller) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        for (int64_t i = b; i < e; ++i) sum += i + 1;
      });
    ThreadPool::set_profiling(false);
    EXPECT_EQ(sum.load(), 3 * 6);
    const PoolProfile p = ThreadPool::profile();
    EXPECT_EQ(p.regions, 3u);
    EXPECT_GT(p.tail_s, 0.0);
    return p.slept;
  };
  EXPECT_GE(slept_with(0), 1u);              // workers sleep 20 ms in their chunks: the caller cannot outwait them
  EXPECT_EQ(slept_with(10'000'000), 0u);     // 10 s of polling outlasts them
  ThreadPool::set_caller_spin_us(saved);
  EXPECT_EQ(ThreadPool::caller_spin_us(), saved);
}

// With no poll the caller sleeps on the workers in every region: the workers' done slots and
// the caller's wait must not lose a wake-up between them (a lost one hangs the test).
TEST(ThreadPool, CallerSleepingInEveryRegionMissesNoWorker) {
  ThreadPool pool(4);
  const int saved = ThreadPool::caller_spin_us();
  ThreadPool::set_caller_spin_us(0);
  for (int job = 0; job < 3000; ++job) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(4 + job % 5, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
    const int64_t n = 4 + job % 5;
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
  }
  ThreadPool::set_caller_spin_us(saved);
}

// Threads out of chunks prefetch the ranges set for the next region (whatever the bytes: a
// prefetch never faults), the region's work is unchanged, and the ranges apply to that region only.
TEST(ThreadPool, IdlePrefetchRunsInOneRegionsTail) {
  ThreadPool pool(4);
  const int saved = ThreadPool::idle_prefetch_mode();
  std::vector<uint8_t> buf(size_t(1) << 20);
  const ThreadPool::PrefetchRange ranges[3] = {
      {buf.data(), int64_t(buf.size())}, {nullptr, 4096}, {buf.data() + 100, 5000}};  // null: skipped
  auto region = [&] {  // chunk 0 is slow, so that three threads run out of chunks while it runs
    std::atomic<int64_t> sum{0};
    pool.parallel_for(4, 1, [&](int64_t b, int64_t e) {
      if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
    EXPECT_EQ(sum.load(), 10);
  };
  ThreadPool::reset_profile();
  ThreadPool::set_profiling(true);
  for (int mode : {0, 1, 2, 3, 4}) {
    ThreadPool::set_idle_prefetch_mode(mode);
    const uint64_t before = ThreadPool::profile().prefetched;
    pool.set_idle_prefetch(ranges, 3);
    EXPECT_EQ(pool.idle_prefetch_ranges(), mode == 0 ? 0 : 2) << "mode " << mode;
    region();
    EXPECT_EQ(pool.idle_prefetch_ranges(), 0) << "mode " << mode;  // dropped after the region
    EXPECT_EQ(ThreadPool::profile().prefetched - before, mode == 0 ? 0u : uint64_t(buf.size()) + 5000) << "mode " << mode;
    pool.set_idle_prefetch(ranges, 3);
    pool.parallel_for(1, 1, [](int64_t, int64_t) {});  // one chunk runs inline: dropped too
    EXPECT_EQ(pool.idle_prefetch_ranges(), 0) << "mode " << mode;
  }
  ThreadPool::set_profiling(false);
  ThreadPool::set_idle_prefetch_mode(saved);
}

// Modes 3 and 4: the workers go on prefetching after the region, while the caller runs serial
// code, until the next job; no byte twice.
TEST(ThreadPool, IdlePrefetchGoesOnBetweenJobs) {
  ThreadPool pool(2);  // two threads: CI has two cores, and a descheduled thread would lengthen the tail
  const int saved = ThreadPool::idle_prefetch_mode();
  std::vector<uint8_t> buf(size_t(16) << 20);  // more than a short tail takes
  const ThreadPool::PrefetchRange range{buf.data(), int64_t(buf.size())};
  ThreadPool::reset_profile();
  ThreadPool::set_profiling(true);
  for (int mode : {1, 2, 3, 4}) {
    ThreadPool::set_idle_prefetch_mode(mode);
    const uint64_t before = ThreadPool::profile().prefetched;
    std::atomic<int64_t> sum{0};
    std::atomic<int> started{0};
    auto add = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    };
    pool.set_idle_prefetch(&range, 1);
    // Each thread holds its one chunk until both have started: the tail is short, and the gap
    // after the region prefetches the rest of the range.
    pool.parallel_for(2, 1, [&](int64_t b, int64_t e) {
      started.fetch_add(1);
      while (started.load() < 2) cpu_relax();  // both on a core: they leave their chunks together
      add(b, e);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the caller's serial code
    pool.parallel_for(2, 1, add);  // the workers' counts of the gap land before they take its chunks
    EXPECT_EQ(sum.load(), 6);
    const uint64_t got = ThreadPool::profile().prefetched - before;
    if (mode >= 3) EXPECT_EQ(got, uint64_t(buf.size())) << "mode " << mode;
    else EXPECT_LE(got, uint64_t(buf.size())) << "mode " << mode;
  }
  ThreadPool::set_profiling(false);
  ThreadPool::set_idle_prefetch_mode(saved);
}

}  // namespace
}  // namespace moeflux
