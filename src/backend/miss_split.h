// Where the misses of the GPU expert cache compute (--moe-misses auto): copied into device
// slots for the GPU, or computed by the CPU from the host cache's records while the GPU works.
// The two sides run at once, so a step's misses are split so that both finish early: each
// miss, largest first, goes to the side that would then finish first, from rates measured on
// the steps before. Free of CUDA so that it is tested on any machine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moeflux {

// Measured rates, smoothed over steps (a sample moves the estimate a fifth of the way).
struct TierRates {
  double h2d_bps = 20e9;  // host-to-device copy: bytes a second
  double cpu_bps = 10e9;  // CPU experts: record bytes times rows, a second
  uint64_t h2d_samples = 0, cpu_samples = 0;

  void add_h2d(double bytes, double seconds);
  void add_cpu(double work, double seconds);
};

// Which misses the CPU computes (true) given each one's record bytes and routed rows: the
// copy side costs bytes / h2d_bps each (one link, in turn), the CPU side bytes * rows /
// cpu_bps each.
std::vector<bool> split_misses(std::span<const size_t> bytes, std::span<const int32_t> rows, const TierRates& r);

}  // namespace moeflux
