// Run-time CPU feature detection and the instruction-set level the CPU kernels use
// (src/ops/cpu/). The level can be lowered (tests force every level the machine has, a
// --cpu-isa flag can pick one) but never raised above what the CPU supports.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace moeflux {

// Ordered: each level implies the ones below it.
enum class CpuIsa : uint8_t {
  Scalar,  // the reference loops
  Avx2,    // AVX2 + FMA + F16C
  Avx512,  // AVX-512 F/BW/VL/DQ (+ the AVX2 set)
  // + AVX512-VNNI: affine 4/8-bit matvec as integer dots with x quantised to int16 per 32
  // values. Changes results by at most sum|w| * max|x_block| / 65534 (~3e-5 relative per
  // matvec, see kernels_avx512_vnni.cpp), which is enough to flip near-tied expert choices of
  // the small fixture models (logits off by up to 2.6e-2 vs the 1e-4 bound), so it is never
  // the default: it must be selected (set_cpu_isa / MOEFLUX_CPU_ISA=avx512vnni).
  Avx512Vnni,
};

CpuIsa cpu_isa_detected();  // the best level this CPU (and OS) supports
CpuIsa cpu_isa_default();   // the best exact-float level: detected, capped at Avx512
CpuIsa cpu_isa();           // the level in use now (default: cpu_isa_default(), or $MOEFLUX_CPU_ISA)
// Selects the level for the CPU ops. Raises Error when the CPU lacks it.
void set_cpu_isa(CpuIsa isa);

std::string_view cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512", "avx512vnni"
std::optional<CpuIsa> cpu_isa_from_name(std::string_view s);

// Number of physical cores this process may run on (SMT siblings counted once).
int physical_core_count();

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
