// MmapFile: mapped and resident (copied) files hold the same bytes; a resident copy keeps its
// data through drop_pages, also when read in several pieces, and every piece is read-only;
// empty and missing files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mmap_file.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

std::vector<uint8_t> write_bytes(const std::string& path, size_t n) {
  std::vector<uint8_t> b(n);
  uint32_t s = 12345;
  for (auto& v : b) s = s * 1664525u + 1013904223u, v = uint8_t(s >> 24);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(n));
  return b;
}

TEST(MmapFile, ResidentCopyHoldsTheFileBytes) {
  test::TempDir dir;
  const std::string path = dir.file("w.bin");
  const size_t n = (size_t(3) << 20) + 17;  // not a whole number of huge pages
  const auto want = write_bytes(path, n);
  MmapFile mapped(path), res(path, MapMode::Resident);
  EXPECT_FALSE(mapped.resident());
  EXPECT_TRUE(res.resident());
  ASSERT_EQ(res.size(), n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(res.data()) % 64, 0u);
  EXPECT_EQ(std::vector<uint8_t>(res.data(), res.data() + n), want);
  EXPECT_EQ(std::vector<uint8_t>(mapped.data(), mapped.data() + n), want);
  // Dropping pages is for mapped files only: the resident copy keeps its data.
  res.drop_pages(res.data(), n);
  mapped.drop_pages(mapped.data(), n);
  EXPECT_EQ(std::vector<uint8_t>(res.data(), res.data() + n), want);
  EXPECT_EQ(std::vector<uint8_t>(mapped.data(), mapped.data() + n), want);
}

// The permissions /proc/self/maps gives to each mapping overlapping [b, e), in address order.
std::vector<std::string> permissions(uintptr_t b, uintptr_t e) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> out;
  for (std::string line; std::getline(maps, line);) {
    std::istringstream ss(line);
    std::string range, perms;
    ss >> range >> perms;
    const size_t dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (lo < e && hi > b) out.push_back(perms);
  }
  return out;
}

// Files over 64 MiB are read in pieces by several threads: every piece lands in its place and
// is made read-only (each piece is protected on its own, right after its copy).
TEST(MmapFile, ResidentCopyOfSeveralPieces) {
  test::TempDir dir;
  const std::string path = dir.file("big.bin");
  const size_t n = (size_t(129) << 20) + 4097;  // 3 pieces, the last one short
  const auto want = write_bytes(path, n);
  MmapFile res(path, MapMode::Resident);
  ASSERT_EQ(res.size(), n);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), res.data()));
  const auto perms = permissions(reinterpret_cast<uintptr_t>(res.data()), reinterpret_cast<uintptr_t>(res.data()) + n);
  ASSERT_FALSE(perms.empty());
  for (const std::string& p : perms) EXPECT_EQ(p.substr(0, 3), "r--") << p;
}

TEST(MmapFile, EmptyAndMissingFiles) {
  test::TempDir dir;
  const std::string empty = dir.file("empty.bin");
  write_bytes(empty, 0);
  for (MapMode mode : {MapMode::Map, MapMode::Resident}) {
    MmapFile f(empty, mode);
    EXPECT_EQ(f.size(), 0u);
    try {
      MmapFile g(dir.file("missing.bin"), mode);
      ADD_FAILURE() << "no error for a missing file";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("missing.bin: cannot open"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(MmapFile(dir.path(), MapMode::Resident), Error);  // a directory
}

}  // namespace
}  // namespace moeflux
