// libFuzzer target: safetensors header parsing and validation on arbitrary bytes. The input
// is a whole file; the parser must either return a header whose every tensor lies inside the
// file or raise moeflux::Error, and never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto h = moeflux::parse_safetensors_header(data, size, size, "fuzz");
    for (const auto& t : h.tensors) {
      MF_ASSERT(h.data_start + t.offset + t.nbytes <= size);
      // touch the first and last byte of every tensor: out-of-bounds shows up under ASan
      if (t.nbytes) {
        volatile uint8_t a = data[h.data_start + t.offset];
        volatile uint8_t b = data[h.data_start + t.offset + t.nbytes - 1];
        (void)a, (void)b;
      }
    }
  } catch (const moeflux::Error&) {
  }
  return 0;
}
