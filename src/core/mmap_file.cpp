// mmap-backed read-only files and a small whole-file reader.
#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"

namespace moeflux {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;

// One load per 4 KiB page of [p, p + n) (volatile: the compiler keeps every load).
void touch_pages(const uint8_t* p, size_t n) {
  for (size_t at = 0; at < n; at += 4096) (void)*reinterpret_cast<const volatile uint8_t*>(p + at);
}

// The file's bytes into fresh anonymous memory (2 MiB-aligned for huge pages), read-only after.
const uint8_t* read_resident(int fd, const std::string& path, size_t size, size_t* alloc) {
  *alloc = (size + kHugePage - 1) / kHugePage * kHugePage;
  void* p = ::mmap(nullptr, *alloc + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail(path, ": cannot allocate ", size, " bytes to hold the file: ", std::strerror(errno));
  // Trim to a 2 MiB-aligned start so whole huge pages line up with the data.
  const uintptr_t raw = uintptr_t(p), start = (raw + kHugePage - 1) / kHugePage * kHugePage;
  if (start > raw) ::munmap(p, start - raw);
  if (raw + kHugePage > start) ::munmap(reinterpret_cast<void*>(start + *alloc), raw + kHugePage - start);
  auto* buf = reinterpret_cast<uint8_t*>(start);
  ::madvise(buf, *alloc, MADV_HUGEPAGE);  // advice only: without THP the copy still works
  // Pieces of 64 MiB taken by up to 8 threads: one pread loop copies ~6 GB/s from the page
  // cache, short of what the memory (or an NVMe array) gives. The first error wins.
  const size_t piece = size_t(64) << 20, pieces = (size + piece - 1) / piece;
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string error;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pieces;) {
      const size_t end = std::min(size, (i + 1) * piece);
      // The piece's span of the allocation (whole huge pages: pieces are 2 MiB multiples).
      const size_t span_end = i + 1 == pieces ? *alloc : end;
      for (size_t at = i * piece; at < end;) {
        const ssize_t n = ::pread(fd, buf + at, end - at, off_t(at));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          const std::string msg = n < 0 ? "read error at byte " + std::to_string(at) + ": " + std::strerror(errno)
                                        : "file ended at byte " + std::to_string(at) + " of " + std::to_string(size) +
                                              " while reading it into memory";
          std::lock_guard<std::mutex> lock(mu);
          if (error.empty()) error = msg;
          next.store(pieces);  // the others stop taking pieces
          return;
        }
        at += size_t(n);
      }
      // Read-only from here, then one load per 4 KiB page while the other threads still copy.
      // In a VM the first read of each 4 KiB page after an mprotect costs ~1 us (one
      // load per 2 MiB does not help; without the mprotect there is no cost): a first read
      // streamed ~5 GB/s instead of ~40, and decode paid it on every expert it met first.
      ::mprotect(buf + i * piece, span_end - i * piece, PROT_READ);
      touch_pages(buf + i * piece, end - i * piece);
    }
  };
  const size_t n_threads = std::min<size_t>({pieces, 8, std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer threads: the rest of the pieces are read by those running
    }
  }
  work();
  for (auto& t : threads) t.join();
  if (!error.empty()) {
    ::munmap(buf, *alloc);
    fail(path, ": ", error);
  }
  return buf;
}
}  // namespace

MmapFile::MmapFile(const std::string& path, MapMode mode) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0 && mode == MapMode::Resident) {
    try {
      data_ = read_resident(fd, path, size_, &alloc_);
    } catch (...) {
      ::close(fd);
      throw;
    }
    resident_ = true;
  } else if (size_ > 0) {
    alloc_ = size_;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(path, ": cannot mmap: ", std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MmapFile::~MmapFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), alloc_);
}

void MmapFile::make_writable() const {
  MF_ASSERT(resident_);
  if (::mprotect(const_cast<uint8_t*>(data_), alloc_, PROT_READ | PROT_WRITE) != 0)
    fail(path_, ": cannot make the resident copy writable: ", std::strerror(errno));
}

void MmapFile::drop_pages(const void* p, size_t n) const {
  if (!resident_) drop_mapped_pages(p, n);
}

void drop_mapped_pages(const void* p, size_t n) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = uintptr_t(p) / page * page, e = (uintptr_t(p) + n + page - 1) / page * page;
  if (n > 0) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(path, ": read error");
  return ss.str();
}

}  // namespace moeflux
