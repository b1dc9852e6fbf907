// ExpertCache: the host tier of expert streaming. Expert records of a pack are read on demand
// into page-aligned buffers held under a byte budget; the reads of one request run in
// parallel (reader threads with pread, or one io_uring thread), demand reads ahead of
// prefetches. A Ref pins an entry while the engine computes with it; unpinned entries are
// evicted by LRU or by frequency (LFU with the LRU order breaking ties); entries pinned from
// a routing profile are never evicted. The budget is exceeded only when a demand request
// needs more than the unpinned entries free (its pins), and trimmed back when they are released.
// Failed reads (I/O error, truncation, checksum mismatch unless !verify) make Ref::wait raise an
// Error naming layer and expert; the entry is dropped, so a later request reads it again.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/expert_source.h"
#include "stream/expert_files.h"
#include "stream/slot_pool.h"

namespace moeflux {

enum class IoMode : uint8_t { Buffered, Direct };
enum class IoEngine : uint8_t { Pread, Uring };
enum class CachePolicy : uint8_t { Lru, Lfu };

struct ExpertCacheOptions {
  uint64_t budget_bytes = 0;  // host bytes for expert records
  CachePolicy policy = CachePolicy::Lru;
  IoMode io = IoMode::Buffered;
  IoEngine engine = IoEngine::Pread;
  int io_threads = 8;    // pread: demand reader threads (plus half as many low-priority
                         // prefetch readers); uring: queue depth
  bool verify = true;    // the checksum of every record read, checked before use
  PackChecksum checksum = PackChecksum::Crc32c;  // the pack's (PackManifest::checksum)
  bool prefetch = true;  // the engine predicts and prefetches the next layer's experts
};

struct ExpertCacheStats {
  uint64_t lookups = 0;        // experts requested by the engine (demand)
  uint64_t hits = 0;           // ... already in memory
  uint64_t inflight_hits = 0;  // ... being read already (by a prefetch)
  uint64_t misses = 0;         // ... read on demand
  uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_dropped = 0;  // dropped: no room
  uint64_t predicted = 0, predicted_needed = 0, needed = 0;  // prediction precision / recall
  uint64_t reads = 0, bytes_read = 0, evictions = 0, failures = 0;
  uint64_t transformed = 0;  // records rewritten by the record transform after their read
  double io_busy_s = 0;  // wall time with at least one read in flight
  double stall_s = 0;    // engine time spent waiting for experts
  uint64_t resident_bytes = 0, peak_bytes = 0, budget_bytes = 0;

  double hit_rate() const { return lookups ? double(hits) / double(lookups) : 0.0; }
  double io_gbs() const { return io_busy_s > 0 ? double(bytes_read) / io_busy_s / 1e9 : 0.0; }
  double precision() const { return predicted ? double(predicted_needed) / double(predicted) : 0.0; }
  double recall() const { return needed ? double(predicted_needed) / double(needed) : 0.0; }
};

// One read for an I/O engine; `token` identifies the entry to finish().
struct ReadJob {
  int layer = 0, expert = 0;
  uint8_t* dst = nullptr;
  uint64_t offset = 0, size = 0;
  void* token = nullptr;
};

// An I/O engine running on its own thread(s); destroying it waits for its reads to end.
struct IoWorker {
  virtual ~IoWorker() = default;
};

class ExpertCache;
// The io_uring engine (one thread, `depth` reads in flight). Error when this build lacks
// liburing or the kernel refuses io_uring.
std::unique_ptr<IoWorker> start_uring_worker(ExpertCache& cache, int depth);

class ExpertCache final : public ExpertSource {
  struct Entry;

 public:
  ExpertCache(const std::string& dir, const std::vector<ExpertLayer>& layers, ExpertCacheOptions opt);
  ~ExpertCache() override;
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // A pinned entry. wait() returns the record's bytes once read, or raises the read's Error.
  class Ref {
   public:
    Ref() = default;
    Ref(ExpertCache* c, std::shared_ptr<Entry> e) : cache_(c), e_(std::move(e)) {}
    Ref(Ref&& o) noexcept = default;
    Ref& operator=(Ref&& o) noexcept;
    ~Ref() { release(); }
    bool ready() const;
    const uint8_t* wait();
    void release();

   private:
    ExpertCache* cache_ = nullptr;
    std::shared_ptr<Entry> e_;
  };

  // Pins the given experts of layer index `layer` (index into the manifest's expert layers)
  // and starts reading those not in memory, all in parallel, ahead of queued prefetches.
  std::vector<Ref> fetch(int layer, std::span<const int32_t> experts);
  // fetch as the MoE op sees it (ExpertSource).
  std::vector<ExpertRef> acquire(int layer, std::span<const int32_t> experts) override;
  // Starts reading experts likely needed soon, into free or evictable room only.
  void prefetch(int layer, std::span<const int32_t> experts) override;
  bool wants_prefetch() const override { return opt_.prefetch; }
  // Keeps these experts resident for good (loaded in the background), as far as `bytes` allows.
  void pin_permanently(const std::vector<std::pair<int, int>>& experts, uint64_t bytes);
  // How many experts of `layer` one request should pin at once: the budget's worth, >= 1.
  size_t window(int layer) const override { return window_[size_t(layer)]; }

  const ExpertCacheOptions& options() const { return opt_; }
  size_t n_layers() const { return files_.n_layers(); }
  const ExpertLayer& layer(int l) const { return files_.layer(l); }
  const std::vector<ExpertLayer>& layers() const { return files_.layers(); }
  uint64_t total_bytes() const override { return total_bytes_; }  // all records of the pack
  bool holds_all() const override { return opt_.budget_bytes >= total_bytes_; }
  uint64_t pin_host_memory(std::shared_ptr<HostPinner> p) override { return pool_->set_pinner(std::move(p)); }
  ExpertCacheStats stats() const;
  void reset_stats();
  // Demand accesses per layer and expert since the cache was made (a routing profile).
  std::vector<std::vector<uint64_t>> access_counts() const;
  void set_fault_hook(ExpertFiles::FaultHook h) { files_.set_fault_hook(std::move(h)); }
  // Rewrites each record in its buffer once it is read (and verified), on the reader's thread,
  // before anyone can use it: the engine's own layout for experts (streaming.cpp: the
  // group-lane codes). Set before the first fetch; an exception it throws fails the read.
  using RecordTransform = std::function<void(int layer, int expert, uint8_t* data)>;
  void set_record_transform(RecordTransform t) { transform_ = std::move(t); }
  bool transforms_records() const { return bool(transform_); }

  // For the I/O engines: next job (false when stopping, or none and !block), and its end
  // (error empty on success; verification runs here). `which`: the queues a worker serves.
  enum class Queues : uint8_t { Any, Demand, Prefetch };
  bool take_job(ReadJob* job, bool block, Queues which = Queues::Any);
  void finish_job(const ReadJob& job, std::string error);
  ExpertFiles& files() { return files_; }

 private:
  uint64_t key(int l, int e) const { return (uint64_t(l) << 32) | uint32_t(e); }
  std::shared_ptr<Entry> create(int l, int e, uint8_t* buf);
  uint8_t* make_room(uint64_t size, bool over_budget);
  void make_evictable(Entry& e);
  void unevict(Entry& e);
  void unpin(const std::shared_ptr<Entry>& e);
  void evict_to(uint64_t limit);  // evicts unpinned entries (policy order) until used_ <= limit
  void reader_loop(Queues which);
  void stop_workers();

  ExpertFiles files_;
  ExpertCacheOptions opt_;
  std::shared_ptr<SlotPool> pool_;  // record buffers; entries give theirs back when they die
  std::vector<size_t> window_;
  uint64_t total_bytes_ = 0;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_, job_cv_;
  bool stop_ = false;
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> map_;
  std::map<std::pair<uint64_t, uint64_t>, Entry*> evictable_;  // (priority, tick) -> entry
  uint64_t evictable_bytes_ = 0, used_ = 0, tick_ = 0;
  std::deque<std::shared_ptr<Entry>> demand_q_, prefetch_q_;
  std::vector<std::vector<uint64_t>> counts_;
  std::vector<std::vector<int32_t>> predicted_;
  int inflight_ = 0;
  std::chrono::steady_clock::time_point busy_since_;
  ExpertCacheStats st_;
  std::vector<std::thread> readers_;
  std::unique_ptr<IoWorker> uring_;
  RecordTransform transform_;
};

std::string_view io_mode_name(IoMode m);
std::string_view io_engine_name(IoEngine e);
std::string_view cache_policy_name(CachePolicy p);
// True when this build has the io_uring engine (liburing).
bool uring_available();

}  // namespace moeflux
