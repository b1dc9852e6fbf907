// libFuzzer target: config.json parsing (model configuration, rope and quantisation blocks).
// Any input must give a ModelConfig or moeflux::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "format/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    moeflux::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const moeflux::Error&) {
  }
  return 0;
}
