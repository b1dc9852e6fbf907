// The disk's sequential read rate, measured by moeflux bench beside the streaming numbers:
// large O_DIRECT reads (page cache bypassed) through a set of files, one after another.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeflux::bench {

// Reads up to `max_bytes` from the files in order with `block`-byte direct reads on one
// thread; returns GB/s (1e9 bytes). Falls back to buffered reads where O_DIRECT is refused
// (*direct_used says which). Error naming the file on I/O failure.
double disk_read_gbs(const std::vector<std::string>& files, uint64_t max_bytes, bool* direct_used,
                     uint64_t block = 16ull << 20);

}  // namespace moeflux::bench
