// The host expert cache: entries, budget and eviction, pins, the pread reader threads,
// statistics. See expert_cache.h.
#include "stream/expert_cache.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace moeflux {

using Clock = std::chrono::steady_clock;

struct ExpertCache::Entry {
  enum class St : uint8_t { Queued, Reading, Ready, Failed };
  int layer = 0, expert = 0;
  uint64_t size = 0;
  uint8_t* buf = nullptr;
  std::shared_ptr<SlotPool> pool;
  std::atomic<St> st{St::Queued};
  int pins = 0;
  bool permanent = false, prefetched = false, used = false, demand = false, in_map = true;
  std::string error;
  std::pair<uint64_t, uint64_t> evict_key{0, 0};
  bool evictable = false;
  ~Entry() {
    if (buf) pool->put(buf, size);
  }
};

std::string_view io_mode_name(IoMode m) { return m == IoMode::Direct ? "direct" : "buffered"; }
std::string_view io_engine_name(IoEngine e) { return e == IoEngine::Uring ? "io_uring" : "pread"; }
std::string_view cache_policy_name(CachePolicy p) { return p == CachePolicy::Lfu ? "lfu" : "lru"; }

ExpertCache::ExpertCache(const std::string& dir, const std::vector<ExpertLayer>& layers, ExpertCacheOptions opt)
    : files_(dir, layers, opt.io == IoMode::Direct), opt_(opt), pool_(std::make_shared<SlotPool>(opt.budget_bytes)) {
  if (opt_.io_threads < 1) fail("expert reader threads must be at least 1, got ", opt_.io_threads);
  for (const auto& l : layers) {
    uint64_t biggest = 1;
    for (const auto& r : l.records) biggest = std::max(biggest, r.size), total_bytes_ += r.size;
    window_.push_back(size_t(std::max<uint64_t>(1, opt_.budget_bytes / biggest)));
    counts_.emplace_back(l.records.size(), 0);
  }
  predicted_.resize(layers.size());
  st_.budget_bytes = opt_.budget_bytes;
  if (opt_.engine == IoEngine::Uring) {
    uring_ = start_uring_worker(*this, opt_.io_threads);
  } else {
    // Demand reads at normal priority; prefetches on their own threads at the lowest
    // priority, so that (page-cache) copies for guesses never take a core from the compute
    // threads, while a demand read never waits behind a prefetch.
    for (int i = 0; i < opt_.io_threads; ++i) readers_.emplace_back([this] { reader_loop(Queues::Demand); });
    for (int i = 0; i < std::max(1, opt_.io_threads / 2); ++i)
      readers_.emplace_back([this] { reader_loop(Queues::Prefetch); });
  }
}

ExpertCache::~ExpertCache() { stop_workers(); }

void ExpertCache::stop_workers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  job_cv_.notify_all();
  for (auto& t : readers_) t.join();
  readers_.clear();
  uring_.reset();
}

// ---- Refs -----------------------------------------------------------------------------------

ExpertCache::Ref& ExpertCache::Ref::operator=(Ref&& o) noexcept {
  if (this != &o) {
    release();
    cache_ = o.cache_;
    e_ = std::move(o.e_);
    o.cache_ = nullptr;
  }
  return *this;
}

bool ExpertCache::Ref::ready() const { return e_ && e_->st.load() == Entry::St::Ready; }

const uint8_t* ExpertCache::Ref::wait() {
  MF_ASSERT(e_);
  if (e_->st.load() != Entry::St::Ready) {
    const auto t0 = Clock::now();
    std::unique_lock lock(cache_->mu_);
    cache_->ready_cv_.wait(lock, [&] {
      const auto s = e_->st.load();
      return s == Entry::St::Ready || s == Entry::St::Failed;
    });
    cache_->st_.stall_s += std::chrono::duration<double>(Clock::now() - t0).count();
    if (e_->st.load() == Entry::St::Failed) fail(e_->error);
  }
  return e_->buf;
}

void ExpertCache::Ref::release() {
  if (cache_ && e_) cache_->unpin(e_);
  e_.reset();
  cache_ = nullptr;
}

// ---- Entries and the budget -----------------------------------------------------------------

void ExpertCache::make_evictable(Entry& e) {
  if (e.evictable || e.permanent || e.pins > 0 || e.st.load() != Entry::St::Ready || !e.in_map) return;
  const uint64_t prio = opt_.policy == CachePolicy::Lfu ? counts_[size_t(e.layer)][size_t(e.expert)] : 0;
  e.evict_key = {prio, ++tick_};
  evictable_.emplace(e.evict_key, &e);
  evictable_bytes_ += e.size;
  e.evictable = true;
}

void ExpertCache::unevict(Entry& e) {
  if (!e.evictable) return;
  evictable_.erase(e.evict_key);
  evictable_bytes_ -= e.size;
  e.evictable = false;
}

uint8_t* ExpertCache::make_room(uint64_t size, bool over_budget) {
  const uint64_t budget = opt_.budget_bytes;
  if (!over_budget && used_ + size > budget + evictable_bytes_) return nullptr;
  evict_to(budget > size ? budget - size : 0);
  uint8_t* buf = pool_->get(size);
  used_ += size;
  st_.peak_bytes = std::max(st_.peak_bytes, used_);
  return buf;
}

std::shared_ptr<ExpertCache::Entry> ExpertCache::create(int l, int e, uint8_t* buf) {
  auto en = std::make_shared<Entry>();
  en->layer = l;
  en->expert = e;
  en->size = files_.layer(l).records[size_t(e)].size;
  en->buf = buf;
  en->pool = pool_;
  map_[key(l, e)] = en;
  return en;
}

void ExpertCache::evict_to(uint64_t limit) {
  while (used_ > limit && !evictable_.empty()) {
    Entry* v = evictable_.begin()->second;
    unevict(*v);
    used_ -= v->size;
    ++st_.evictions;
    v->in_map = false;
    map_.erase(key(v->layer, v->expert));  // v's buffer goes back to the pool
  }
}

void ExpertCache::unpin(const std::shared_ptr<Entry>& e) {
  std::lock_guard lock(mu_);
  MF_ASSERT(e->pins > 0);
  if (--e->pins == 0) make_evictable(*e);
  evict_to(opt_.budget_bytes);
}

// ---- Requests -------------------------------------------------------------------------------

namespace {
// A cache Ref as the MoE op's ExpertRef.
struct CacheRef final : ExpertRef::Impl {
  explicit CacheRef(ExpertCache::Ref r) : ref(std::move(r)) {}
  bool ready() const override { return ref.ready(); }
  const uint8_t* wait() override { return ref.wait(); }
  ExpertCache::Ref ref;
};
}  // namespace

std::vector<ExpertRef> ExpertCache::acquire(int layer, std::span<const int32_t> experts) {
  std::vector<ExpertRef> out;
  for (Ref& r : fetch(layer, experts)) out.emplace_back(std::make_unique<CacheRef>(std::move(r)));
  return out;
}

std::vector<ExpertCache::Ref> ExpertCache::fetch(int l, std::span<const int32_t> experts) {
  const auto& recs = files_.layer(l).records;
  std::vector<Ref> refs;
  refs.reserve(experts.size());
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    auto& pred = predicted_[size_t(l)];
    if (!pred.empty()) {
      st_.predicted += pred.size();
      st_.needed += experts.size();
      for (int32_t id : experts) st_.predicted_needed += size_t(std::count(pred.begin(), pred.end(), id));
      pred.clear();
    }
    for (int32_t id : experts) {
      MF_ASSERT(id >= 0 && size_t(id) < recs.size());
      ++st_.lookups;
      ++counts_[size_t(l)][size_t(id)];
      std::shared_ptr<Entry> en;
      auto it = map_.find(key(l, id));
      if (it != map_.end()) {
        en = it->second;
        if (en->st.load() == Entry::St::Ready) ++st_.hits;
        else ++st_.inflight_hits;
        if (en->prefetched && !en->used) ++st_.prefetch_used;
        if (en->st.load() == Entry::St::Queued && !en->demand) {  // jump the prefetch queue
          en->demand = true;
          demand_q_.push_back(en);
          queued = true;
        }
        unevict(*en);
      } else {
        ++st_.misses;
        en = create(l, id, make_room(recs[size_t(id)].size, true));
        en->demand = true;
        demand_q_.push_back(en);
        queued = true;
      }
      en->used = true;
      ++en->pins;
      refs.emplace_back(this, std::move(en));
    }
  }
  if (queued) job_cv_.notify_all();
  return refs;
}

void ExpertCache::prefetch(int l, std::span<const int32_t> experts) {
  const auto& recs = files_.layer(l).records;
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    predicted_[size_t(l)].assign(experts.begin(), experts.end());
    for (int32_t id : experts) {
      MF_ASSERT(id >= 0 && size_t(id) < recs.size());
      if (map_.count(key(l, id))) continue;
      uint8_t* buf = make_room(recs[size_t(id)].size, false);
      if (!buf) {
        ++st_.prefetch_dropped;
        continue;
      }
      auto en = create(l, id, buf);
      en->prefetched = true;
      prefetch_q_.push_back(std::move(en));
      ++st_.prefetch_issued;
      queued = true;
    }
  }
  if (queued) job_cv_.notify_all();
}

void ExpertCache::pin_permanently(const std::vector<std::pair<int, int>>& experts, uint64_t bytes) {
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    uint64_t taken = 0;
    for (auto [l, e] : experts) {
      MF_ASSERT(l >= 0 && size_t(l) < n_layers() && e >= 0 && size_t(e) < files_.layer(l).records.size());
      const uint64_t size = files_.layer(l).records[size_t(e)].size;
      if (taken + size > bytes) break;
      auto it = map_.find(key(l, e));
      if (it != map_.end()) {
        unevict(*it->second);
        it->second->permanent = true;
        taken += size;
        continue;
      }
      uint8_t* buf = make_room(size, false);
      if (!buf) break;
      auto en = create(l, e, buf);
      en->permanent = true;
      prefetch_q_.push_back(std::move(en));
      taken += size;
      queued = true;
    }
  }
  if (queued) job_cv_.notify_all();
}

// ---- I/O ------------------------------------------------------------------------------------

bool ExpertCache::take_job(ReadJob* job, bool block, Queues which) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stop_) return false;
    auto pop = [&](std::deque<std::shared_ptr<Entry>>& q) -> std::shared_ptr<Entry> {
      while (!q.empty()) {
        auto en = std::move(q.front());
        q.pop_front();
        if (en->st.load() == Entry::St::Queued && en->in_map) return en;
      }
      return nullptr;
    };
    std::shared_ptr<Entry> en;
    if (which != Queues::Prefetch) en = pop(demand_q_);
    if (!en && which != Queues::Demand) en = pop(prefetch_q_);
    if (en) {
      en->st = Entry::St::Reading;
      const PackRecord& r = files_.layer(en->layer).records[size_t(en->expert)];
      *job = ReadJob{en->layer, en->expert, en->buf, r.offset, r.size, en.get()};
      if (inflight_++ == 0) busy_since_ = Clock::now();
      return true;
    }
    if (!block) return false;
    job_cv_.wait(lock);
  }
}

void ExpertCache::finish_job(const ReadJob& job, std::string error) {
  if (error.empty() && opt_.verify) {
    const uint32_t want = files_.layer(job.layer).records[size_t(job.expert)].crc32;
    const uint32_t got = checksum_of(opt_.checksum, job.dst, job.size);
    if (got != want) {
      char buf[80];
      std::snprintf(buf, sizeof buf, "checksum mismatch (%s %08x, manifest %08x)", checksum_name(opt_.checksum), got,
                    want);
      error = files_.describe_failure(job.layer, job.expert, buf);
    }
  }
  bool transformed = false;
  if (error.empty() && transform_) {
    try {
      transform_(job.layer, job.expert, job.dst);
      transformed = true;
    } catch (const std::exception& ex) {
      error = files_.describe_failure(job.layer, job.expert, ex.what());
    }
  }
  {
    std::lock_guard lock(mu_);
    Entry& e = *static_cast<Entry*>(job.token);
    if (--inflight_ == 0) st_.io_busy_s += std::chrono::duration<double>(Clock::now() - busy_since_).count();
    ++st_.reads;
    if (error.empty()) {
      st_.bytes_read += job.size;
      st_.transformed += transformed ? 1 : 0;
      e.st = Entry::St::Ready;
      make_evictable(e);
    } else {
      ++st_.failures;
      e.error = std::move(error);
      e.st = Entry::St::Failed;
      used_ -= e.size;
      e.in_map = false;
      map_.erase(key(e.layer, e.expert));  // a later request reads it again
    }
    evict_to(opt_.budget_bytes);
  }
  ready_cv_.notify_all();
}

void ExpertCache::reader_loop(Queues which) {
  // Linux: a thread's nice value is per thread (best effort; raising it needs no privilege).
  if (which == Queues::Prefetch) ::setpriority(PRIO_PROCESS, id_t(::syscall(SYS_gettid)), 19);
  ReadJob job;
  while (take_job(&job, true, which)) {
    std::string error;
    try {
      files_.read(job.layer, job.expert, job.dst);
    } catch (const std::exception& e) {
      error = e.what();
    }
    finish_job(job, std::move(error));
  }
}

// ---- Statistics -----------------------------------------------------------------------------

ExpertCacheStats ExpertCache::stats() const {
  std::lock_guard lock(mu_);
  ExpertCacheStats s = st_;
  s.resident_bytes = used_;
  return s;
}

void ExpertCache::reset_stats() {
  std::lock_guard lock(mu_);
  st_ = ExpertCacheStats{};
  st_.budget_bytes = opt_.budget_bytes;
  st_.peak_bytes = used_;
  if (inflight_ > 0) busy_since_ = Clock::now();
}

std::vector<std::vector<uint64_t>> ExpertCache::access_counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace moeflux
