// Conversions to and from the group-lane code layout (see group_lanes.h).
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/group_lanes.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace moeflux {

bool group_lanes_eligible(const QWeight& w) {
  return w.format == WFormat::Affine && w.bits == 4 && w.group_size > 0 && w.group_size % 32 == 0 &&
         w.cols % w.group_size == 0;
}

namespace {
// One row's code words between natural order and group-lane order (group_lane_word, without
// its divisions: the kernels that read natural codes convert every row they touch).
template <bool TO_LANES>
void permute_row(const uint8_t* src, uint8_t* dst, int64_t ng, int64_t wg) {
  for (int64_t b = 0; 16 * b < ng; ++b) {
    const int64_t nb = std::min<int64_t>(16, ng - 16 * b), base = 16 * b * wg;
    for (int64_t l = 0; l < nb; ++l)
      for (int64_t t = 0; t < wg; ++t) {
        const int64_t nat = base + l * wg + t, lan = base + t * nb + l;
        std::memcpy(dst + 4 * (TO_LANES ? lan : nat), src + 4 * (TO_LANES ? nat : lan), 4);
      }
  }
}
}  // namespace

void convert_group_lanes(const QWeight& w, int64_t r0, int64_t r1, bool to_lanes, uint8_t* out) {
  MF_ASSERT(group_lanes_eligible(w) && w.group_lanes != to_lanes && 0 <= r0 && r0 <= r1 && r1 <= w.rows);
  const int64_t ng = w.cols / w.group_size, wg = w.group_size / 8;
  const size_t rb = w.row_bytes();
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = w.data + size_t(r) * rb;
    uint8_t* dst = out + size_t(r - r0) * rb;
    if (to_lanes) permute_row<true>(src, dst, ng, wg);
    else permute_row<false>(src, dst, ng, wg);
  }
}

void to_group_lanes_in_place(const QWeight& w, bool on_pool) {
  MF_ASSERT(group_lanes_eligible(w) && !w.group_lanes);
  const int64_t ng = w.cols / w.group_size, wg = w.group_size / 8;
  uint8_t* data = const_cast<uint8_t*>(w.data);  // PRECOND: writable
  const size_t rb = w.row_bytes();
  auto rows = [&](int64_t r0, int64_t r1) {
    std::vector<uint8_t> row(rb);
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* p = data + size_t(r) * rb;
      std::memcpy(row.data(), p, rb);
      permute_row<true>(row.data(), p, ng, wg);
    }
  };
  // Rows in parallel: a resident pack's weights are rewritten in one pass at load.
  if (on_pool) cpu_thread_pool().parallel_for(w.rows, 64, rows);
  else rows(0, w.rows);
}

}  // namespace moeflux
