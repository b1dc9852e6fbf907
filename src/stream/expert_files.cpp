// Opening expert layer files (buffered or O_DIRECT) and reading whole records.
#include "stream/expert_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace moeflux {

ExpertFiles::ExpertFiles(const std::string& dir, const std::vector<ExpertLayer>& layers, bool direct)
    : dir_(dir), layers_(layers), direct_(direct), fds_(layers.size()) {
  if (direct_)
    for (const auto& l : layers_)
      for (size_t e = 0; e < l.records.size(); ++e)
        if (l.records[e].offset % kRecordAlign || l.records[e].size % kRecordAlign)
          fail(path(int(&l - layers_.data())), ": record of expert ", e,
               " is not 4096-aligned, which direct I/O needs");
}

ExpertFiles::~ExpertFiles() = default;

std::string ExpertFiles::path(int l) const {
  return (std::filesystem::path(dir_) / layers_[size_t(l)].file).string();
}

std::shared_ptr<const int> ExpertFiles::fd(int l) {
  std::lock_guard lock(mu_);
  auto& slot = fds_[size_t(l)];
  if (slot) return slot;
  const std::string p = path(l);
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (direct_ ? O_DIRECT : 0));
  if (fd < 0) {
    const int err = errno;
    if (direct_ && err == EINVAL)
      fail(p, ": the file system does not support direct I/O (O_DIRECT); use --io buffered");
    fail(p, ": cannot open expert file: ", std::strerror(err));
  }
  slot = std::shared_ptr<const int>(new int(fd), [](const int* f) {
    ::close(*f);
    delete f;
  });
  return slot;
}

void ExpertFiles::invalidate(int l) {
  std::lock_guard lock(mu_);
  fds_[size_t(l)].reset();
}

std::string ExpertFiles::describe_failure(int l, int e, const std::string& why) const {
  const PackRecord& r = layers_[size_t(l)].records[size_t(e)];
  return "layer " + std::to_string(layers_[size_t(l)].layer) + " expert " + std::to_string(e) + " (" +
         path(l) + ", offset " + std::to_string(r.offset) + ", " + std::to_string(r.size) +
         " bytes): " + why;
}

void ExpertFiles::read(int l, int e, uint8_t* dst) {
  const PackRecord& r = layers_[size_t(l)].records[size_t(e)];
  try {
    check_fault(l, e);
  } catch (const std::exception& ex) {
    fail(describe_failure(l, e, ex.what()));
  }
  std::shared_ptr<const int> f;
  try {
    f = fd(l);
  } catch (const Error& ex) {
    fail(describe_failure(l, e, ex.what()));
  }
  uint64_t done = 0;
  while (done < r.size) {
    const ssize_t n = ::pread(*f, dst + done, r.size - done, off_t(r.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::string("read failed: ") + std::strerror(errno)
                                    : "file ends after " + std::to_string(r.offset + done) +
                                          " bytes (truncated?)";
      invalidate(l);
      fail(describe_failure(l, e, why));
    }
    done += uint64_t(n);
    if (direct_ && done < r.size) {  // O_DIRECT stops short only at the end of the file
      invalidate(l);
      fail(describe_failure(l, e, "file ends after " + std::to_string(r.offset + done) + " bytes (truncated?)"));
    }
  }
}

}  // namespace moeflux
