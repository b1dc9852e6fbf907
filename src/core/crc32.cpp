// zlib's crc32 in chunks that fit its uInt length.
#include "core/crc32.h"

#include <zlib.h>

#include <algorithm>

namespace moeflux {

uint32_t crc32_update(uint32_t crc, const uint8_t* p, uint64_t n) {
  while (n > 0) {
    const uInt k = uInt(std::min<uint64_t>(n, 1u << 30));
    crc = uint32_t(::crc32(crc, p, k));
    p += k, n -= k;
  }
  return crc;
}

}  // namespace moeflux
