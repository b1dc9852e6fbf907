// Sequential direct reads for the disk ceiling.
#include "stream/disk_bench.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace moeflux::bench {

double disk_read_gbs(const std::vector<std::string>& files, uint64_t max_bytes, bool* direct_used, uint64_t block) {
  void* buf = ::mmap(nullptr, block, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) fail("disk bench: cannot allocate ", block, " bytes");
  bool direct = true;
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (const auto& f : files) {
      if (total >= max_bytes) break;
      int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
      if (fd < 0 && direct && errno == EINVAL) direct = false, fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail(f, ": cannot open: ", std::strerror(errno));
      for (uint64_t off = 0; total < max_bytes;) {
        const ssize_t n = ::pread(fd, buf, block, off_t(off));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          const int err = errno;
          ::close(fd);
          fail(f, ": read failed at offset ", off, ": ", std::strerror(err));
        }
        if (n == 0) break;
        off += uint64_t(n);
        total += uint64_t(n);
        if (uint64_t(n) < block) break;
      }
      ::close(fd);
    }
  } catch (...) {
    ::munmap(buf, block);
    throw;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::munmap(buf, block);
  if (direct_used) *direct_used = direct;
  return s > 0 ? double(total) / s / 1e9 : 0.0;
}

}  // namespace moeflux::bench
