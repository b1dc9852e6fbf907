// ExpertCache on hand-made layer files: bytes delivered for every I/O path, LRU and LFU
// eviction, prefetch accounting, budgets, permanent pins, checksums, the fault hook, the
// record transform, the budget syntax and routing profiles.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "stream/expert_cache.h"
#include "stream/routing_profile.h"
#include "stream/streaming.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

constexpr uint64_t kRec = 8192;  // bytes per record

uint8_t pattern(int layer, int e, size_t i) { return uint8_t((layer * 31 + e * 7 + i * 13 + i / 4096) % 251); }

// Two layers of `n` records of kRec bytes in dir/experts/.
struct Files {
  test::TempDir dir{test::scratch_dir()};
  std::vector<ExpertLayer> layers;
  explicit Files(int n = 6, PackChecksum kind = PackChecksum::Crc32c) {
    std::filesystem::create_directories(dir.file("experts"));
    for (int l = 0; l < 2; ++l) {
      ExpertLayer el;
      el.layer = l;
      el.prefix = "model.layers." + std::to_string(l) + ".mlp";
      el.file = "experts/layer_00" + std::to_string(l) + ".bin";
      std::string bytes;
      for (int e = 0; e < n; ++e) {
        std::string r(kRec, '\0');
        for (size_t i = 0; i < kRec; ++i) r[i] = char(pattern(l, e, i));
        PackRecord rec;
        rec.offset = bytes.size();
        rec.size = kRec;
        rec.crc32 = checksum_of(kind, reinterpret_cast<const uint8_t*>(r.data()), r.size());
        el.records.push_back(rec);
        bytes += r;
      }
      el.size = bytes.size();
      std::ofstream(dir.file(el.file), std::ios::binary) << bytes;
      layers.push_back(el);
    }
  }
};

bool holds_pattern(const uint8_t* p, int l, int e) {
  for (size_t i = 0; i < kRec; ++i)
    if (p[i] != pattern(l, e, i)) return false;
  return true;
}

ExpertCacheOptions opts(uint64_t records, CachePolicy pol = CachePolicy::Lru) {
  ExpertCacheOptions o;
  o.budget_bytes = records * kRec;
  o.policy = pol;
  o.io_threads = 3;
  return o;
}

// fn(cache) with a 4-record cache over f for each reader engine this build has.
template <typename F>
void for_each_engine(const Files& f, F&& fn) {
  for (IoEngine en : {IoEngine::Pread, IoEngine::Uring}) {
    if (en == IoEngine::Uring && !uring_available()) continue;
    SCOPED_TRACE(std::string(io_engine_name(en)));
    ExpertCacheOptions o = opts(4);
    o.engine = en;
    ExpertCache c(f.dir.path(), f.layers, o);
    fn(c);
  }
}

// Fetches one expert, waits, releases; true when its bytes are right.
bool touch(ExpertCache& c, int l, int e) {
  const int32_t id = e;
  auto refs = c.fetch(l, std::span<const int32_t>(&id, 1));
  return holds_pattern(refs[0].wait(), l, e);
}

TEST(ExpertCache, DeliversRecordBytesOnEveryIoPath) {
  Files f;
  for (IoMode io : {IoMode::Buffered, IoMode::Direct})
    for (IoEngine en : {IoEngine::Pread, IoEngine::Uring}) {
      if (en == IoEngine::Uring && !uring_available()) continue;
      SCOPED_TRACE(std::string(io_mode_name(io)) + "/" + std::string(io_engine_name(en)));
      ExpertCacheOptions o = opts(4);
      o.io = io;
      o.engine = en;
      ExpertCache c(f.dir.path(), f.layers, o);
      const std::vector<int32_t> ids{5, 0, 3};
      auto refs = c.fetch(1, ids);
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(holds_pattern(refs[i].wait(), 1, ids[i]));
      const auto st = c.stats();
      EXPECT_EQ(st.misses, 3u);
      EXPECT_EQ(st.bytes_read, 3 * kRec);
      EXPECT_GT(st.io_busy_s, 0.0);
    }
}

// holds_all: a budget of every record (2 layers of 6) and not one less.
TEST(ExpertCache, HoldsAllOnlyWithRoomForEveryRecord) {
  Files f;
  const uint64_t all = 2 * 6;
  EXPECT_TRUE(ExpertCache(f.dir.path(), f.layers, opts(all)).holds_all());
  EXPECT_FALSE(ExpertCache(f.dir.path(), f.layers, opts(all - 1)).holds_all());
}

TEST(ExpertCache, LruEvictsTheLeastRecentlyUsed) {
  Files f;
  ExpertCache c(f.dir.path(), f.layers, opts(2));
  EXPECT_TRUE(touch(c, 0, 0));
  EXPECT_TRUE(touch(c, 0, 1));
  EXPECT_TRUE(touch(c, 0, 0));  // hit; 1 is now the oldest
  EXPECT_TRUE(touch(c, 0, 2));  // evicts 1
  auto st = c.stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.evictions, 1u);
  EXPECT_TRUE(touch(c, 0, 0));  // still there
  EXPECT_EQ(c.stats().hits, 2u);
  EXPECT_TRUE(touch(c, 0, 1));  // was evicted
  EXPECT_EQ(c.stats().misses, 4u);
  EXPECT_LE(c.stats().peak_bytes, 2 * kRec);
}

TEST(ExpertCache, LfuKeepsTheFrequentlyUsed) {
  Files f;
  ExpertCache c(f.dir.path(), f.layers, opts(2, CachePolicy::Lfu));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(touch(c, 0, 0));  // expert 0 used 3 times
  EXPECT_TRUE(touch(c, 0, 1));                              // used once, most recent
  EXPECT_TRUE(touch(c, 0, 2));                              // LFU evicts 1 (LRU would evict 0)
  const uint64_t misses = c.stats().misses;
  EXPECT_TRUE(touch(c, 0, 0));
  EXPECT_EQ(c.stats().misses, misses);  // hit
  EXPECT_TRUE(touch(c, 0, 1));
  EXPECT_EQ(c.stats().misses, misses + 1);
}

TEST(ExpertCache, PinnedEntriesOverflowTheBudgetOnlyWhileInUse) {
  Files f;
  ExpertCache c(f.dir.path(), f.layers, opts(1));
  EXPECT_EQ(c.window(0), 1u);
  {
    const std::vector<int32_t> ids{0, 1, 2};  // three pinned at once with room for one
    auto refs = c.fetch(0, ids);
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(holds_pattern(refs[i].wait(), 0, ids[i]));
    EXPECT_EQ(c.stats().resident_bytes, 3 * kRec);
  }
  EXPECT_EQ(c.stats().resident_bytes, kRec);  // trimmed back on release
}

TEST(ExpertCache, PrefetchIsCountedAndNeverExceedsTheBudget) {
  Files f;
  ExpertCache c(f.dir.path(), f.layers, opts(3));
  const std::vector<int32_t> pred{1, 4};
  c.prefetch(1, pred);
  const std::vector<int32_t> need{4, 5};
  {
    auto refs = c.fetch(1, need);
    EXPECT_TRUE(holds_pattern(refs[0].wait(), 1, 4));
    EXPECT_TRUE(holds_pattern(refs[1].wait(), 1, 5));
  }
  auto st = c.stats();
  EXPECT_EQ(st.prefetch_issued, 2u);
  EXPECT_EQ(st.prefetch_used, 1u);
  EXPECT_EQ(st.predicted, 2u);
  EXPECT_EQ(st.predicted_needed, 1u);
  EXPECT_DOUBLE_EQ(st.precision(), 0.5);
  EXPECT_DOUBLE_EQ(st.recall(), 0.5);
  EXPECT_EQ(st.hits + st.inflight_hits, 1u);
  EXPECT_TRUE(touch(c, 1, 1));  // the other prefetched one, so that every entry is read
  // All three slots pinned: a prefetch finds no room and is dropped.
  const std::vector<int32_t> three{0, 2, 3};
  auto refs = c.fetch(0, three);
  for (auto& r : refs) r.wait();
  const std::vector<int32_t> more{5};
  c.prefetch(0, more);
  EXPECT_EQ(c.stats().prefetch_dropped, 1u);
  EXPECT_LE(c.stats().peak_bytes, 3 * kRec);
}

TEST(ExpertCache, PermanentPinsAreNeverEvicted) {
  Files f;
  ExpertCache c(f.dir.path(), f.layers, opts(2));
  c.pin_permanently({{1, 3}, {1, 2}}, kRec);  // room for one: only (1, 3)
  EXPECT_TRUE(touch(c, 1, 3));
  for (int e = 0; e < 6; ++e) EXPECT_TRUE(touch(c, 0, e));
  const uint64_t misses = c.stats().misses;
  EXPECT_TRUE(touch(c, 1, 3));
  EXPECT_EQ(c.stats().misses, misses);
  EXPECT_TRUE(touch(c, 1, 2));
  EXPECT_EQ(c.stats().misses, misses + 1);
}

void put_byte(const std::string& file, uint64_t at, uint8_t v) {
  std::fstream s(file, std::ios::binary | std::ios::in | std::ios::out);
  s.seekp(std::streamoff(at));
  s.put(char(v));
}

// Records are checked by default, with the checksum kind of the pack's version; a damaged
// record fails its request and is not kept, so once the file is repaired it reads fine.
TEST(ExpertCache, VerifyDetectsACorruptedRecord) {
  for (PackChecksum kind : {PackChecksum::Crc32c, PackChecksum::Crc32}) {
    SCOPED_TRACE(checksum_name(kind));
    Files f(6, kind);
    const std::string file = f.dir.file(f.layers[0].file);
    put_byte(file, 2 * kRec + 100, pattern(0, 2, 100) ^ 0x55);
    ExpertCacheOptions o = opts(4);
    o.checksum = kind;
    ASSERT_TRUE(o.verify);  // the default
    ExpertCache c(f.dir.path(), f.layers, o);
    try {
      touch(c, 0, 2);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer 0 expert 2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("checksum mismatch (") + checksum_name(kind) + " "),
                std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(touch(c, 0, 1));  // other records are fine
    put_byte(file, 2 * kRec + 100, pattern(0, 2, 100));
    EXPECT_TRUE(touch(c, 0, 2));  // the failed read was not cached
    put_byte(file, 2 * kRec + 100, pattern(0, 2, 100) ^ 0x55);
    o.verify = false;
    ExpertCache unverified(f.dir.path(), f.layers, o);
    EXPECT_FALSE(touch(unverified, 0, 2));  // wrong bytes, no check
  }
}

TEST(ExpertCache, FaultHookFailsThatReadAndTheNextRequestRetries) {
  Files f;
  for_each_engine(f, [](ExpertCache& c) {
    c.set_fault_hook([](int l, int e) {
      if (l == 1 && e == 4) throw std::runtime_error("injected I/O error");
    });
    try {
      touch(c, 1, 4);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer 1 expert 4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("injected I/O error"), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.stats().failures, 1u);
    c.set_fault_hook(nullptr);
    EXPECT_TRUE(touch(c, 1, 4));
  });
}

// The record transform runs once per read, on the read's own bytes, before the entry can be
// used (a hit sees the rewritten bytes, not a second rewrite); one that throws fails that read
// with its message, named by layer and expert, and the next request reads it again.
TEST(ExpertCache, RecordTransformRewritesEachReadOnceAndItsErrorsFailTheRead) {
  Files f;
  for_each_engine(f, [](ExpertCache& c) {
    bool fail_next = false;
    c.set_record_transform([&](int l, int e, uint8_t* data) {
      if (fail_next) throw std::runtime_error("bad layout");
      for (size_t i = 0; i < kRec; ++i) data[i] = uint8_t(data[i] ^ uint8_t(l + e + 1));
    });
    auto rewritten = [](const uint8_t* p, int l, int e) {
      for (size_t i = 0; i < kRec; ++i)
        if (p[i] != uint8_t(pattern(l, e, i) ^ uint8_t(l + e + 1))) return false;
      return true;
    };
    const std::vector<int32_t> ids{2, 5};
    for (int pass = 0; pass < 2; ++pass) {  // the second pass hits
      auto refs = c.fetch(0, ids);
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(rewritten(refs[i].wait(), 0, ids[i])) << pass;
    }
    EXPECT_EQ(c.stats().transformed, 2u);
    EXPECT_EQ(c.stats().hits, 2u);
    fail_next = true;
    const int32_t id = 3;
    try {
      c.fetch(1, std::span<const int32_t>(&id, 1))[0].wait();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer 1 expert 3"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad layout"), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.stats().failures, 1u);
    fail_next = false;
    auto again = c.fetch(1, std::span<const int32_t>(&id, 1));
    EXPECT_TRUE(rewritten(again[0].wait(), 1, 3));
    EXPECT_EQ(c.stats().transformed, 3u);
  });
}

TEST(ExpertCache, TruncatedFileFailsAndWorksOnceRestored) {
  Files f;
  for (IoMode io : {IoMode::Buffered, IoMode::Direct}) {
    ExpertCacheOptions o = opts(1);
    o.io = io;
    ExpertCache c(f.dir.path(), f.layers, o);
    EXPECT_TRUE(touch(c, 0, 5));
    const std::string path = f.dir.file(f.layers[0].file);
    const std::string saved = [&] {
      std::ifstream s(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(s), {});
    }();
    std::filesystem::resize_file(path, 4 * kRec + 100);
    try {
      touch(c, 0, 4);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer 0 expert 4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << saved;
    EXPECT_TRUE(touch(c, 0, 4));
  }
}

TEST(CacheBudget, Syntax) {
  EXPECT_EQ(parse_cache_budget("8G", 1), 8ull << 30);
  EXPECT_EQ(parse_cache_budget("512M", 1), 512ull << 20);
  EXPECT_EQ(parse_cache_budget("512MiB", 1), 512ull << 20);
  EXPECT_EQ(parse_cache_budget("1.5g", 1), 3ull << 29);
  EXPECT_EQ(parse_cache_budget("4096", 1), 4096u);
  EXPECT_EQ(parse_cache_budget("30%", 1000), 300u);
  EXPECT_EQ(parse_cache_budget("100%", 1000), 1000u);
  EXPECT_LE(parse_cache_budget("auto", 1000), 1000u);
  EXPECT_GT(parse_cache_budget("auto", 1000), 0u);
  for (const char* bad : {"", "abc", "12X", "150%", "-1", "1..2G", "G", "%"})
    EXPECT_THROW(parse_cache_budget(bad, 1000), Error) << bad;
}

TEST(RoutingProfile, RoundTripAndRanking) {
  Files f(4);
  PackManifest m;
  m.experts = f.layers;
  const std::vector<std::vector<uint64_t>> counts{{0, 5, 1, 0}, {9, 0, 0, 2}};
  const std::string text = routing_profile_to_json(f.layers, counts);
  const RoutingProfile p = parse_routing_profile(text, "p.json");
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[1].second, counts[1]);
  const auto top = most_used_experts(p, m);
  const std::vector<std::pair<int, int>> want{{1, 0}, {0, 1}, {1, 3}, {0, 2}};
  EXPECT_EQ(top, want);
}

TEST(RoutingProfile, BadInputNamesTheProblem) {
  Files f(4);
  PackManifest m;
  m.experts = f.layers;
  auto msg = [&](const std::string& text) {
    try {
      most_used_experts(parse_routing_profile(text, "p.json"), m);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("{").find("invalid JSON"), std::string::npos);
  EXPECT_NE(msg("[]").find("not a routing profile"), std::string::npos);
  // Found by fuzz_routing_profile: "format" given twice, the last one an array.
  EXPECT_NE(msg(R"({"format":"moeflux-routing-profile","version":1,"format":[1]})").find("not a routing profile"),
            std::string::npos);
  EXPECT_NE(msg(R"({"format":"moeflux-routing-profile","version":2,"layers":[]})").find("version"), std::string::npos);
  EXPECT_NE(msg(R"({"format":"moeflux-routing-profile","version":1,"layers":[{"prefix":"x","counts":[1]}]})")
                .find("no MoE layer 'x'"),
            std::string::npos);
  EXPECT_NE(msg(R"({"format":"moeflux-routing-profile","version":1,"layers":[{"prefix":"model.layers.0.mlp","counts":[1]}]})")
                .find("has 1 counts"),
            std::string::npos);
  EXPECT_NE(msg(R"({"format":"moeflux-routing-profile","version":1,"layers":[{"prefix":"model.layers.0.mlp","counts":[1,-1,0,0]}]})")
                .find("non-negative"),
            std::string::npos);
}

}  // namespace
}  // namespace moeflux
