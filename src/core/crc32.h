// CRC-32 (zlib's polynomial) over buffers of any size: the checksum of pack tensors and
// expert records (docs/pack-format.md), shared by the writer, verify and the expert cache.
#pragma once
#include <cstdint>

namespace moeflux {

uint32_t crc32_update(uint32_t crc, const uint8_t* p, uint64_t n);  // crc: a previous result or 0
inline uint32_t crc32_of(const uint8_t* p, uint64_t n) { return crc32_update(0, p, n); }

}  // namespace moeflux
