// The group-lane code layout of 4-bit affine rows (QWeight::group_lanes), read by the AVX-512
// VNNI matvec (kernels_avx512_vnni.cpp) and the AVX2 integer matvec (kernels_avx2_int.cpp, as
// two halves of 8 lanes). A row's groups are taken 16 at a time (the last block
// may hold fewer, nb); with wg = group_size / 8 code words (u32) per group, word t of group
// 16 b + l sits at word 16 b wg + t nb + l. One 64-byte load of a block's step t then holds word
// t of up to 16 groups, one per 32-bit lane, so a lane sums a whole group in integers and the
// group's scale is applied once per 16 groups instead of once per 64-byte chunk. Rows stay
// whole and in order; scales and biases keep their layout. The byte count is unchanged.
#pragma once
#include <cstdint>

#include "format/group_lane_layout.h"
#include "format/qweight.h"

namespace moeflux {

// Whether w can take the layout: affine, 4-bit, group_size a multiple of 32.
bool group_lanes_eligible(const QWeight& w);

// Rows [r0, r1) of w, which is in natural order (w.group_lanes false), written to `out` (the
// same number of bytes, row r at (r - r0) * row_bytes) in group-lane order, or the reverse
// with to_lanes false (w.group_lanes true). PRECOND: group_lanes_eligible(w).
void convert_group_lanes(const QWeight& w, int64_t r0, int64_t r1, bool to_lanes, uint8_t* out);
// Every row of natural w rewritten in place in group-lane order (the caller then sets
// group_lanes on its views), in parallel on the CPU thread pool, or with on_pool false on the
// calling thread alone (an expert cache's reader must not take the engine's pool: a region
// started meanwhile would run on one thread). PRECOND: eligible, and w.data writable.
void to_group_lanes_in_place(const QWeight& w, bool on_pool = true);

}  // namespace moeflux
