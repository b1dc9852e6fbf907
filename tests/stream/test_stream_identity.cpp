// Expert streaming changes nothing: for every fixture architecture, logits (prefill and
// decode) and greedy continuations through the expert cache are bit-identical to reading the
// experts through the memory map, whatever the budget (one expert, a few, all), with and
// without prefetch, buffered and direct I/O, pread and io_uring readers. The cache keeps file
// order here (Repack::Off); test_repack.cpp checks slots rewritten into the group-lane layout.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_pool.h"
#include "core/thread_pool.h"
#include "format/pack_store.h"
#include "stream/expert_cache.h"
#include "stream/streaming.h"
#include "stream_test_util.h"

namespace moeflux {
namespace {

struct Config {
  std::string budget;  // "one", "few" or "all"
  bool prefetch;
  IoMode io;
  IoEngine engine;
};

std::string name_of(const Config& c) {
  return c.budget + (c.prefetch ? "_prefetch" : "_noprefetch") + "_" + std::string(io_mode_name(c.io)) + "_" +
         std::string(io_engine_name(c.engine));
}

std::vector<Config> configs() {
  std::vector<Config> v;
  std::vector<IoEngine> engines{IoEngine::Pread};
  if (uring_available()) engines.push_back(IoEngine::Uring);
  for (const char* b : {"one", "few", "all"})
    for (bool p : {true, false})
      for (IoMode io : {IoMode::Buffered, IoMode::Direct})
        for (IoEngine e : engines) v.push_back({b, p, io, e});
  return v;
}

uint64_t max_record(const PackManifest& m) {
  uint64_t r = 0;
  for (const auto& l : m.experts)
    for (const auto& rec : l.records) r = std::max(r, rec.size);
  return r;
}

class StreamIdentity : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamIdentity, BitIdenticalToMappedExperts) {
  const std::string pack = test::fixture_pack(GetParam());
  const auto golden = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  const auto ids = golden.i32.at("input_ids");
  auto mapped = load_model(pack);
  ASSERT_FALSE(expert_cache(*mapped));
  Session ref_s(*mapped);
  const test::RunResult ref = test::run_ids(ref_s, ids, 8);
  ASSERT_EQ(ref.greedy.size(), 8u);

  const PackManifest& man = dynamic_cast<const PackStore&>(*mapped->store).manifest();
  const uint64_t rec = max_record(man);
  for (const Config& c : configs()) {
    SCOPED_TRACE(name_of(c));
    StreamOptions o;
    o.budget = c.budget == "one" ? "1" : c.budget == "few" ? std::to_string(3 * rec) : "100%";
    o.cache.prefetch = c.prefetch;
    o.cache.io = c.io;
    o.cache.engine = c.engine;
    o.cache.io_threads = 4;
    auto m = load_model(pack, o, test::cpu_backend(Repack::Off));
    ASSERT_TRUE(expert_cache(*m));
    Session s(*m);
    const test::RunResult got = test::run_ids(s, ids, 8);
    EXPECT_EQ(test::first_difference(got.logits, ref.logits), -1);
    EXPECT_EQ(got.greedy, ref.greedy);
    const ExpertCacheStats st = expert_cache(*m)->stats();
    EXPECT_GT(st.lookups, 0u);
    EXPECT_EQ(st.failures, 0u);
    if (c.budget == "one") {
      EXPECT_LE(st.peak_bytes, rec);  // one demand read at a time, never a prefetch
      EXPECT_EQ(st.prefetch_issued, 0u);
    } else {
      EXPECT_LE(st.peak_bytes, expert_cache(*m)->options().budget_bytes);
    }
    if (c.budget == "all") {
      // Everything read once is kept: a second pass over the same tokens reads nothing.
      expert_cache(*m)->reset_stats();
      Session s2(*m);
      const test::RunResult again = test::run_ids(s2, ids, 8);
      EXPECT_EQ(test::first_difference(again.logits, ref.logits), -1);
      const ExpertCacheStats st2 = expert_cache(*m)->stats();
      EXPECT_EQ(st2.misses, 0u);
      EXPECT_EQ(st2.hits, st2.lookups);
    }
    if (c.prefetch && c.budget != "one") {
      EXPECT_GT(st.predicted, 0u);
    }
    if (!c.prefetch) {
      EXPECT_EQ(st.prefetch_issued, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamIdentity,
                         ::testing::Values("qwen3_moe/q4", "mixtral/q4", "qwen3_next/q4", "qwen3_5_moe_text/q4",
                                           "deepseek_v3/q4", "deepseek_v3/fp8", "qwen3_moe"),
                         [](const auto& info) { return test::fixture_name(info.param); });

// The long golden (160 tokens), one streaming configuration per architecture: still identical.
// Fixture f's ids (from golden_file) through the mapped pack and through an expert cache of
// `budget`, n greedy tokens each: the same bits. Returns the cached model, for its statistics.
std::unique_ptr<Model> expect_cache_matches_mapped(const char* f, const char* golden_file, const std::string& budget,
                                                   int n) {
  const std::string pack = test::fixture_pack(f);
  const auto ids = test::load_golden(test::fixture_dir(f) + "/" + golden_file).i32.at("input_ids");
  auto mapped = load_model(pack);
  Session a(*mapped);
  const test::RunResult ref = test::run_ids(a, ids, n);
  StreamOptions o;
  o.budget = budget;
  auto m = load_model(pack, o, test::cpu_backend(Repack::Off));
  EXPECT_TRUE(expert_cache(*m));
  Session b(*m);
  const test::RunResult got = test::run_ids(b, ids, n);
  EXPECT_EQ(test::first_difference(got.logits, ref.logits), -1);
  EXPECT_EQ(got.greedy, ref.greedy);
  return m;
}

TEST(StreamIdentityLong, SmallCacheWithPrefetch) {
  for (const char* f : {"qwen3_moe/q4", "qwen3_next/q4", "deepseek_v3/fp8"}) {
    SCOPED_TRACE(f);
    const auto m = expect_cache_matches_mapped(f, "golden_long.safetensors", "25%", 12);
    ASSERT_TRUE(expert_cache(*m));
    EXPECT_GT(expert_cache(*m)->stats().evictions, 0u);
  }
}

// On 8 threads or more decode runs its experts fused (one region, combine per row block),
// while the expert cache's windows run them unfused: still the same bits, with shared experts
// (deepseek_v3) and a gated shared expert (qwen3_next).
TEST(StreamIdentityLong, FusedDecodeExpertsMatchTheCachePath) {
  set_cpu_threads(8);
  for (const char* f : {"qwen3_moe/q4", "qwen3_next/q4", "deepseek_v3/q4"}) {
    SCOPED_TRACE(f);
    expect_cache_matches_mapped(f, "golden.safetensors", "100%", 8);
  }
  set_cpu_threads(0);
}

}  // namespace
}  // namespace moeflux

namespace moeflux {
namespace {

// `auto` uses no expert cache for a pack whose experts fit in half the RAM (the pack is read
// into memory or mapped: see the next test), unless an option needs the cache.
TEST(StreamAuto, NoCacheForAFittingPackUnlessTheCacheIsAskedFor) {
  const std::string pack = test::fixture_pack("qwen3_moe/q4");
  StreamOptions o;
  EXPECT_FALSE(expert_cache(*load_model(pack, o)));
  o.cache.io = IoMode::Direct;
  EXPECT_TRUE(expert_cache(*load_model(pack, o)));
  o.cache.io = IoMode::Buffered;
  ASSERT_TRUE(o.cache.verify);  // checking records needs no cache: a resident copy is checked at load
  EXPECT_FALSE(expert_cache(*load_model(pack, o)));
  o.need_cache = true;
  auto m = load_model(pack, o);
  ASSERT_TRUE(expert_cache(*m));
  EXPECT_EQ(expert_cache(*m)->options().budget_bytes, expert_cache(*m)->total_bytes());
  o.need_cache = false;
  o.budget = "50%";
  EXPECT_TRUE(expert_cache(*load_model(pack, o)));
}

// Where auto needs no cache, a fitting pack is copied into memory (resident) rather than
// mapped, and computes bit-identical logits in file order (--no-repack; test_repack.cpp covers
// the repacked layout); --mmap (resident = false), --io mmap and any option that takes the
// cache keep the map.
TEST(StreamAuto, CopiesAFittingPackIntoMemoryWithIdenticalResults) {
  for (const char* f : {"qwen3_moe/q4", "deepseek_v3/fp8"}) {
    SCOPED_TRACE(f);
    const std::string pack = test::fixture_pack(f);
    const auto ids = test::load_golden(test::fixture_dir(f) + "/golden.safetensors").i32.at("input_ids");
    auto mapped = load_model(pack);
    ASSERT_FALSE(dynamic_cast<const PackStore&>(*mapped->store).dense_map().resident());
    Session a(*mapped);
    const test::RunResult ref = test::run_ids(a, ids, 8);
    StreamOptions o;
    EXPECT_EQ(pack_map_mode(pack, o), MapMode::Resident);
    auto m = load_model(pack, o, test::cpu_backend(Repack::Off));
    const auto& store = dynamic_cast<const PackStore&>(*m->store);
    EXPECT_TRUE(store.dense_map().resident());
    EXPECT_TRUE(store.layer_map(0).resident());
    EXPECT_FALSE(expert_cache(*m));
    Session b(*m);
    const test::RunResult got = test::run_ids(b, ids, 8);
    EXPECT_EQ(test::first_difference(got.logits, ref.logits), -1);
    EXPECT_EQ(got.greedy, ref.greedy);
  }
  const std::string pack = test::fixture_pack("qwen3_moe/q4");
  StreamOptions o;
  o.resident = false;
  EXPECT_EQ(pack_map_mode(pack, o), MapMode::Map);
  o.resident = true;
  o.enabled = false;  // --io mmap
  EXPECT_EQ(pack_map_mode(pack, o), MapMode::Map);
  o.enabled = true;
  o.budget = "100%";
  EXPECT_EQ(pack_map_mode(pack, o), MapMode::Map);
  o.budget = "auto";
  o.cache.io = IoMode::Direct;
  EXPECT_EQ(pack_map_mode(pack, o), MapMode::Map);
  o.cache.io = IoMode::Buffered;
  EXPECT_EQ(pack_map_mode(test::fixture_dir("qwen3_moe/q4"), o), MapMode::Map);  // a checkpoint
}

}  // namespace
}  // namespace moeflux
