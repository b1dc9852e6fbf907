// Running the moeflux executable from the CLI tests: exit status and stdout+stderr.
#pragma once
#include <string>

#include "util/test_util.h"

namespace moeflux::test {

inline const std::string kDemoPack = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";

// `moeflux ARGS` with stderr merged into the output; *rc: the exit status.
inline std::string moeflux(const std::string& args, int* rc) {
  std::string out;
  *rc = run_command(moeflux_exe() + " " + args + " 2>&1", &out);
  return out;
}

}  // namespace moeflux::test
