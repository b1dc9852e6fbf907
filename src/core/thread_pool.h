// ThreadPool: persistent workers running parallel_for over index ranges (rows of a matrix,
// heads, experts); the calling thread takes part. An exception thrown by a task never
// escapes its worker: the first one is caught and rethrown on the calling thread after all
// chunks have stopped. Nested or concurrent calls run inline on the caller.
//
// The pool stays fast when it has fewer CPUs than threads (a busy machine, a thread count
// above the core count): no more threads run than the process has CPUs, a region waits only
// for the threads that took chunks of it, every wait is bounded before it sleeps, and a
// region that stalls on a descheduled thread narrows the pool for a while (see PoolWidth).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace moeflux {

// One step of a spin-wait: tells the CPU this is a polling loop (x86 PAUSE), so that a
// sibling hyperthread runs meanwhile.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Where parallel time goes (moeflux bench --profile): counted only while enabled.
struct PoolProfile {
  uint64_t regions = 0;    // parallel_for calls with work for the workers (inline_regions included)
  double region_s = 0;     // wall time inside them, on the calling thread
  double busy_s = 0;       // time all threads spent running chunks inside them
  double tail_s = 0;       // the caller, from its last chunk to the region's end
  uint64_t slept = 0;      // regions whose caller outwaited its spin and slept on the workers
  uint64_t worker_sleeps = 0;  // times a worker outwaited its spin between jobs and slept
  uint64_t stalls = 0;     // regions that stalled (PoolWidth): a late thread, or one kept waiting for a CPU
  uint64_t inline_regions = 0;  // of the regions, those run on the caller alone (the pool had narrowed to 1)

  PoolProfile& operator+=(const PoolProfile& o) {
    regions += o.regions, region_s += o.region_s, busy_s += o.busy_s, tail_s += o.tail_s;
    slept += o.slept, worker_sleeps += o.worker_sleeps, stalls += o.stalls, inline_regions += o.inline_regions;
    return *this;
  }
};

// How many threads take part in regions (ThreadPool::width()), from the regions' stalls over
// time; apart from the pool, so that tests drive it with their own clock.
//
// The rule. A region stalled where it shows a thread of the pool kept off its CPU: the caller
// waited ThreadPool::kStallUs or more on chunks that others had claimed (and more than twice
// its own chunks' time), or an item that long on another item (ThreadPool::wait_until); or
// where a thread of the pool, looking at the kernel's count of its time runnable but not
// running (/proc/thread-self/schedstat) every few ms, found an eighth or more of the time since
// its last look spent so (more threads want the CPUs than there are). The width drops by one
// where a region stalls within kStallPairNs of the previous stall at this width, and for
// nothing else: one stall alone is a passing kernel thread or the like (a pool that fills the
// machine meets a few a second, and narrowing would not avoid them), and a region that few
// threads joined is no evidence at all (on many threads most decode regions are short, and
// their chunks are gone before every worker has looked). The width rises by one per region once
// a quiet spell has passed since the last drop: 20 ms, doubled (up to 2 s) by each drop within
// two spells of a rise, back to 20 ms after 5 s without a drop. The threads still taking part
// poll as long as at full width: the drops leave them CPUs of their own.
class PoolWidth {
 public:
  static constexpr int64_t kStallPairNs = 50'000'000;
  static constexpr int64_t kQuietMinNs = 20'000'000, kQuietMaxNs = 2'000'000'000, kQuietResetNs = 5'000'000'000;

  // PRECOND: running >= 1.
  explicit PoolWidth(int running) : running_(running), width_(running) {}
  int width() const { return width_; }
  // After a region (stalled or not), or before one that the pool at width 1 would run on the
  // caller: returns the width from now on. now_ns: a steady clock.
  int update(bool stalled, int64_t now_ns);

 private:
  static constexpr int64_t kNever = INT64_MIN / 2;
  int running_, width_;
  int64_t last_stall_ = kNever;  // the last stall at this width
  int64_t last_raise_ = 0, last_narrow_ = 0, next_raise_ = 0, quiet_ns_ = 0;
};

class ThreadPool {
 public:
  // A wait this long (us) for another thread of a region counts as a stall: that thread was
  // descheduled (a chunk takes far less on a thread that runs, and a polling worker notices
  // a job within a microsecond).
  static constexpr int kStallUs = 500;

  // Work is split for n_threads (size(), the caller included); at most max_running of them
  // run (0: the CPUs this process may run on, available_cpus()), so min(n_threads,
  // max_running) - 1 workers are started. PRECOND: n_threads >= 1, max_running >= 0.
  explicit ThreadPool(int n_threads, int max_running = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The width work is planned for (chunk counts); the results never depend on it.
  int size() const { return size_; }
  // Threads that run chunks, the caller included.
  int running() const { return int(workers_.size()) + 1; }
  // Threads taking part in regions now (1 to running()): narrowed after stalled regions and
  // widened after quiet spells (PoolWidth).
  int width() const { return width_.load(std::memory_order_relaxed); }

  // Profiling of every pool (off by default: it reads the clock around every chunk).
  static void set_profiling(bool on);
  static PoolProfile profile();
  static void reset_profile();

  // Calls fn(begin, end) on disjoint chunks [begin, end) covering [0, n), each at most
  // `grain` long, and returns when all have run. Chunks are handed out in index order.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    auto thunk = [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); };
    run(n, grain, 0, 1, thunk, const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // The same with chunks that shrink as the range runs out ("guided"): each takes 1 / (2 *
  // size()) of what is left, rounded up to a multiple of `mult` and at least `min_grain` (the
  // last one may be shorter). The first chunks are long streams; the last, short ones even
  // out the threads' finishing times. PRECOND: min_grain >= 1, mult >= 1.
  template <typename F>
  void parallel_for_guided(int64_t n, int64_t min_grain, int64_t mult, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    auto thunk = [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); };
    run(n, min_grain, 2 * int64_t(size()), mult, thunk, const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Waits, inside a chunk, until ready() holds (an item of the same region that another
  // thread runs): polls, and past kStallUs sleeps between polls and counts a stall, so that a
  // descheduled holder gets this CPU back and the pool narrows.
  template <typename Ready>
  static void wait_until(Ready&& ready) {
    for (int i = 0; i < 256; ++i, cpu_relax())
      if (ready()) return;
    wait_slow(+[](void* c) { return (*static_cast<std::remove_reference_t<Ready>*>(c))(); }, &ready);
  }

 private:
  using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);
  // guided_div 0: chunks of `grain`; else guided chunks of (n - begin) / guided_div, rounded
  // up to a multiple of mult, at least grain.
  void run(int64_t n, int64_t grain, int64_t guided_div, int64_t mult, RangeFn fn, void* ctx);
  // Runs chunks of the current job until none is left; returns how many this thread ran.
  int64_t take_chunks();
  int64_t done_by_workers(uint64_t generation) const;
  void worker_loop(int index);
  void adapt_width(bool stalled);
  static void wait_slow(bool (*ready)(void*), void* ctx);

  // Per worker, on a cache line of its own: the chunks it ran of job `generation` (chunks
  // written first). The caller adds these up instead of sharing a countdown (each contended
  // read-modify-write of one line costs ~0.1-0.2 us on 16 threads) and waits for no
  // worker that took no chunk.
  struct alignas(64) DoneSlot {
    std::atomic<int64_t> chunks{0};
    std::atomic<uint64_t> generation{0};
  };

  int size_;
  std::vector<std::thread> workers_;
  std::unique_ptr<DoneSlot[]> done_;
  std::mutex run_mu_;  // one parallel_for at a time; others run inline
  std::mutex mu_;
  std::condition_variable start_cv_, park_cv_, done_cv_;
  uint64_t generation_ = 0;  // bumped per job, under mu_
  bool stop_ = false;
  std::atomic<bool> caller_waiting_{false};  // the caller sleeps on done_cv_ (workers notify it)
  std::atomic<int> width_{1};
  // Workers [0, active_) take part in jobs; the others sleep on park_cv_. Under mu_.
  int active_ = 0;
  PoolWidth width_rule_;  // the caller's only

  // The current job (written before published_ is bumped). A claim is one fetch_add on
  // ticket_, which the caller sets to kTicketEnd - chunks: a value below kTicketEnd is chunk
  // (value - (kTicketEnd - chunks)) of this job, so a worker reads the job's fields only
  // after a claim that the caller waits for (a worker that arrives late, even at a later
  // job, takes a chunk of whatever job is current or none).
  static constexpr int64_t kTicketEnd = int64_t(1) << 62;
  RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0;
  uint64_t job_generation_ = 0;
  bool guided_ = false;
  std::vector<int64_t> bounds_;
  alignas(64) std::atomic<int64_t> ticket_{kTicketEnd};
  alignas(64) std::atomic<uint64_t> published_{0};  // generation_ readable without the lock (spinning)
  alignas(64) std::atomic<uint64_t> contended_{0};   // workers that found themselves kept off their CPUs
  std::atomic<bool> abort_{false};                  // a chunk threw: the rest are skipped
  std::exception_ptr error_;
};

}  // namespace moeflux
