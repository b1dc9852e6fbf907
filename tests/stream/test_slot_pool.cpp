// SlotPool's page locking: every mapping goes through the pinner it has, existing ones when it
// is set, and each pinned range is unpinned exactly once (on a change of pinner or at the end).
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "stream/slot_pool.h"

namespace moeflux {
namespace {

struct FakePinner final : HostPinner {
  std::map<void*, size_t> pinned;
  int pins = 0, unpins = 0;
  bool refuse = false;
  bool pin(void* p, size_t bytes) override {
    ++pins;
    if (refuse) return false;
    EXPECT_FALSE(pinned.count(p)) << "pinned twice";
    pinned[p] = bytes;
    return true;
  }
  void unpin(void* p) override {
    ++unpins;
    EXPECT_EQ(pinned.erase(p), 1u) << "unpinned a range never pinned";
  }
};

uint64_t pinned_bytes(const FakePinner& f) {
  uint64_t n = 0;
  for (const auto& kv : f.pinned) n += kv.second;
  return n;
}

TEST(SlotPool, PinsMappingsMadeBeforeAndAfterThePinnerIsSet) {
  auto f = std::make_shared<FakePinner>();
  {
    SlotPool pool(uint64_t(4) << 20);
    uint8_t* a = pool.get(1 << 20);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(pool.set_pinner(f), pool.mapped_bytes());
    EXPECT_EQ(pinned_bytes(*f), pool.mapped_bytes());
    uint8_t* b = pool.get(3 << 19);  // another size: a new mapping, pinned as it is made
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(pinned_bytes(*f), pool.mapped_bytes());
    EXPECT_EQ(f->pins, 2);
    pool.put(a, 1 << 20);
    pool.put(b, 3 << 19);
  }
  EXPECT_TRUE(f->pinned.empty());  // the pool unpins before it unmaps
  EXPECT_EQ(f->unpins, 2);
}

TEST(SlotPool, ReplacingOrClearingThePinnerUnpinsOnce) {
  auto f = std::make_shared<FakePinner>(), g = std::make_shared<FakePinner>();
  SlotPool pool(uint64_t(2) << 20);
  pool.get(1 << 20);
  pool.set_pinner(f);
  pool.set_pinner(g);
  EXPECT_TRUE(f->pinned.empty());
  EXPECT_EQ(pinned_bytes(*g), pool.mapped_bytes());
  EXPECT_EQ(pool.set_pinner(nullptr), 0u);
  EXPECT_TRUE(g->pinned.empty());
  pool.get(1 << 18);  // no pinner: nothing pinned
  EXPECT_EQ(g->pins, 1);
}

TEST(SlotPool, ARefusedPinLeavesTheRangePageableAndIsNotUnpinned) {
  auto f = std::make_shared<FakePinner>();
  f->refuse = true;
  {
    SlotPool pool(uint64_t(2) << 20);
    pool.get(1 << 20);
    EXPECT_EQ(pool.set_pinner(f), 0u);
  }
  EXPECT_EQ(f->pins, 1);
  EXPECT_EQ(f->unpins, 0);
}

}  // namespace
}  // namespace moeflux
