// Where the words of a 4-bit affine row sit in the group-lane code layout (QWeight::group_lanes;
// the layout and its rewrite: backend/cpu/group_lanes.h), so that any reader can decode it.
#pragma once
#include <cstdint>

namespace moeflux {

// Position in a group-lane row of natural code word k (n_groups groups of wg words).
inline int64_t group_lane_word(int64_t k, int64_t n_groups, int64_t wg) {
  const int64_t g = k / wg, t = k % wg, b = g / 16, nb = n_groups - 16 * b < 16 ? n_groups - 16 * b : 16;
  return 16 * b * wg + t * nb + g % 16;
}

// Steps (64-byte loads of a block: word t of up to 16 groups) in a row of cols columns:
// wg per block of 16 groups.
inline int64_t group_lane_steps(int64_t cols, int64_t group_size) {
  return (cols / group_size + 15) / 16 * (group_size / 8);
}

}  // namespace moeflux
