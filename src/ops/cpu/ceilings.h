// Machine ceilings for bench_ops and moeflux bench: memory read bandwidth (a vectorised sum over a large
// buffer, split over the thread pool) and FMA peak (independent vector FMA chains per thread),
// so each op's GB/s or GFLOP/s can be printed as a % of what the machine can do.
#pragma once
#include <cstddef>
#include <cstdint>

namespace moeflux::bench {

// Sums `bytes` (raised to 4x the reported last-level cache, so that it is DRAM that is read)
// of a buffer touched beforehand, with the widest vectors the CPU has, on `threads` threads;
// returns GB/s (1e9 bytes) of the best of `reps` passes.
double read_bandwidth_gbs(size_t bytes, int threads, int reps = 8);

// Peak f32 FMA rate on `threads` threads: GFLOP/s (2 flops per lane per FMA).
double fma_peak_gflops(int threads);

}  // namespace moeflux::bench
