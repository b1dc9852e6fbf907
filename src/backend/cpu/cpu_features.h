// Run-time CPU feature detection and the instruction-set level the CPU kernels use
// (src/backend/cpu/). The level can be lowered (tests force every level the machine has, a
// --cpu-isa flag can pick one) but never raised above what the CPU supports.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "backend/cpu/tuning_switch.h"
#include "core/cpu_count.h"

namespace moeflux {

// Ordered: each level implies the ones below it.
enum class CpuIsa : uint8_t {
  Scalar,  // the reference loops
  Avx2,    // AVX2 + FMA + F16C
  Avx512,  // AVX-512 F/BW/VL/DQ (+ the AVX2 set)
  // + AVX512-VNNI: affine 4/8-bit matvec as integer dots, x per quantisation group in three
  // int8 digits (about 2^-23 of the group's largest |x| for 4-bit codes, 2^-21 for 8-bit; f32
  // rounding level: the fixture suites pass with it). The default where the CPU has it: about
  // half the vector work per code byte (a9dc2a6:docs/benchmarks.md); MOEFLUX_CPU_ISA=
  // avx512 keeps every dot in f32.
  Avx512Vnni,
};

CpuIsa cpu_isa_detected();  // the best level this CPU (and OS) supports
CpuIsa cpu_isa_default();   // the best level this CPU supports (cpu_isa_detected())
CpuIsa cpu_isa();           // the level in use now (default: cpu_isa_default(), or $MOEFLUX_CPU_ISA)
// Selects the level for the CPU ops. Raises Error when the CPU lacks it.
void set_cpu_isa(CpuIsa isa);

std::string_view cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512", "avx512vnni"
std::optional<CpuIsa> cpu_isa_from_name(std::string_view s);

// Rows the AVX-512 affine matvec reads side by side (1 or 4; the result is bit-identical
// either way), for natural rows or group-lane ones (backend/cpu/group_lanes.h). Default: 4 on AMD
// CPUs, 1 elsewhere for natural rows, from measurements (a9dc2a6:docs/benchmarks.md): four
// code streams per core decode 10-25% faster from DRAM on Zen 5, and 5-20% slower on an Intel
// server CPU; 4 for group-lane rows everywhere (spread, they decoded 49.6-50.3 t/s on the
// Intel CPU against 44.0-49.0 single).
// $MOEFLUX_MATVEC_ROWS overrides both.
int matvec_row_streams(bool group_lanes = false);
// Sets it for both (1 or 4; tests, benchmarks), or back to the default (0). Raises Error on
// another value.
void set_matvec_row_streams(int rows);
namespace detail {
// The prefetch distances, set at start-up (the environment, the CPU's vendor), and the tuning
// switches that pick between them (for paired A/Bs: moeflux bench --alternate): read inline,
// in the kernels' row loops.
extern TuningSwitch codes_distance_switch, params_distance_switch;
extern const int64_t codes_ahead_set, codes_ahead_alt, params_ahead_set, params_ahead_alt;
}  // namespace detail

// Bytes ahead of each stream of codes that the AVX-512 affine matvecs prefetch: 256 on Zen 4
// (a 2-core Zen 4 VM, paired: 0 decoded 12% faster than 2 KiB on one thread, 1% on two; 256
// decoded 6-7% faster than 0 on one and two threads, 4 and 12 layers, 384 and 512 less so on
// two, 1 KiB 15% slower; 0 still prefetches the line being read, and dropping that was 6%
// slower), 2 KiB on other AMD CPUs
// (a9dc2a6:docs/benchmarks.md: Zen 5 decoded 40.6-41.2 t/s at 2 KiB against 35.2-37.5 at 4
// KiB), 1.5 KiB elsewhere (paired A/Bs of Intel decode: 0.75-2 KiB alike, 4 KiB 2-3% slower,
// 8 KiB 5% slower). $MOEFLUX_CODES_AHEAD (bytes,
// read at start-up) overrides; the tuning switch MOEFLUX_CODES_DISTANCE=0 takes
// $MOEFLUX_CODES_AHEAD_ALT (default 4096) instead. (The AVX2 kernels prefetch 2 KiB ahead.)
inline int64_t matvec_codes_ahead() {
  return detail::codes_distance_switch.on() ? detail::codes_ahead_set : detail::codes_ahead_alt;
}
// Rows ahead whose scales and biases the matvecs prefetch (backend/cpu/kernels.h): 16 on AMD
// CPUs but Zen 4, 2 elsewhere (on Intel 0-2 rows alike, 4 ~0.5% slower, 16 ~2%; on a 2-core
// Zen 4 VM, with the codes unprefetched, 16 rows decoded ~15% slower than 0 or 2 on one
// thread and on two, paired: 56.7 / 66.3 and 98.4 / 114.8 t/s).
// $MOEFLUX_PARAMS_AHEAD overrides; MOEFLUX_PARAMS_DISTANCE=0 takes $MOEFLUX_PARAMS_AHEAD_ALT
// (default 16).
inline int64_t matvec_params_ahead() {
  return detail::params_distance_switch.on() ? detail::params_ahead_set : detail::params_ahead_alt;
}
// Whether those four rows may be spread over a range (four sequential streams instead of four
// adjacent rows; backend/cpu/avx512_util.h, for_row_blocks). Default on; the tuning switch
// MOEFLUX_MATVEC_SPREAD=0 turns it off (3% slower on Intel).
// Bit-identical either way.
bool matvec_row_spread();
void set_matvec_row_spread(bool on);

// Whether the CPU is AMD's (cpuid's vendor, read once): some defaults differ by vendor, from
// measurements on both kinds of machine.
bool cpu_is_amd();


// Sets the level for one scope (tests, benchmarks) and restores the previous one.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa) : prev_(cpu_isa()) { set_cpu_isa(isa); }
  ~ScopedCpuIsa() { set_cpu_isa(prev_); }
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;

 private:
  CpuIsa prev_;
};

}  // namespace moeflux
