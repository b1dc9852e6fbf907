// ThreadPool: workers sleep on a condition variable after a short spin (decode issues many
// small parallel_fors back to back, and a futex wake costs ~10 us); a job published while
// they spin is taken without a lock. Chunks are claimed from one ticket counter in index
// order, so uneven rows balance themselves and a thread that is descheduled holds at most
// the chunk it runs; the caller waits for the chunks, not for every worker.
#include "core/thread_pool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/cpu_count.h"
#include "core/error.h"

namespace moeflux {

namespace {
thread_local bool t_in_pool_task = false;
// Polls between jobs before a worker sleeps (~0.5-1 ms), at any width: the workers taking
// part have CPUs (the width drops while others take them).
constexpr int kSpinIters = 20000;
constexpr int64_t kStallNs = int64_t(ThreadPool::kStallUs) * 1000;

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

// The calling thread's time runnable but not running, from the kernel (the second field of
// /proc/thread-self/schedstat, ns; ~1 us a read). contended(now) looks at most every kLookNs
// and tells whether the thread spent 1 / kContendedDen or more of the time since its last look
// waiting so for a CPU; false where the kernel does not tell.
class RunDelay {
 public:
  static constexpr int64_t kLookNs = 5'000'000, kContendedDen = 8;

  RunDelay() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~RunDelay() {
    if (fd_ >= 0) ::close(fd_);
  }
  RunDelay(const RunDelay&) = delete;
  RunDelay& operator=(const RunDelay&) = delete;

  bool contended(int64_t now) {
    if (fd_ < 0 || now - last_look_ < kLookNs) return false;
    char buf[96];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    unsigned long long ran = 0, waited = 0;
    if (n <= 0) return false;
    buf[n] = 0;
    if (std::sscanf(buf, "%llu %llu", &ran, &waited) != 2) return false;
    const bool contended = last_look_ > 0 && (int64_t(waited) - last_waited_) * kContendedDen >= now - last_look_;
    last_look_ = now, last_waited_ = int64_t(waited);
    return contended;
  }

 private:
  int fd_;
  int64_t last_look_ = 0, last_waited_ = 0;
};

RunDelay& run_delay() {
  thread_local RunDelay r;
  return r;
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

int PoolWidth::update(bool stalled, int64_t now) {
  if (stalled && width_ > 1 && now - last_stall_ <= kStallPairNs) {
    quiet_ns_ = now - last_raise_ < 2 * quiet_ns_ ? std::min(2 * quiet_ns_, kQuietMaxNs) : kQuietMinNs;
    last_narrow_ = now, next_raise_ = now + quiet_ns_, last_stall_ = kNever;
    --width_;
  } else if (stalled) {
    last_stall_ = now;
  } else if (width_ < running_ && now >= next_raise_) {
    last_raise_ = now, last_stall_ = kNever;
    ++width_;
  }
  if (now - last_narrow_ >= kQuietResetNs) quiet_ns_ = kQuietMinNs;
  return width_;
}

namespace {
int running_threads(int n_threads, int max_running) {
  MF_ASSERT(n_threads >= 1 && max_running >= 0);
  return std::min(n_threads, max_running > 0 ? max_running : available_cpus());
}
}  // namespace

ThreadPool::ThreadPool(int n_threads, int max_running)
    : size_(n_threads), width_rule_(running_threads(n_threads, max_running)) {
  const int running = width_rule_.width();
  done_ = std::make_unique<DoneSlot[]>(size_t(running));
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

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0, jobs = 0;
  for (;;) {
    // Fast path: a job published while spinning is taken without the lock (its fields were
    // written before the release store of published_). Workers above the width skip it.
    uint64_t p = published_.load(std::memory_order_acquire);
    const int w = width_.load(std::memory_order_relaxed);
    if (index + 1 < w) {
      for (int i = 0; i < kSpinIters && p == seen; ++i) {
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
          park_cv_.wait(lock);
        } else if (generation_ == seen) {
          start_cv_.wait(lock);
        } else {
          break;
        }
      }
      p = generation_;
    }
    if (p == ~uint64_t(0)) return;  // stop
    seen = p;
    const int64_t ran = take_chunks();
    if (ran > 0) {
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
    // Every 16th job, its chunks counted: a look at its time kept off the CPU (RunDelay looks
    // at most every few ms).
    if ((++jobs & 15) == 0 && run_delay().contended(now_ns())) contended_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ThreadPool::adapt_width(bool stalled) {
  const int w = width_.load(std::memory_order_relaxed);
  const int to = width_rule_.update(stalled, now_ns());
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
  if (can_share && width_.load(std::memory_order_relaxed) == 1) adapt_width(false);  // time to widen?
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
  const uint64_t contended = contended_.load(std::memory_order_relaxed);
  const int64_t t0 = now_ns();
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
  // Stalled (PoolWidth): the caller waited kStallUs or more, and more than twice its own
  // chunks' time, on chunks that other threads had claimed; or an item waited that long on
  // another (wait_until); or a thread of the pool, the caller included, found itself kept
  // waiting for a CPU.
  const bool stalled = (t1 - t_own >= kStallNs && t1 - t_own > 2 * (t_own - t0)) ||
                       g_item_stalls.load(std::memory_order_relaxed) != item_stalls ||
                       contended_.load(std::memory_order_relaxed) != contended || run_delay().contended(t1);
  adapt_width(stalled);
  if (prof) {
    g_regions.fetch_add(1, std::memory_order_relaxed), g_region_ns.fetch_add(uint64_t(t1 - t0), std::memory_order_relaxed);
    g_tail_ns.fetch_add(uint64_t(t1 - t_own), std::memory_order_relaxed);
    if (stalled) g_stalls.fetch_add(1, std::memory_order_relaxed);
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace moeflux
