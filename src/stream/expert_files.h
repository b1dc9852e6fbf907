// ExpertFiles: the expert layer files of a pack opened for reading whole records with pread,
// through the page cache or with O_DIRECT. A read that fails (I/O error, short read of a
// truncated file) raises an Error naming the layer, expert, file and offset, and drops the
// descriptor so that the next read reopens the file: a file that is put back works again.
// A fault-injection hook lets tests make chosen reads fail.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "format/pack_manifest.h"

namespace moeflux {

class ExpertFiles {
 public:
  // `layers`: the manifest's expert layers; paths are relative to `dir`. direct: O_DIRECT
  // (every record offset and size must be a multiple of 4096, as packs guarantee).
  ExpertFiles(const std::string& dir, const std::vector<ExpertLayer>& layers, bool direct);
  ~ExpertFiles();
  ExpertFiles(const ExpertFiles&) = delete;
  ExpertFiles& operator=(const ExpertFiles&) = delete;

  const ExpertLayer& layer(int l) const { return layers_[size_t(l)]; }
  const std::vector<ExpertLayer>& layers() const { return layers_; }
  size_t n_layers() const { return layers_.size(); }
  bool direct() const { return direct_; }
  std::string path(int l) const;

  // A shared descriptor of layer l's file, opened on first use or after a failure.
  std::shared_ptr<const int> fd(int l);
  // Forgets layer l's descriptor (it is reopened on the next read).
  void invalidate(int l);

  // Reads record (l, e) into dst (record size bytes; 4096-aligned when direct).
  void read(int l, int e, uint8_t* dst);
  // Message for a failed read of record (l, e): "layer 3 expert 17 (file ..., offset ...): why".
  std::string describe_failure(int l, int e, const std::string& why) const;

  // Called before every read with (layer index, expert); a hook that throws makes that read
  // fail as an I/O error would. Tests only; not thread-safe against concurrent reads.
  using FaultHook = std::function<void(int l, int e)>;
  void set_fault_hook(FaultHook h) { hook_ = std::move(h); }
  void check_fault(int l, int e) const {
    if (hook_) hook_(l, e);
  }

 private:
  std::string dir_;
  std::vector<ExpertLayer> layers_;
  bool direct_;
  std::mutex mu_;
  std::vector<std::shared_ptr<const int>> fds_;
  FaultHook hook_;
};

}  // namespace moeflux
