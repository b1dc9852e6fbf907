// The CPU ops' thread pool and its size.
#include "backend/cpu/cpu_pool.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

#include "core/cpu_count.h"
#include "core/error.h"

namespace moeflux {

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
  if (n < 0 || n > kMaxThreads)
    fail("threads: ", n, " is out of range (1 to ", kMaxThreads, ", or 0 for one per physical core)");
  static std::atomic<int> warned{0};
  const int cpus = available_cpus();
  if (n > cpus && warned.exchange(n) != n)
    std::fprintf(stderr, "moeflux: warning: %d threads on %d CPUs: at most %d run at once\n", n, cpus, cpus);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_threads = n;
  const int want = g_threads > 0 ? g_threads : physical_core_count();
  if (g_pool && g_pool->size() != want) g_pool.reset();
}

}  // namespace moeflux
