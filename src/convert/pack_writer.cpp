// Pack file writing (see pack_writer.h).
#include "convert/pack_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/mmap_file.h"

namespace moeflux {

namespace {

constexpr PackChecksum kChecksum = PackChecksum::Crc32c;  // what version kPackVersion records

int create_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, ": cannot create: ", std::strerror(errno));
  return fd;
}

void write_all(int fd, const uint8_t* p, uint64_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1ull << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(what, ": write failed: ", std::strerror(errno));
    p += w, n -= uint64_t(w);
  }
}

void close_file(int& fd, const std::string& what) {
  if (fd >= 0 && ::close(fd) != 0) {
    fd = -1;
    fail(what, ": close failed: ", std::strerror(errno));
  }
  fd = -1;
}


}  // namespace

PackWriter::PackWriter(const std::string& dir) : dir_(dir) {
  dense_fd_ = create_file(dir_ + "/dense.bin");
}

PackWriter::~PackWriter() {
  if (dense_fd_ >= 0) ::close(dense_fd_);
  if (layer_fd_ >= 0) ::close(layer_fd_);
}

void PackWriter::add_dense(const std::string& name, const OutPart& t, bool drop_source) {
  static const uint8_t zeros[kDenseAlign] = {};
  const uint64_t off = align_up(dense_size_, kDenseAlign);
  write_all(dense_fd_, zeros, off - dense_size_, dir_ + "/dense.bin");
  uint32_t crc = 0;
  constexpr uint64_t kChunk = 64ull << 20;  // bounds the source pages resident at once
  for (uint64_t i = 0; i < t.nbytes; i += kChunk) {
    const uint64_t n = std::min(kChunk, t.nbytes - i);
    crc = checksum_update(kChecksum, crc, t.data + i, n);
    write_all(dense_fd_, t.data + i, n, dir_ + "/dense.bin");
    if (drop_source) drop_mapped_pages(t.data + i, n);
  }
  PackTensor p;
  p.name = name;
  p.dtype = t.dtype;
  p.shape = t.shape;
  p.offset = off;
  p.nbytes = t.nbytes;
  p.crc32 = crc;
  p.quant = t.quant;
  dense_.push_back(std::move(p));
  dense_size_ = off + t.nbytes;
}

void PackWriter::close_layer() {
  if (layer_fd_ >= 0) close_file(layer_fd_, layers_.back().file);
}

void PackWriter::add_record(int64_t layer, const std::string& prefix, size_t expert,
                            const std::vector<RecordPart>& parts) {
  if (layers_.empty() || layers_.back().layer != layer) {
    close_layer();
    ExpertLayer l;
    l.layer = layer;
    l.prefix = prefix;
    char file[64];
    std::snprintf(file, sizeof file, "experts/layer_%03lld.bin", static_cast<long long>(layer));
    l.file = file;
    layers_.push_back(std::move(l));
    layer_fd_ = create_file(dir_ + "/" + layers_.back().file);
  }
  ExpertLayer& l = layers_.back();
  MF_ASSERT(l.prefix == prefix && l.records.size() == expert);
  std::vector<PackTensor> layout;
  uint64_t end = 0;
  int bits = 0;
  for (const auto& rp : parts) {
    PackTensor t;
    t.name = rp.name;
    t.dtype = rp.part->dtype;
    t.shape = rp.part->shape;
    t.offset = align_up(end, kDenseAlign);
    t.nbytes = rp.part->nbytes;
    t.quant = rp.part->quant;
    end = t.offset + t.nbytes;
    if (rp.part->suffix == ".weight") {
      const int b = t.quant ? (t.quant->format == PackQuant::Format::Affine ? t.quant->bits : 8)
                            : int(dtype_size(t.dtype) * 8);
      bits = std::max(bits, b);
    }
    layout.push_back(std::move(t));
  }
  PackRecord r;
  r.offset = l.size;
  r.size = align_up(std::max<uint64_t>(end, 1), kRecordAlign);
  r.bits = bits;
  record_.assign(r.size, 0);
  for (size_t i = 0; i < parts.size(); ++i)
    std::memcpy(record_.data() + layout[i].offset, parts[i].part->data, layout[i].nbytes);
  r.crc32 = checksum_of(kChecksum, record_.data(), r.size);
  auto it = std::find(l.layouts.begin(), l.layouts.end(), layout);
  r.layout = uint32_t(it - l.layouts.begin());
  if (it == l.layouts.end()) l.layouts.push_back(std::move(layout));
  write_all(layer_fd_, record_.data(), r.size, l.file);
  l.size += r.size;
  l.records.push_back(r);
}

void PackWriter::finish(PackManifest m) {
  close_layer();
  close_file(dense_fd_, dir_ + "/dense.bin");
  m.version = kPackVersion;
  m.checksum = kChecksum;
  m.dense_file = "dense.bin";
  m.dense_size = dense_size_;
  m.dense = std::move(dense_);
  m.experts = std::move(layers_);
  const std::string text = pack_manifest_to_json(m);
  // Self-check: what we wrote must parse (catches writer bugs before the rename).
  parse_pack_manifest(text, dir_ + "/manifest.json");
  int fd = create_file(dir_ + "/manifest.json");
  write_all(fd, reinterpret_cast<const uint8_t*>(text.data()), text.size(), dir_ + "/manifest.json");
  close_file(fd, dir_ + "/manifest.json");
}

}  // namespace moeflux
