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

}  // namespace
}  // namespace moeflux
