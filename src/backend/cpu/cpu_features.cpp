// CPU feature detection (__builtin_cpu_supports, which also checks the OS saves the vector
// state) and the physical core count from /sys topology, falling back to the affinity mask.
#include "backend/cpu/cpu_features.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <cpuid.h>

#include "core/error.h"
#include "backend/cpu/tuning_switch.h"

namespace moeflux {

namespace {
// F16C through cpuid: clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

CpuIsa detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni");
  return vnni ? CpuIsa::Avx512Vnni : avx512 ? CpuIsa::Avx512 : avx2 ? CpuIsa::Avx2 : CpuIsa::Scalar;
}

// MOEFLUX_CPU_ISA=<name> (a developer knob, e.g. to run the model tests at avx512vnni)
// overrides the default; an unknown or unsupported name is reported and ignored.
CpuIsa initial_isa() {
  const char* env = std::getenv("MOEFLUX_CPU_ISA");
  if (!env || !*env) return cpu_isa_default();
  const auto isa = cpu_isa_from_name(env);
  if (isa && *isa <= cpu_isa_detected()) return *isa;
  std::fprintf(stderr, "moeflux: warning: MOEFLUX_CPU_ISA=%s is %s; using %s\n", env,
               isa ? "not supported by this CPU" : "not a known level",
               std::string(cpu_isa_name(cpu_isa_default())).c_str());
  return cpu_isa_default();
}

std::atomic<CpuIsa>& active() {
  static std::atomic<CpuIsa> isa{initial_isa()};
  return isa;
}

constexpr std::pair<CpuIsa, std::string_view> kNames[] = {
    {CpuIsa::Scalar, "scalar"}, {CpuIsa::Avx2, "avx2"}, {CpuIsa::Avx512, "avx512"},
    {CpuIsa::Avx512Vnni, "avx512vnni"}};
}  // namespace

CpuIsa cpu_isa_detected() {
  static const CpuIsa isa = detect();
  return isa;
}

CpuIsa cpu_isa_default() { return cpu_isa_detected(); }

CpuIsa cpu_isa() { return active().load(std::memory_order_relaxed); }

namespace {
bool is_amd() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
}

// $MOEFLUX_MATVEC_ROWS (1 or 4; 0 when unset or invalid), read once.
int env_row_streams() {
  static const int rows = [] {
    const char* env = std::getenv("MOEFLUX_MATVEC_ROWS");
    if (env && (std::string(env) == "1" || std::string(env) == "4")) return std::atoi(env);
    if (env && *env) std::fprintf(stderr, "moeflux: warning: MOEFLUX_MATVEC_ROWS=%s is not 1 or 4; ignored\n", env);
    return 0;
  }();
  return rows;
}

std::atomic<int>& row_streams() {  // set_matvec_row_streams; 0: the default
  static std::atomic<int> rows{0};
  return rows;
}
}  // namespace

bool cpu_is_amd() {
  static const bool amd = is_amd();  // cpuid once (it traps to the hypervisor in a VM)
  return amd;
}

namespace {
// AMD family 19h with AVX-512: Zen 4 (Zen 3, the same family, has no AVX-512).
bool is_zen4() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!cpu_is_amd() || !__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned family = ((a >> 8) & 0xf) + (((a >> 8) & 0xf) == 0xf ? (a >> 20) & 0xff : 0);
  return family == 0x19 && cpu_isa_detected() >= CpuIsa::Avx512;
}
}  // namespace

namespace {
int64_t env_count(const char* name, int64_t fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::max<int64_t>(0, std::atoll(e)) : fallback;
}
TuningSwitch row_spread_switch("MOEFLUX_MATVEC_SPREAD");
}  // namespace

namespace detail {
TuningSwitch codes_distance_switch("MOEFLUX_CODES_DISTANCE");
TuningSwitch params_distance_switch("MOEFLUX_PARAMS_DISTANCE");
const int64_t codes_ahead_set = env_count("MOEFLUX_CODES_AHEAD", is_zen4() ? 256 : cpu_is_amd() ? 2048 : 1536);
const int64_t codes_ahead_alt = env_count("MOEFLUX_CODES_AHEAD_ALT", 4096);
const int64_t params_ahead_set = env_count("MOEFLUX_PARAMS_AHEAD", cpu_is_amd() && !is_zen4() ? 16 : 2);
const int64_t params_ahead_alt = env_count("MOEFLUX_PARAMS_AHEAD_ALT", 16);
}  // namespace detail

int matvec_row_streams(bool group_lanes) {
  const bool amd = cpu_is_amd();
  int rows = row_streams().load(std::memory_order_relaxed);
  if (rows == 0) rows = env_row_streams();
  if (rows != 0) return rows;
  return group_lanes || amd ? 4 : 1;
}

bool matvec_row_spread() { return row_spread_switch.on(); }
void set_matvec_row_spread(bool on) { row_spread_switch.set(on); }

void set_matvec_row_streams(int rows) {
  if (rows != 0 && rows != 1 && rows != 4) fail("matvec row streams: ", rows, " (expected 1 or 4, or 0: the default)");
  row_streams().store(rows, std::memory_order_relaxed);
}

void set_cpu_isa(CpuIsa isa) {
  if (isa > cpu_isa_detected())
    fail("cpu isa ", cpu_isa_name(isa), " is not supported by this CPU (best: ",
         cpu_isa_name(cpu_isa_detected()), ")");
  active().store(isa, std::memory_order_relaxed);
}

std::string_view cpu_isa_name(CpuIsa isa) {
  for (const auto& [i, n] : kNames)
    if (i == isa) return n;
  return "?";
}

std::optional<CpuIsa> cpu_isa_from_name(std::string_view s) {
  for (const auto& [i, n] : kNames)
    if (n == s) return i;
  return std::nullopt;
}

}  // namespace moeflux
