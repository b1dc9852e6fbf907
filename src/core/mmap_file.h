// A read-only memory-mapped file (RAII). Opening failures raise moeflux::Error naming the path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace moeflux {

class MmapFile {
 public:
  explicit MmapFile(const std::string& path);
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Releases the pages of [p, p + n) of a read-only file mapping from this process (they stay
// in the page cache); keeps RSS bounded while streaming through large mapped files.
// PRECOND: p lies in a file mapping (on anonymous memory this would discard data).
void drop_mapped_pages(const void* p, size_t n);

// Reads a whole (small) file into a string; raises Error naming the path on failure.
std::string read_text_file(const std::string& path);

}  // namespace moeflux
