// Machine ceilings for bench_ops and moeflux bench: memory read bandwidth (a vectorised sum over a large
// buffer, split over the thread pool) and FMA peak (independent vector FMA chains per thread),
// so each op's GB/s or GFLOP/s can be printed as a % of what the machine can do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace moeflux::bench {

// The buffer the read bandwidth is measured on: `bytes` raised to 4x the reported last-level
// cache (so that it is DRAM that is read) and to whole 2 MiB pages, allocated and touched once.
// moeflux bench keeps one from its measurement before the tests to the one after: freeing
// gigabytes in between let a VM's free page reporting run during the tests (one decode
// run in 5-12 at ~75% speed, 1-2 s after the first measurement; a9dc2a6:docs/benchmarks.md).
class ReadBuffer {
 public:
  explicit ReadBuffer(size_t bytes);
  const float* data() const { return p_.get(); }
  size_t floats() const { return n_; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> p_;
  size_t n_ = 0;
};

// Sums the buffer with the widest vectors the CPU has, on `threads` threads; returns GB/s (1e9
// bytes) of the best of `reps` passes.
double read_bandwidth_gbs(const ReadBuffer& buf, int threads, int reps = 8);
// The same on a buffer of `bytes` made for the call.
double read_bandwidth_gbs(size_t bytes, int threads, int reps = 8);

// Peak f32 FMA rate on `threads` threads: GFLOP/s (2 flops per lane per FMA).
double fma_peak_gflops(int threads);

}  // namespace moeflux::bench
