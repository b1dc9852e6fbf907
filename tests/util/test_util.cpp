// Test helpers.
#include "util/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/dtype.h"

namespace moeflux::test {

std::string data_dir() { return MOEFLUX_TEST_DATA; }
std::string fixture_dir(const std::string& name) { return data_dir() + "/fixtures/" + name; }
std::string moeflux_exe() { return MOEFLUX_EXE; }

Golden load_golden(const std::string& path) {
  SafetensorsFile f(path);
  Golden g;
  for (const auto& t : f.tensors()) {
    g.shape[t.name] = t.shape;
    const size_t n = size_t(t.numel());
    if (dtype_is_float(t.dtype)) {
      auto& v = g.f32[t.name];
      v.resize(n);
      for (size_t i = 0; i < n; ++i) v[i] = load_f32(t.dtype, t.data, i);
    } else if (t.dtype == DType::I32) {
      auto& v = g.i32[t.name];
      v.assign(reinterpret_cast<const int32_t*>(t.data), reinterpret_cast<const int32_t*>(t.data) + n);
    } else if (t.dtype == DType::I64) {
      auto& v = g.i32[t.name];
      for (size_t i = 0; i < n; ++i) v.push_back(int32_t(reinterpret_cast<const int64_t*>(t.data)[i]));
    }
  }
  return g;
}

std::vector<float> logits_in_pieces(Session& s, std::span<const int32_t> ids) {
  std::vector<float> logits;
  size_t i = 0;
  for (size_t step : {size_t(37), size_t(1), size_t(5), size_t(64), size_t(1)}) {
    if (i + step > ids.size()) break;
    auto l = s.forward(ids.subspan(i, step));
    logits.insert(logits.end(), l.begin(), l.end());
    i += step;
  }
  while (i < ids.size()) {
    auto l = s.forward(ids.subspan(i++, 1));
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num) / std::sqrt(den);
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "moeflux_test_XXXXXX").string();
  char* p = mkdtemp(tmpl.data());
  if (!p) std::abort();
  path_ = p;
}

TempDir::TempDir(const std::string& parent) {
  std::filesystem::create_directories(parent);
  std::string tmpl = parent + "/moeflux_test_XXXXXX";
  char* p = mkdtemp(tmpl.data());
  if (!p) std::abort();
  path_ = p;
}

std::string scratch_dir() { return MOEFLUX_TEST_SCRATCH; }

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int run_command(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  if (output) *output = out;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<CpuIsa> cpu_isas_available() {
  std::vector<CpuIsa> v;
  for (CpuIsa i : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Avx512Vnni})
    if (i <= cpu_isa_detected()) v.push_back(i);
  return v;
}

}  // namespace moeflux::test
