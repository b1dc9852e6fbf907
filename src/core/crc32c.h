// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected, initial and final value ~0: the
// iSCSI / ext4 checksum) over buffers of any size: the checksum of version-2 packs
// (docs/pack-format.md). Where the CPU has SSE4.2 the crc32 instruction runs three interleaved
// streams whose results are combined with precomputed shift tables (several times zlib's
// CRC-32 on one core, faster than copying the bytes from the page cache); elsewhere a
// slicing-by-8 table loop. Written here because no Debian package offers a hardware CRC-32C
// to C or C++ (`apt-cache search crc32c` lists a Python module only).
#pragma once
#include <cstdint>

namespace moeflux {

// crc: a previous result (0 to start); crc32c_update(crc32c_update(0, a), b) = CRC-32C of a||b.
uint32_t crc32c_update(uint32_t crc, const uint8_t* p, uint64_t n);
inline uint32_t crc32c_of(const uint8_t* p, uint64_t n) { return crc32c_update(0, p, n); }

// The table loop alone (tests compare it with the hardware path; benchmarks time both).
uint32_t crc32c_update_portable(uint32_t crc, const uint8_t* p, uint64_t n);
// Whether crc32c_update uses the crc32 instruction on this CPU.
bool crc32c_hardware();

}  // namespace moeflux
