// Conversions to and from the group-lane code layout (see group_lanes.h).
#include "ops/group_lanes.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace moeflux {

bool group_lanes_eligible(const QWeight& w) {
  return w.format == WFormat::Affine && w.bits == 4 && w.group_size > 0 && w.group_size % 32 == 0 &&
         w.cols % w.group_size == 0;
}

void convert_group_lanes(const QWeight& w, int64_t r0, int64_t r1, bool to_lanes, uint8_t* out) {
  MF_ASSERT(group_lanes_eligible(w) && w.group_lanes != to_lanes && 0 <= r0 && r0 <= r1 && r1 <= w.rows);
  const int64_t words = w.cols / 8, ng = w.cols / w.group_size, wg = w.group_size / 8;
  const size_t rb = w.row_bytes();
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = w.data + size_t(r) * rb;
    uint8_t* dst = out + size_t(r - r0) * rb;
    for (int64_t k = 0; k < words; ++k) {
      const int64_t p = group_lane_word(k, ng, wg);
      std::memcpy(dst + 4 * (to_lanes ? p : k), src + 4 * (to_lanes ? k : p), 4);
    }
  }
}

void to_group_lanes_in_place(const QWeight& w) {
  MF_ASSERT(group_lanes_eligible(w) && !w.group_lanes);
  const int64_t words = w.cols / 8, ng = w.cols / w.group_size, wg = w.group_size / 8;
  std::vector<int64_t> pos(static_cast<size_t>(words));  // one permutation for every row
  for (int64_t k = 0; k < words; ++k) pos[size_t(k)] = group_lane_word(k, ng, wg);
  uint8_t* data = const_cast<uint8_t*>(w.data);  // PRECOND: writable
  const size_t rb = w.row_bytes();
  // Rows in parallel: a resident pack's weights are rewritten in one pass at load.
  cpu_thread_pool().parallel_for(w.rows, 64, [&](int64_t r0, int64_t r1) {
    std::vector<uint8_t> row(rb);
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* p = data + size_t(r) * rb;
      std::memcpy(row.data(), p, rb);
      for (int64_t k = 0; k < words; ++k) std::memcpy(p + 4 * pos[size_t(k)], row.data() + 4 * k, 4);
    }
  });
}

}  // namespace moeflux
