// mmap-backed read-only files and a small whole-file reader.
#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moeflux {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;

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
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, buf + done, std::min<size_t>(size - done, size_t(1) << 30), off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      ::munmap(buf, *alloc);
      if (e) fail(path, ": read error at byte ", done, ": ", std::strerror(e));
      fail(path, ": file ended at byte ", done, " of ", size, " while reading it into memory");
    }
    done += size_t(n);
  }
  ::mprotect(buf, *alloc, PROT_READ);
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
