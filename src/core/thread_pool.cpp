// ThreadPool: workers sleep on a condition variable after a short spin (decode issues many
// small parallel_fors back to back, and a futex wake costs ~10 us); a job published while
// they spin is taken without a lock, and the caller polls each worker's done slot for the last
// chunks before sleeping. Chunks are handed out by an atomic counter so uneven rows balance
// themselves.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "core/cpu_features.h"
#include "core/error.h"

namespace moeflux {

namespace {
thread_local bool t_in_pool_task = false;
constexpr int kSpinIters = 20000;   // workers: ~0.5-1 ms of polling before sleeping

std::atomic<bool> g_profiling{false};
std::atomic<uint64_t> g_regions{0}, g_region_ns{0}, g_busy_ns{0}, g_tail_ns{0}, g_slept{0}, g_worker_sleeps{0};
uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

int default_spin_us() {
  const char* e = std::getenv("MOEFLUX_POOL_SPIN_US");
  return e && *e ? std::clamp(std::atoi(e), 0, 1'000'000) : 500;
}
std::atomic<int> g_spin_us{default_spin_us()};
}  // namespace

void ThreadPool::set_caller_spin_us(int us) { g_spin_us.store(std::max(0, us)); }
int ThreadPool::caller_spin_us() { return g_spin_us.load(); }

void ThreadPool::set_profiling(bool on) { g_profiling.store(on); }
PoolProfile ThreadPool::profile() {
  return PoolProfile{g_regions.load(), double(g_region_ns.load()) * 1e-9, double(g_busy_ns.load()) * 1e-9,
                     double(g_tail_ns.load()) * 1e-9, g_slept.load(), g_worker_sleeps.load()};
}
void ThreadPool::reset_profile() {
  g_regions = 0, g_region_ns = 0, g_busy_ns = 0, g_tail_ns = 0, g_slept = 0, g_worker_sleeps = 0;
}

ThreadPool::ThreadPool(int n_threads) {
  MF_ASSERT(n_threads >= 1);
  done_ = std::make_unique<DoneSlot[]>(size_t(n_threads));
  workers_.reserve(size_t(n_threads - 1));
  for (int i = 0; i + 1 < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    published_.store(~uint64_t(0), std::memory_order_release);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::take_chunks() {
  const bool was_in = t_in_pool_task;
  t_in_pool_task = true;
  const bool prof = g_profiling.load(std::memory_order_relaxed);
  const uint64_t t0 = prof ? now_ns() : 0;
  for (int64_t b = 0, e = 0; claim(&b, &e);) {
    try {
      fn_(ctx_, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(chunks_, std::memory_order_relaxed);  // the others stop taking chunks
    }
  }
  if (prof) g_busy_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  t_in_pool_task = was_in;
}

bool ThreadPool::claim(int64_t* begin, int64_t* end) {
  const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= chunks_) return false;
  if (guided_) {
    *begin = bounds_[size_t(i)], *end = bounds_[size_t(i) + 1];
  } else {
    *begin = i * grain_, *end = std::min(n_, *begin + grain_);
  }
  return true;
}

bool ThreadPool::workers_done(uint64_t generation) const {
  for (size_t w = 0; w < workers_.size(); ++w)
    if (done_[w].generation.load(std::memory_order_seq_cst) != generation) return false;  // after caller_waiting_'s store
  return true;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Fast path: a job published while spinning is taken without the lock (its fields were
    // written before the release store of published_).
    uint64_t p = published_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinIters && p == seen; ++i) {
      cpu_relax();
      p = published_.load(std::memory_order_acquire);
    }
    if (p == seen) {
      if (g_profiling.load(std::memory_order_relaxed)) g_worker_sleeps.fetch_add(1, std::memory_order_relaxed);
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      p = stop_ ? ~uint64_t(0) : generation_;
    }
    if (p == ~uint64_t(0)) return;  // stop
    seen = p;
    take_chunks();
    // seq_cst store and load against the caller's seq_cst store of caller_waiting_ and its
    // check of the slots: either it sees this slot or this worker sees it waiting.
    done_[size_t(index)].generation.store(seen, std::memory_order_seq_cst);
    if (caller_waiting_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);  // pairs with the caller's wait under mu_
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t n, int64_t grain, int64_t guided_div, int64_t mult, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  mult = std::max<int64_t>(1, mult);
  std::unique_lock<std::mutex> run_lock(run_mu_, std::try_to_lock);
  if (workers_.empty() || n <= grain || t_in_pool_task || !run_lock.owns_lock()) {
    // Inline: one thread gains nothing from short chunks (guided: one chunk).
    const int64_t step = guided_div ? n : grain;
    for (int64_t b = 0; b < n; b += step) fn(ctx, b, std::min(n, b + step));
    return;
  }
  const bool prof = g_profiling.load(std::memory_order_relaxed);
  const uint64_t t0 = prof ? now_ns() : 0;
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn, ctx_ = ctx, n_ = n, grain_ = grain, guided_ = guided_div > 0;
    if (guided_) {
      bounds_.clear();
      for (int64_t b = 0; b < n; b += std::max(grain, ((n - b) / guided_div + mult - 1) / mult * mult))
        bounds_.push_back(b);
      bounds_.push_back(n);
      chunks_ = int64_t(bounds_.size()) - 1;
    } else {
      chunks_ = (n + grain - 1) / grain;
    }
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    gen = ++generation_;
    published_.store(gen, std::memory_order_release);
  }
  start_cv_.notify_all();  // no system call when every worker is spinning
  take_chunks();
  const uint64_t t_own = prof ? now_ns() : 0;
  // Poll for the workers' last chunks, then sleep. A wake-up through the futex costs ~10 us
  // on bare metal and more in a VM; polling too long costs more than it saves when the
  // machine is oversubscribed. The clock is read every 64 polls; slots already seen done are
  // not read again.
  size_t w = 0;
  const size_t nw = workers_.size();
  const int spin_us = g_spin_us.load(std::memory_order_relaxed);
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (int i = 1; w < nw; ++i) {
    if (done_[w].generation.load(std::memory_order_acquire) == gen) {
      ++w;
      continue;
    }
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
  }
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (w < nw) {
      caller_waiting_.store(true, std::memory_order_seq_cst);
      if (prof && !workers_done(gen)) g_slept.fetch_add(1, std::memory_order_relaxed);
      done_cv_.wait(lock, [&] { return workers_done(gen); });
      caller_waiting_.store(false, std::memory_order_relaxed);
    }
    err = error_;
    error_ = nullptr;
  }
  if (prof) {
    const uint64_t t1 = now_ns();
    g_regions.fetch_add(1, std::memory_order_relaxed), g_region_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
    g_tail_ns.fetch_add(t1 - t_own, std::memory_order_relaxed);
  }
  if (err) std::rethrow_exception(err);
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;
int g_threads = 0;  // 0: physical cores
}  // namespace

int cpu_threads() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  return g_threads > 0 ? g_threads : physical_core_count();
}

ThreadPool& cpu_thread_pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(g_threads > 0 ? g_threads : physical_core_count());
  return *g_pool;
}

void set_cpu_threads(int n) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_threads = std::max(0, n);
  const int want = g_threads > 0 ? g_threads : physical_core_count();
  if (g_pool && g_pool->size() != want) g_pool.reset();
}

}  // namespace moeflux
