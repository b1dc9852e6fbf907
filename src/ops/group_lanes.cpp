// Conversions to and from the group-lane code layout (see group_lanes.h).
#include "ops/group_lanes.h"

#include <cstring>
#include <vector>

#include "core/error.h"

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
  std::vector<uint8_t> row(w.row_bytes());
  uint8_t* data = const_cast<uint8_t*>(w.data);  // PRECOND: writable
  for (int64_t r = 0; r < w.rows; ++r) {
    convert_group_lanes(w, r, r + 1, true, row.data());
    std::memcpy(data + size_t(r) * row.size(), row.data(), row.size());
  }
}

}  // namespace moeflux
