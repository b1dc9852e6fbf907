// ThreadPool: workers sleep on a condition variable after a short spin (decode issues many
// small parallel_fors back to back, and a futex wake costs ~10 us); a job published while
// they spin is taken without a lock. Chunks are claimed from one ticket counter in index
// order, so uneven rows balance themselves and a thread that is descheduled holds at most
// the chunk it runs; the caller waits for the chunks, not for every worker.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/cpu_count.h"
#include "core/error.h"

namespace moeflux {

namespace {
thread_local bool t_in_pool_task = false;
// Polls between jobs before a worker sleeps: ~0.5-1 ms while the pool runs at full width,
// a few us once it has narrowed (the machine is busy: a polling worker holds a CPU that a
// thread with work may need).
constexpr int kSpinIters = 20000, kNarrowSpinIters = 200;
constexpr int64_t kStallNs = int64_t(ThreadPool::kStallUs) * 1000;
// The quiet spell before a narrowed pool widens again: doubled by each narrowing soon after a
// rise, back to the least after kQuietResetNs without one.
constexpr int64_t kQuietMinNs = 20'000'000, kQuietMaxNs = 2'000'000'000, kQuietResetNs = 5'000'000'000;
// A bad region (stalled or underfilled) adds kBadScore, a good one takes 1 off; the pool
// narrows at kNarrowScore (at once on a stall): it narrows where more than about a fifth of
// the regions go badly, not on a rare late thread.
constexpr int kBadScore = 4, kNarrowScore = 8;

std::atomic<bool> g_profiling{false};
std::atomic<uint64_t> g_regions{0}, g_region_ns{0}, g_busy_ns{0}, g_tail_ns{0}, g_slept{0}, g_worker_sleeps{0},
    g_stalls{0}, g_inline_regions{0};
// Bumped by every wait_until that stalled; a region that sees it change stalled.
std::atomic<uint64_t> g_item_stalls{0};

int64_t now_ns() {
  return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now().time_since_epoch())
                     .count());
}
}  // namespace

void ThreadPool::set_profiling(bool on) { g_profiling.store(on); }
PoolProfile ThreadPool::profile() {
  return PoolProfile{g_regions.load(),         double(g_region_ns.load()) * 1e-9, double(g_busy_ns.load()) * 1e-9,
                     double(g_tail_ns.load()) * 1e-9, g_slept.load(), g_worker_sleeps.load(), g_stalls.load(),
                     g_inline_regions.load()};
}
void ThreadPool::reset_profile() {
  g_regions = 0, g_region_ns = 0, g_busy_ns = 0, g_tail_ns = 0, g_slept = 0, g_worker_sleeps = 0, g_stalls = 0;
  g_inline_regions = 0;
}

ThreadPool::ThreadPool(int n_threads, int max_running) : size_(n_threads) {
  MF_ASSERT(n_threads >= 1 && max_running >= 0);
  const int running = std::min(n_threads, max_running > 0 ? max_running : available_cpus());
  done_ = std::make_unique<DoneSlot[]>(size_t(running));
  blocked_.assign(size_t(running), false);
  width_.store(running), active_ = running - 1;
  workers_.reserve(size_t(running - 1));
  for (int i = 0; i + 1 < running; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    published_.store(~uint64_t(0), std::memory_order_release);
  }
  start_cv_.notify_all();
  park_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::wait_slow(bool (*ready)(void*), void* ctx) {
  const int64_t t0 = now_ns();
  bool stalled = false;
  for (int i = 1; !ready(ctx); ++i) {
    if (stalled) {
      // Off the CPU: a holder waiting for one runs here (the scheduler moves it to an idle CPU).
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      cpu_relax();
      if (i % 64 == 0 && now_ns() - t0 >= kStallNs) stalled = true, g_item_stalls.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

int64_t ThreadPool::take_chunks() {
  const bool was_in = t_in_pool_task;
  t_in_pool_task = true;
  const bool prof = g_profiling.load(std::memory_order_relaxed);
  const int64_t t0 = prof ? now_ns() : 0;
  int64_t ran = 0;
  for (;;) {
    const int64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
    if (t >= kTicketEnd) break;
    // A claimed chunk keeps the job alive: its fields are this job's until the chunk is counted.
    const int64_t i = t - (kTicketEnd - chunks_);
    const int64_t b = guided_ ? bounds_[size_t(i)] : i * grain_;
    const int64_t e = guided_ ? bounds_[size_t(i) + 1] : std::min(n_, b + grain_);
    if (!abort_.load(std::memory_order_relaxed)) {
      try {
        fn_(ctx_, b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        abort_.store(true, std::memory_order_relaxed);  // the others skip their chunks
      }
    }
    ++ran;
  }
  if (prof) g_busy_ns.fetch_add(uint64_t(now_ns() - t0), std::memory_order_relaxed);
  t_in_pool_task = was_in;
  return ran;
}

int64_t ThreadPool::done_by_workers(uint64_t generation) const {
  int64_t sum = 0;
  for (size_t w = 0; w < workers_.size(); ++w)
    if (done_[w].generation.load(std::memory_order_seq_cst) == generation)  // after caller_waiting_'s store
      sum += done_[w].chunks.load(std::memory_order_relaxed);
  return sum;
}

int ThreadPool::participants(uint64_t generation) const {
  int n = 0;
  for (size_t w = 0; w < workers_.size(); ++w) n += done_[w].generation.load(std::memory_order_relaxed) == generation;
  return n;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Fast path: a job published while spinning is taken without the lock (its fields were
    // written before the release store of published_). Workers above the width skip it.
    uint64_t p = published_.load(std::memory_order_acquire);
    const int w = width_.load(std::memory_order_relaxed);
    if (index + 1 < w) {
      const int spins = w == running() ? kSpinIters : kNarrowSpinIters;
      for (int i = 0; i < spins && p == seen; ++i) {
        cpu_relax();
        p = published_.load(std::memory_order_acquire);
      }
    }
    if (p == seen || index + 1 >= w) {
      if (g_profiling.load(std::memory_order_relaxed)) g_worker_sleeps.fetch_add(1, std::memory_order_relaxed);
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stop_) return;
        if (index >= active_) {
          blocked_[size_t(index)] = true, park_cv_.wait(lock);
        } else if (generation_ == seen) {
          blocked_[size_t(index)] = true, start_cv_.wait(lock);
        } else {
          break;
        }
        blocked_[size_t(index)] = false;
      }
      p = generation_;
    }
    if (p == ~uint64_t(0)) return;  // stop
    seen = p;
    const int64_t ran = take_chunks();
    if (ran == 0) continue;
    // It ran chunks of the job current at its first claim (no later job starts before they
    // are counted), which may be newer than p.
    const uint64_t g = job_generation_;
    seen = std::max(seen, g);
    done_[size_t(index)].chunks.store(ran, std::memory_order_relaxed);
    // seq_cst store and load against the caller's seq_cst store of caller_waiting_ and its
    // check of the slots: either it sees this slot or this worker sees it waiting.
    done_[size_t(index)].generation.store(g, std::memory_order_seq_cst);
    if (caller_waiting_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);  // pairs with the caller's wait under mu_
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::adapt_width(bool bad, bool stalled) {
  const int64_t now = now_ns();
  const int w = width_.load(std::memory_order_relaxed);
  if (bad) {
    score_ += stalled ? kNarrowScore : kBadScore;
  } else if (score_ > 0) {
    --score_;
  }
  int to = w;
  if (score_ >= kNarrowScore && w > 1) {
    quiet_ns_ = now - last_raise_ < 2 * quiet_ns_ ? std::min(2 * quiet_ns_, kQuietMaxNs) : kQuietMinNs;
    last_narrow_ = now, next_raise_ = now + quiet_ns_;
    to = w - 1, score_ = 0;
  } else if (!bad && w < running() && now >= next_raise_) {
    // Two bad regions soon after a rise narrow again (the first region often finds the
    // woken worker late).
    last_raise_ = now, to = w + 1, score_ = 0;
  }
  if (now - last_narrow_ >= kQuietResetNs) quiet_ns_ = kQuietMinNs;
  if (to == w) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = to - 1;
    width_.store(to, std::memory_order_relaxed);
  }
  if (to > w) park_cv_.notify_all();
}

void ThreadPool::run(int64_t n, int64_t grain, int64_t guided_div, int64_t mult, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  mult = std::max<int64_t>(1, mult);
  std::unique_lock<std::mutex> run_lock(run_mu_, std::try_to_lock);
  const bool can_share = !workers_.empty() && n > grain && !t_in_pool_task && run_lock.owns_lock();
  if (can_share && width_.load(std::memory_order_relaxed) == 1) adapt_width(false, false);  // time to widen?
  const bool narrowed = can_share && width_.load(std::memory_order_relaxed) == 1;
  if (!can_share || narrowed) {
    // Inline: one thread gains nothing from short chunks (guided: one chunk). A region the
    // narrowed pool runs here still counts as one.
    const bool prof = narrowed && g_profiling.load(std::memory_order_relaxed);
    const int64_t t0 = prof ? now_ns() : 0;
    const int64_t step = guided_div ? n : grain;
    for (int64_t b = 0; b < n; b += step) fn(ctx, b, std::min(n, b + step));
    if (prof) {
      const uint64_t dt = uint64_t(now_ns() - t0);
      g_regions.fetch_add(1, std::memory_order_relaxed), g_inline_regions.fetch_add(1, std::memory_order_relaxed);
      g_region_ns.fetch_add(dt, std::memory_order_relaxed), g_busy_ns.fetch_add(dt, std::memory_order_relaxed);
    }
    return;
  }
  const bool prof = g_profiling.load(std::memory_order_relaxed);
  const uint64_t item_stalls = g_item_stalls.load(std::memory_order_relaxed);
  const int64_t t0 = now_ns();
  uint64_t gen = 0;
  bool all_awake = true;  // every worker taking part was polling, none asleep on the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < active_; ++i) all_awake = all_awake && !blocked_[size_t(i)];
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
    abort_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    gen = ++generation_;
    job_generation_ = gen;
    ticket_.store(kTicketEnd - chunks_, std::memory_order_release);
    published_.store(gen, std::memory_order_release);
  }
  start_cv_.notify_all();  // no system call when every worker is spinning
  const int64_t own = take_chunks(), need = chunks_ - own;
  const int64_t t_own = now_ns();
  // Poll for the workers' last chunks up to kStallUs, then sleep: a chunk still running
  // by then is on a thread that lost its CPU, and a polling caller would keep it off this one.
  // The clock is read every 64 polls.
  bool done = done_by_workers(gen) >= need;
  for (int i = 1; !done; ++i) {
    cpu_relax();
    done = done_by_workers(gen) >= need;
    if (i % 64 == 0 && now_ns() - t_own >= kStallNs) break;
  }
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!done) {
      caller_waiting_.store(true, std::memory_order_seq_cst);
      if (prof && done_by_workers(gen) < need) g_slept.fetch_add(1, std::memory_order_relaxed);
      done_cv_.wait(lock, [&] { return done_by_workers(gen) >= need; });
      caller_waiting_.store(false, std::memory_order_relaxed);
    }
    err = error_;
    error_ = nullptr;
  }
  const int64_t t1 = now_ns();
  const bool stalled = (t1 - t_own >= kStallNs && t1 - t_own > 2 * (t_own - t0)) ||
                       g_item_stalls.load(std::memory_order_relaxed) != item_stalls;
  // Underfilled: enough chunks for two each, yet at most half the threads took any (the
  // others were off their CPUs, or the caller was while a worker ran them all). A worker woken
  // from its sleep is often late for a short region too: such regions count half.
  const int w = width_.load(std::memory_order_relaxed);
  const bool underfilled = chunks_ >= 2 * w && 2 * (participants(gen) + (own > 0 ? 1 : 0)) <= w;
  if (underfilled && !stalled && !all_awake && (woken_underfilled_ ^= true)) {
    adapt_width(false, false);
  } else {
    adapt_width(stalled || underfilled, stalled);
  }
  if (prof) {
    g_regions.fetch_add(1, std::memory_order_relaxed), g_region_ns.fetch_add(uint64_t(t1 - t0), std::memory_order_relaxed);
    g_tail_ns.fetch_add(uint64_t(t1 - t_own), std::memory_order_relaxed);
    if (stalled) g_stalls.fetch_add(1, std::memory_order_relaxed);
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace moeflux
