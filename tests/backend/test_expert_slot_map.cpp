// ExpertSlotMap (the GPU expert cache's bookkeeping): least recently used eviction that never
// takes a slot the same step placed and names the record a miss evicts, pins that stay, dropped
// records and added layers, errors
// for impossible steps, and hits and
// misses equal to a straightforward LRU simulation over random routing.
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>

#include "core/error.h"
#include "backend/expert_slot_map.h"

namespace moeflux {
namespace {

std::vector<bool> hits(const std::vector<ExpertSlotMap::Placement>& p) {
  std::vector<bool> h;
  for (const auto& x : p) h.push_back(x.hit);
  return h;
}

TEST(ExpertSlotMap, LeastRecentlyUsedGoesFirst) {
  ExpertSlotMap m(3, 2, 8);
  const auto first = m.place(0, std::vector<int32_t>{0, 1, 2});
  EXPECT_EQ(hits(first), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(hits(m.place(0, std::vector<int32_t>{0})), std::vector<bool>{true});
  EXPECT_EQ(first[2].evicted_layer, -1);  // free slots evict nothing
  const auto p = m.place(0, std::vector<int32_t>{3});  // 1 is the least recently used now
  EXPECT_FALSE(p[0].hit);
  EXPECT_EQ(p[0].slot, first[1].slot);
  EXPECT_EQ(p[0].evicted_layer, 0);
  EXPECT_EQ(p[0].evicted_expert, 1);
  EXPECT_EQ(m.slot_of(0, 1), -1);
  EXPECT_EQ(m.slot_of(0, 3), first[1].slot);
  EXPECT_EQ(m.slot_of(0, 0), first[0].slot);
  // Layers are separate keys.
  const auto other = m.place(1, std::vector<int32_t>{0});
  EXPECT_FALSE(other[0].hit);
  EXPECT_EQ(other[0].evicted_layer, 0);  // 2, the least recently used, of layer 0
  EXPECT_EQ(other[0].evicted_expert, 2);
  EXPECT_EQ(m.stats().lookups, 6u);
  EXPECT_EQ(m.stats().hits, 1u);
  EXPECT_EQ(m.stats().misses, 5u);
  EXPECT_EQ(m.stats().evictions, 2u);
}

// Prefills visit every expert of every layer in turn. Over a cache of half of them, least
// recently used insertion keeps nothing a prefill will meet again (each record goes before its
// next use); a scan's misses going first keep what the cache held, and a later prefill finds it.
TEST(ExpertSlotMap, RepeatedScansKeepHittingWhatTheCacheHeld) {
  const int layers = 8, experts = 16, slots = layers * experts / 2;
  std::vector<int32_t> all(experts);
  for (int e = 0; e < experts; ++e) all[size_t(e)] = e;
  for (const bool scan : {false, true}) {
    SCOPED_TRACE(scan ? "scan" : "least recently used");
    ExpertSlotMap m(slots, layers, experts);
    for (int pass = 0; pass < 4; ++pass)
      for (int l = 0; l < layers; ++l) m.place(l, all, scan);
    const uint64_t before = m.stats().hits;
    for (int l = 0; l < layers; ++l) m.place(l, all, scan);
    const uint64_t got = m.stats().hits - before;
    if (scan) {
      // All but the slots the scan's misses rotate through (at most its last two layers').
      EXPECT_GE(got, uint64_t(slots - 2 * experts));
      EXPECT_LE(got, uint64_t(slots));
    } else {
      EXPECT_EQ(got, 0u);
    }
  }
}

// A scan takes no slot of the step before it (a layer whose kernels may still read them) while
// older ones are there, and falls back to them only when nothing else is left.
TEST(ExpertSlotMap, AScanSparesThePreviousStep) {
  ExpertSlotMap m(4, 3, 8);
  m.place(0, std::vector<int32_t>{0, 1}, true);
  const auto prev = m.place(1, std::vector<int32_t>{0, 1}, true);
  const auto p = m.place(2, std::vector<int32_t>{0, 1}, true);  // evicts layer 0's, not layer 1's
  for (const auto& x : p) EXPECT_EQ(x.evicted_layer, 0);
  EXPECT_EQ(m.slot_of(1, 0), prev[0].slot);
  EXPECT_EQ(m.slot_of(1, 1), prev[1].slot);
  const auto q = m.place(0, std::vector<int32_t>{5, 6, 7}, true);  // 2 from layer 1, then 1 from layer 2
  int from2 = 0;
  for (const auto& x : q) from2 += x.evicted_layer == 2;
  EXPECT_EQ(from2, 1);
}

TEST(ExpertSlotMap, AStepKeepsItsOwnSlots) {
  ExpertSlotMap m(2, 1, 8);
  m.place(0, std::vector<int32_t>{0, 1});
  const auto p = m.place(0, std::vector<int32_t>{2, 3});  // both evicted, not 2 for 3
  EXPECT_NE(p[0].slot, p[1].slot);
  EXPECT_EQ(m.slot_of(0, 2), p[0].slot);
  EXPECT_EQ(m.slot_of(0, 3), p[1].slot);
  EXPECT_THROW(m.place(0, std::vector<int32_t>{4, 5, 6}), Error);       // more than the slots
  EXPECT_THROW(m.place(0, std::vector<int32_t>{2, 2}), Error);          // twice
  EXPECT_THROW(m.place(0, std::vector<int32_t>{8}), Error);             // no such expert
  EXPECT_THROW(m.place(1, std::vector<int32_t>{0}), Error);             // no such layer
  EXPECT_THROW(ExpertSlotMap(0, 1, 8), Error);
}

TEST(ExpertSlotMap, DropAndGrow) {
  ExpertSlotMap m(2, 1, 4);
  const auto p = m.place(0, std::vector<int32_t>{1, 2});
  m.drop(0, 1);  // its copy failed: the slot is free again, the record not there
  EXPECT_EQ(m.slot_of(0, 1), -1);
  EXPECT_FALSE(m.place(0, std::vector<int32_t>{1})[0].hit);
  EXPECT_EQ(m.slot_of(0, 2), p[1].slot) << "a free slot is taken before an eviction";
  m.grow(3);
  EXPECT_FALSE(m.place(2, std::vector<int32_t>{3})[0].hit);
  EXPECT_EQ(m.slot_of(0, 2), -1) << "the least recently used went";
  EXPECT_EQ(m.slot_of(0, 1), p[0].slot);
}

TEST(ExpertSlotMap, PinnedRecordsStay) {
  ExpertSlotMap m(3, 1, 16);
  ExpertSlotMap::Placement w;
  ASSERT_TRUE(m.pin(0, 5, &w));
  EXPECT_FALSE(w.hit);
  EXPECT_EQ(m.pinned(), 1);
  for (int e = 0; e < 16; ++e)
    if (e != 5) m.place(0, std::vector<int32_t>{e, (e + 1) % 16 == 5 ? 6 : (e + 1) % 16});
  EXPECT_EQ(m.slot_of(0, 5), w.slot);
  EXPECT_TRUE(m.place(0, std::vector<int32_t>{5})[0].hit);
  EXPECT_THROW(m.place(0, std::vector<int32_t>{0, 1, 2}), Error);  // two unpinned slots only
  ExpertSlotMap::Placement again;
  ASSERT_TRUE(m.pin(0, 5, &again));  // pinned already: the same slot, a hit
  EXPECT_TRUE(again.hit);
  EXPECT_EQ(again.slot, w.slot);
  EXPECT_EQ(m.pinned(), 1);
  ExpertSlotMap full(1, 1, 4);
  ASSERT_TRUE(full.pin(0, 0, &w));
  EXPECT_FALSE(full.pin(0, 1, &w));
}

// Random steps of 1-8 distinct experts of 4 layers x 32 experts through 40 slots, against a
// list kept in use order: the same hits, and no two records ever share a slot.
TEST(ExpertSlotMap, EqualsASimpleLruSimulation) {
  ExpertSlotMap m(40, 4, 32);
  std::list<std::pair<int, int>> lru;  // front: least recently used
  std::mt19937 rng(7);
  for (int step = 0; step < 3000; ++step) {
    const int layer = int(rng() % 4);
    std::vector<int32_t> ex;
    const int n = 1 + int(rng() % 8);
    while (int(ex.size()) < n) {
      const int32_t e = int32_t(std::min<uint32_t>(rng() % 32, rng() % 32));  // skewed
      if (std::find(ex.begin(), ex.end(), e) == ex.end()) ex.push_back(e);
    }
    std::vector<bool> want;
    for (int32_t e : ex) {
      auto it = std::find(lru.begin(), lru.end(), std::pair{layer, int(e)});
      want.push_back(it != lru.end());
      if (it != lru.end()) lru.erase(it);
      else if (lru.size() == 40) lru.pop_front();
      lru.emplace_back(layer, e);
    }
    ASSERT_EQ(hits(m.place(layer, ex)), want) << "step " << step;
  }
  std::map<int64_t, int> owners;
  for (int l = 0; l < 4; ++l)
    for (int e = 0; e < 32; ++e)
      if (const int64_t s = m.slot_of(l, e); s >= 0) {
        EXPECT_EQ(++owners[s], 1) << "slot " << s;
      }
  EXPECT_EQ(owners.size(), 40u);
}

}  // namespace
}  // namespace moeflux
