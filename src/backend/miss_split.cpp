// The split of a step's GPU expert cache misses between the copy and the CPU.
#include "backend/miss_split.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace moeflux {

namespace {
void smooth(double& rate, uint64_t& samples, double amount, double seconds) {
  if (!(seconds > 0) || !(amount > 0)) return;
  const double s = amount / seconds;
  rate = samples++ == 0 ? s : 0.8 * rate + 0.2 * s;
}
}  // namespace

void TierRates::add_h2d(double bytes, double seconds) { smooth(h2d_bps, h2d_samples, bytes, seconds); }
void TierRates::add_cpu(double work, double seconds) { smooth(cpu_bps, cpu_samples, work, seconds); }

std::vector<bool> split_misses(std::span<const size_t> bytes, std::span<const int32_t> rows, const TierRates& r) {
  MF_ASSERT(bytes.size() == rows.size());
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return double(bytes[a]) * rows[a] > double(bytes[b]) * rows[b];
  });
  std::vector<bool> cpu(bytes.size());
  double t_copy = 0, t_cpu = 0;
  for (size_t i : order) {
    const double c = double(bytes[i]) / r.h2d_bps, p = double(bytes[i]) * std::max<int32_t>(1, rows[i]) / r.cpu_bps;
    if (t_cpu + p < t_copy + c) cpu[i] = true, t_cpu += p;
    else t_copy += c;
  }
  return cpu;
}

}  // namespace moeflux
