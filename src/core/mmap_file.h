// A read-only file in memory (RAII): memory-mapped, or (Resident) copied once into anonymous
// memory that asks for transparent huge pages. Resident weights stream faster than mapped
// page-cache pages (measured +12% decode on a Zen 5 VM: a 4 KiB page costs a TLB walk,
// nested under virtualisation) at the price of a read at open and no sharing between
// processes. Opening failures raise moeflux::Error naming the path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace moeflux {

enum class MapMode { Map, Resident };

class MmapFile {
 public:
  explicit MmapFile(const std::string& path, MapMode mode = MapMode::Map);
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool resident() const { return resident_; }
  // Releases this process's pages of [p, p + n) of a mapped file (drop_mapped_pages); a
  // resident copy keeps them (dropping anonymous pages would discard the data).
  void drop_pages(const void* p, size_t n) const;
  // A resident copy made writable, so that a layout can be rewritten in place (the
  // group-lane code layout, backend/cpu/group_lanes.h). PRECOND: resident().
  void make_writable() const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t alloc_ = 0;  // bytes of the mapping (a resident copy rounds up to 2 MiB)
  bool resident_ = false;
};

// Releases the pages of [p, p + n) of a read-only file mapping from this process (they stay
// in the page cache); keeps RSS bounded while streaming through large mapped files.
// PRECOND: p lies in a file mapping (on anonymous memory this would discard data).
void drop_mapped_pages(const void* p, size_t n);

// Reads a whole (small) file into a string; raises Error naming the path on failure.
std::string read_text_file(const std::string& path);

}  // namespace moeflux
