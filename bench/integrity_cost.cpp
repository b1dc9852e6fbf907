// What integrity by default costs (docs/performance.md, "Integrity checks"): checksum speed
// on one core against a copy and a page-cache read, then for a pack the load steps with and
// without their checks (the resident copy, the dense check of a mapped and of a copied pack,
// the expert-record check of a copied pack), each the best of PASSES.
// Usage: integrity_cost [PACK] [PASSES=3]
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/crc32.h"
#include "core/crc32c.h"
#include "format/pack_check.h"
#include "format/pack_store.h"

using namespace moeflux;

namespace {

double best_of(int passes, const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void checksum_speeds(int passes) {
  const size_t n = size_t(256) << 20;
  std::vector<uint8_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = uint8_t((i * 2654435761u) >> 13);
  const std::string path = (std::filesystem::temp_directory_path() / "moeflux_integrity_cost.bin").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, a.data(), n) != ssize_t(n)) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  volatile uint32_t sink = 0;
  std::printf("one core, %zu MiB buffer (page-cache reads: records of 2.5 MiB)\n", n >> 20);
  auto row = [&](const char* what, const std::function<void()>& fn) {
    std::printf("  %-34s %7.2f GB/s\n", what, double(n) / best_of(passes, fn) / 1e9);
  };
  row("CRC-32 (zlib)", [&] { sink = crc32_of(a.data(), n); });
  row("CRC-32C (crc32 instruction)", [&] { sink = crc32c_of(a.data(), n); });
  row("CRC-32C (table loop)", [&] { sink = crc32c_update_portable(0, a.data(), n); });
  row("memcpy", [&] { std::memcpy(b.data(), a.data(), n); });
  const size_t rec = size_t(5) << 19;
  auto read_records = [&](const std::function<void(const uint8_t*, size_t)>& then) {
    for (size_t at = 0; at + rec <= n; at += rec) {
      if (::pread(fd, b.data() + at, rec, off_t(at)) != ssize_t(rec)) std::exit(1);
      then(b.data() + at, rec);
    }
  };
  row("pread (page cache)", [&] { read_records([](const uint8_t*, size_t) {}); });
  row("pread + CRC-32C", [&] { read_records([&](const uint8_t* p, size_t k) { sink = crc32c_of(p, k); }); });
  row("pread + CRC-32 (zlib)", [&] { read_records([&](const uint8_t* p, size_t k) { sink = crc32_of(p, k); }); });
  (void)sink;
  ::close(fd);
  std::filesystem::remove(path);
  std::printf("  crc32 instruction in use: %s\n", crc32c_hardware() ? "yes" : "no");
}

void pack_steps(const std::string& dir, int passes) {
  uint64_t dense = 0, experts = 0;
  {
    auto p = PackStore::open(dir);
    dense = p->manifest().dense_size;
    for (const auto& l : p->manifest().experts) experts += l.size;
    std::printf("\npack %s: version %d (%s), dense %.1f MiB, experts %.1f MiB\n", dir.c_str(), p->manifest().version,
                checksum_name(p->manifest().checksum), double(dense) / 1048576.0, double(experts) / 1048576.0);
  }
  auto row = [&](const char* what, double s, uint64_t bytes) {
    std::printf("  %-46s %8.1f ms  (%.2f GB/s)\n", what, s * 1e3, double(bytes) / s / 1e9);
  };
  row("open, mapped", best_of(passes, [&] { PackStore::open(dir, MapMode::Map); }), dense + experts);
  row("open, mapped + dense check (first touch)",
      best_of(passes, [&] { check_dense_tensors(*PackStore::open(dir, MapMode::Map)); }), dense);
  row("open, resident (copy)", best_of(passes, [&] { PackStore::open(dir, MapMode::Resident); }), dense + experts);
  auto resident = PackStore::open(dir, MapMode::Resident);
  row("  dense check of the copy", best_of(passes, [&] { check_dense_tensors(*resident); }), dense);
  row("  expert-record check of the copy", best_of(passes, [&] { check_expert_records(*resident); }), experts);
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  checksum_speeds(passes);
  if (argc > 1) {
    try {
      pack_steps(argv[1], passes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "integrity_cost: %s\n", e.what());
      return 1;
    }
  }
  return 0;
}
