// Helpers for the pack tests: converting a fixture with the CLI, reading and editing files.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "util/test_util.h"

namespace moeflux::test {

// Runs `moeflux convert fixture_dir(fixture) dst args --quiet`; fails the test on error.
inline void convert_fixture(const std::string& fixture, const std::string& dst, const std::string& args = "") {
  std::string out;
  const std::string cmd = moeflux_exe() + " convert " + fixture_dir(fixture) + " " + dst + " --quiet " + args;
  ASSERT_EQ(run_command(cmd, &out), 0) << cmd << "\n" << out;
}

inline std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_file(const std::string& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// Flips the bits of one byte of a file in place.
inline void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c = char(~c);
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
}

}  // namespace moeflux::test
