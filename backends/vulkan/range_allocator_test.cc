// RangeAllocator: alignment, first fit, merging of freed neighbours, exhaustion.
#include "backends/vulkan/range_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tg::vulkan {
namespace {

TEST(RangeAllocatorTest, AlignsAndFillsFirstFit) {
  RangeAllocator a(1024);
  EXPECT_EQ(a.Allocate(10, 1), 0u);
  EXPECT_EQ(a.Allocate(10, 64), 64u);   // 10..63 stay free.
  EXPECT_EQ(a.Allocate(20, 2), 10u);    // first fit goes back into the gap.
  EXPECT_EQ(a.Allocate(0, 256), 256u);  // size 0 still gets its own byte.
  EXPECT_EQ(a.used_bytes(), 41u);
  EXPECT_FALSE(a.Allocate(2048, 1).has_value());
  EXPECT_FALSE(a.Free(5));  // not the start of an allocation.
}

TEST(RangeAllocatorTest, FreeMergesNeighboursIntoOneRange) {
  RangeAllocator a(300);
  const uint64_t x = *a.Allocate(100, 1);
  const uint64_t y = *a.Allocate(100, 1);
  const uint64_t z = *a.Allocate(100, 1);
  EXPECT_FALSE(a.Allocate(1, 1).has_value());
  EXPECT_TRUE(a.Free(x));
  EXPECT_TRUE(a.Free(z));
  EXPECT_EQ(a.largest_free(), 100u);
  EXPECT_TRUE(a.Free(y));  // joins both sides.
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.largest_free(), 300u);
  EXPECT_EQ(a.Allocate(300, 1), 0u);
}

// Random allocations never overlap, respect alignment, and all memory comes back.
TEST(RangeAllocatorTest, RandomAllocationsStayDisjoint) {
  RangeAllocator a(1 << 20);
  std::mt19937 rng(7);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  for (int step = 0; step < 4000; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(a.Free(live[i].first));
      live.erase(live.begin() + i);
      continue;
    }
    const uint64_t size = 1 + rng() % 5000;
    const uint64_t align = uint64_t{1} << (rng() % 9);
    std::optional<uint64_t> off = a.Allocate(size, align);
    if (!off) continue;
    ASSERT_EQ(*off % align, 0u);
    ASSERT_LE(*off + size, a.capacity());
    for (const auto& [o, s] : live) ASSERT_TRUE(*off + size <= o || o + s <= *off);
    live.emplace_back(*off, size);
  }
  for (const auto& [o, s] : live) ASSERT_TRUE(a.Free(o));
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.largest_free(), a.capacity());
}

}  // namespace
}  // namespace tg::vulkan
