// Helpers shared by the tests: where the test data lives, golden files, error metrics.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cctype>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "engine/session.h"
#include "format/safetensors.h"

namespace moeflux::test {

// A test name from a string parameter ("qwen3_moe/q4" -> "qwen3_moe_q4"): every character
// but letters and digits becomes '_'.
inline std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (auto& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// tests/data (set by CMake), so tests run from any directory of a fresh clone.
std::string data_dir();
std::string fixture_dir(const std::string& name);  // e.g. "qwen3_moe/q4"

// All tensors of a small safetensors file, as f32 (float dtypes) or int32 (integer dtypes).
struct Golden {
  std::map<std::string, std::vector<float>> f32;
  std::map<std::string, std::vector<int32_t>> i32;
  std::map<std::string, std::vector<int64_t>> shape;
};
Golden load_golden(const std::string& path);

// ||a - b|| / ||b||
double rel_l2(const float* a, const float* b, size_t n);
// The logits of all of ids fed to a fresh or reset session in uneven pieces through its cache:
// 37, 1, 5, 64 and 1 tokens, then one at a time.
std::vector<float> logits_in_pieces(Session& s, std::span<const int32_t> ids);
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() ? rel_l2(a.data(), b.data(), a.size()) : INFINITY;
}

// Index of the first differing float, or -1 when bit-identical (NaNs included, which == does
// not take as equal).
inline int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return int64_t(i);
  return -1;
}

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  explicit TempDir(const std::string& parent);  // under `parent` (created if needed)
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A directory in the build tree (a real disk file system, where O_DIRECT works; /tmp may
// be tmpfs).
std::string scratch_dir();

// Path of the built moeflux executable (set by CMake).
std::string moeflux_exe();
// Runs a shell command, returns its exit status; stdout+stderr captured into *output.
int run_command(const std::string& cmd, std::string* output = nullptr);

// Every CPU ISA level this machine can run, lowest first (tests force each in turn).
std::vector<CpuIsa> cpu_isas_available();

}  // namespace moeflux::test
