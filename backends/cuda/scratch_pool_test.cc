#include "backends/cuda/scratch_pool.h"

#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

// A device of `capacity` bytes that hands out distinct fake addresses and checks every free.
class FakeAllocator : public DeviceAllocator {
 public:
  explicit FakeAllocator(size_t capacity) : capacity_(capacity) {}
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (used_ + bytes > capacity_) {
      return absl::ResourceExhaustedError(absl::StrCat("fake: ", bytes, " bytes"));
    }
    used_ += bytes;
    ++allocations;
    void* p = reinterpret_cast<void*>(next_);
    next_ += bytes + 4096;
    live_[p] = bytes;
    return p;
  }
  void Free(void* ptr, size_t bytes) override {
    auto it = live_.find(ptr);
    ASSERT_NE(it, live_.end()) << "free of an unknown block";
    EXPECT_EQ(it->second, bytes) << "freed with another size";
    used_ -= it->second;
    live_.erase(it);
    ++frees;
  }
  size_t used() const { return used_; }
  size_t live() const { return live_.size(); }
  int allocations = 0;
  int frees = 0;

 private:
  size_t capacity_;
  size_t used_ = 0;
  uintptr_t next_ = 0x10000;
  std::map<void*, size_t> live_;
};

constexpr size_t kG = ScratchPool::kGranularity;

TEST(ScratchPoolTest, RoundsUpAndReusesReturnedBlocks) {
  FakeAllocator dev(1 << 20);
  ScratchPool pool(&dev, 1 << 20);
  void* first;
  {
    absl::StatusOr<ScratchPool::Block> b = pool.Acquire(1000);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->size(), 4 * kG);  // 1000 rounded up to 1024.
    EXPECT_EQ(pool.in_use_bytes(), 4 * kG);
    first = b->get();
  }
  EXPECT_EQ(pool.in_use_bytes(), 0u);
  EXPECT_EQ(pool.cached_bytes(), 4 * kG);
  absl::StatusOr<ScratchPool::Block> again = pool.Acquire(900);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), first);  // stream order makes the reuse safe: no new allocation.
  EXPECT_EQ(dev.allocations, 1);
  EXPECT_EQ(pool.device_allocations(), 1);
}

TEST(ScratchPoolTest, ZeroBytesStillGetsAUsableBlock) {
  FakeAllocator dev(1 << 20);
  ScratchPool pool(&dev, 1 << 20);
  absl::StatusOr<ScratchPool::Block> b = pool.Acquire(0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), kG);
  EXPECT_NE(b->get(), nullptr);
}

TEST(ScratchPoolTest, PicksTheSmallestCachedBlockThatFits) {
  FakeAllocator dev(1 << 20);
  ScratchPool pool(&dev, 1 << 20);
  void* small;
  void* medium;
  {
    auto a = pool.Acquire(8 * kG);
    auto b = pool.Acquire(2 * kG);
    auto c = pool.Acquire(4 * kG);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    small = b->get();
    medium = c->get();
  }
  auto x = pool.Acquire(3 * kG);  // 2 kG is too small, 4 kG fits best, 8 kG is wasteful.
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->get(), medium);
  auto y = pool.Acquire(kG);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->get(), small);
  EXPECT_EQ(dev.allocations, 3);
}

TEST(ScratchPoolTest, BlocksInUseAreNeverHandedOutTwice) {
  FakeAllocator dev(1 << 20);
  ScratchPool pool(&dev, 1 << 20);
  auto a = pool.Acquire(kG);
  auto b = pool.Acquire(kG);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->get(), b->get());
  EXPECT_EQ(pool.in_use_bytes(), 2 * kG);
}

TEST(ScratchPoolTest, CacheOverTheLimitFreesTheLargestBlocksFirst) {
  FakeAllocator dev(1 << 20);
  ScratchPool pool(&dev, 6 * kG);
  {
    auto a = pool.Acquire(4 * kG);
    auto b = pool.Acquire(2 * kG);
    auto c = pool.Acquire(3 * kG);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  }  // 9 kG returned, 6 allowed: the 4 kG block goes.
  EXPECT_EQ(pool.cached_bytes(), 5 * kG);
  EXPECT_EQ(dev.used(), 5 * kG);
  EXPECT_EQ(dev.frees, 1);
  EXPECT_EQ(pool.peak_bytes(), 9 * kG);
}

TEST(ScratchPoolTest, OutOfMemoryFreesTheCacheAndRetriesOnce) {
  FakeAllocator dev(10 * kG);
  ScratchPool pool(&dev, 1 << 20);
  {
    auto a = pool.Acquire(6 * kG);
    ASSERT_TRUE(a.ok());
  }
  // 6 kG cached, 8 kG needed: only after the cache is freed does the device have it.
  auto b = pool.Acquire(8 * kG);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(pool.cached_bytes(), 0u);
  EXPECT_EQ(dev.used(), 8 * kG);
}

TEST(ScratchPoolTest, OutOfMemoryIsReportedWithTheAllocatorsMessage) {
  FakeAllocator dev(4 * kG);
  ScratchPool pool(&dev, 1 << 20);
  auto held = pool.Acquire(3 * kG);
  ASSERT_TRUE(held.ok());
  auto b = pool.Acquire(2 * kG);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(b.status())) << b.status();
  EXPECT_NE(b.status().message().find("512 bytes"), std::string::npos) << b.status();
  EXPECT_EQ(pool.in_use_bytes(), 3 * kG);  // the failure changed nothing.
}

TEST(ScratchPoolTest, MovedBlocksReturnOnceAndTrimAndDestructionFreeEverything) {
  FakeAllocator dev(1 << 20);
  {
    ScratchPool pool(&dev, 1 << 20);
    auto a = pool.Acquire(kG);
    ASSERT_TRUE(a.ok());
    ScratchPool::Block moved = std::move(*a);
    ScratchPool::Block other;
    other = std::move(moved);
    EXPECT_EQ(moved.get(), nullptr);
    other.Reset();
    other.Reset();  // a second reset gives nothing back twice.
    EXPECT_EQ(pool.in_use_bytes(), 0u);
    EXPECT_EQ(pool.cached_bytes(), kG);
    pool.Trim();
    EXPECT_EQ(dev.live(), 0u);
    auto b = pool.Acquire(2 * kG);
    ASSERT_TRUE(b.ok());
  }  // b returned to the pool, then the pool frees it.
  EXPECT_EQ(dev.live(), 0u);
  EXPECT_EQ(dev.allocations, dev.frees);
}

}  // namespace
}  // namespace tg::cuda
