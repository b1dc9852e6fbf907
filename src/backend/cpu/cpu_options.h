// The CPU backend's options: what a user picks (threads, instruction set, weight layout) and
// the machine-dependent choices between equivalent paths. Plain data: no kernel headers.
#pragma once
#include <string>

namespace moeflux {

// Whether the CPU backend rewrites a resident pack's 4-bit affine weights (group size a
// multiple of 32) into the group-lane code layout (backend/cpu/group_lanes.h) that the integer
// matvecs read with less vector work than file order (AVX-512 VNNI: about two thirds; AVX2: no
// per-block reduction, ~19% faster on Zen 1). Auto: where one of those is the CPU level in use
// (AVX2 on AMD CPUs only: at an Intel server CPU's AVX2 level it decoded ~4% slower). On: always
// (the AVX-512 and AVX2 matmuls decode the layout too, group size 64 and up; the float matvecs
// and the other kernels convert rows back as they read them). Mapped packs and checkpoints
// keep file order (their bytes are the page cache's); expert-cache records are rewritten as
// each is read, by Auto only when the cache's budget holds them all.
enum class Repack { Off, Auto, On };

struct CpuOptions {
  int threads = 0;        // 0: as set before (at first: the physical cores this process may run on)
  std::string isa;        // "scalar", "avx2", "avx512", "avx512vnni"; empty: the best the CPU has
  Repack repack = Repack::Auto;
  // Steps that hold a prompt chunk take x in two int8 digits in the AVX-512 VNNI tiles
  // (set_tile_digits in cpu_ops.h): prefill about 1.25x faster, each x within about 2^-16 of its
  // group's largest |x| instead of f32's level. Decode-only steps keep three digits.
  bool fast_prefill = false;
};

}  // namespace moeflux
