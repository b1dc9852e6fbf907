// ThreadPool: persistent workers running parallel_for over index ranges (rows of a matrix,
// heads, experts); the calling thread takes part. An exception thrown by a task never
// escapes its worker: the first one is caught and rethrown on the calling thread after all
// chunks have stopped. Nested or concurrent calls run inline on the caller.
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

// Where parallel time goes (moeflux bench --profile): counted only while enabled.
struct PoolProfile {
  uint64_t regions = 0;    // parallel_for calls handed to the workers
  double region_s = 0;     // wall time inside them, on the calling thread
  double busy_s = 0;       // time all threads spent running chunks inside them
  double tail_s = 0;       // the caller, from its last chunk to the region's end
  uint64_t slept = 0;      // regions whose caller outwaited its spin and slept on the workers
  uint64_t worker_sleeps = 0;  // times a worker outwaited its spin between jobs and slept

  PoolProfile& operator+=(const PoolProfile& o) {
    regions += o.regions, region_s += o.region_s, busy_s += o.busy_s, tail_s += o.tail_s;
    slept += o.slept, worker_sleeps += o.worker_sleeps;
    return *this;
  }
};

class ThreadPool {
 public:
  // n_threads in total, the caller included (n_threads - 1 workers). PRECOND: n_threads >= 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // How long the calling thread polls for the workers' last chunks before it sleeps
  // (default 500 us, or MOEFLUX_POOL_SPIN_US; the workers poll ~1 ms between jobs). A sleeping
  // caller pays a wake-up (tens of us in a VM); a polling one holds its core.
  static void set_caller_spin_us(int us);
  static int caller_spin_us();

  // Profiling of every pool (off by default: it reads the clock around every chunk).
  static void set_profiling(bool on);
  static PoolProfile profile();
  static void reset_profile();

  // Calls fn(begin, end) on disjoint chunks [begin, end) covering [0, n), each at most
  // `grain` long, and returns when all have run.
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

 private:
  using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);
  // guided_div 0: chunks of `grain`; else guided chunks of (n - begin) / guided_div, rounded
  // up to a multiple of mult, at least grain.
  void run(int64_t n, int64_t grain, int64_t guided_div, int64_t mult, RangeFn fn, void* ctx);
  bool claim(int64_t* begin, int64_t* end);  // the next chunk; false when none is left
  void worker_loop(int index);
  void take_chunks();
  bool workers_done(uint64_t generation) const;

  // Per worker, on a cache line of its own: the last generation it finished. The caller reads
  // these instead of a shared countdown (on the 16-vCPU Xeon each contended read-modify-write
  // of one line costs ~0.1-0.2 us, and a countdown makes every worker pay one in turn).
  struct alignas(64) DoneSlot {
    std::atomic<uint64_t> generation{0};
  };

  std::vector<std::thread> workers_;
  std::unique_ptr<DoneSlot[]> done_;
  std::mutex run_mu_;  // one parallel_for at a time; others run inline
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // bumped per job, under mu_
  bool stop_ = false;
  std::atomic<bool> caller_waiting_{false};  // the caller sleeps on done_cv_ (workers notify it)
  // The current job (written before generation_ is bumped): chunk i is [i * grain_, ...) or,
  // guided, [bounds_[i], bounds_[i + 1]), laid out by the caller, so that a claim is one
  // fetch_add on next_ (no compare-exchange retries when threads finish together).
  RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0;
  bool guided_ = false;
  std::vector<int64_t> bounds_;
  alignas(64) std::atomic<int64_t> next_{0};
  alignas(64) std::atomic<uint64_t> published_{0};  // generation_ readable without the lock (spinning)
  std::exception_ptr error_;
};

// One step of a spin-wait: tells the CPU this is a polling loop (x86 PAUSE), so that a
// sibling hyperthread runs meanwhile.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The pool the CPU ops use; created on first use with cpu_threads() threads.
ThreadPool& cpu_thread_pool();
int cpu_threads();
// Sets the thread count of cpu_thread_pool() (default: physical cores); <= 0 means default.
// Not to be called while ops are running.
void set_cpu_threads(int n);

}  // namespace moeflux
