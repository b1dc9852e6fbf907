// The thread pool the CPU ops split their work over (one per process) and its size.
#pragma once
#include "core/thread_pool.h"

namespace moeflux {

// Thread counts above this are refused (set_cpu_threads).
inline constexpr int kMaxThreads = 512;

// The pool the CPU ops use; created on first use with cpu_threads() threads.
ThreadPool& cpu_thread_pool();
int cpu_threads();
// Sets the thread count of cpu_thread_pool() (default: physical cores); 0 means default.
// Raises Error for n < 0 or n > kMaxThreads; above available_cpus() it warns once on stderr
// that only that many run at once. Not to be called while ops are running.
void set_cpu_threads(int n);

}  // namespace moeflux
