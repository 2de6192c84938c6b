// Tests of SessionBufferRecycler (server/session_buffer_recycler.h) on real CPU buffers: a
// buffer kept is handed out again (the same memory), only for its type and exact size, the
// oldest go beyond the byte limit, and kept memory goes back after the keep time.
#include "server/session_buffer_recycler.h"

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/server_testing.h"

namespace tg::server {
namespace {

constexpr uint64_t kSize = SessionBufferRecycler::kMinBytes;

class SessionBufferRecyclerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<Device*> devices = testing::TwoCpuDevices();
    ASSERT_FALSE(devices.empty());
    type_ = devices[0]->default_buffer_type();
  }

  std::unique_ptr<Buffer> NewBuffer(uint64_t size) {
    absl::StatusOr<std::unique_ptr<Buffer>> b = type_->Allocate(size);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(*b) : nullptr;
  }

  BufferType* type_ = nullptr;
};

TEST_F(SessionBufferRecyclerTest, KeptBufferComesBackForItsTypeAndSizeOnly) {
  SessionBufferRecycler recycler(4 * kSize);
  std::unique_ptr<Buffer> b = NewBuffer(kSize);
  ASSERT_NE(b, nullptr);
  void* const base = b->base();
  recycler.Keep(std::move(b), kSize);
  EXPECT_EQ(recycler.kept_bytes(), kSize);
  EXPECT_EQ(recycler.kept_bytes(type_), kSize);
  EXPECT_EQ(recycler.kept_bytes(nullptr), 0u);
  EXPECT_EQ(recycler.Take(type_, kSize + 1), nullptr);
  EXPECT_EQ(recycler.Take(type_, kSize - 1), nullptr);
  std::unique_ptr<Buffer> again = recycler.Take(type_, kSize);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->base(), base);
  EXPECT_EQ(recycler.kept_bytes(), 0u);
  EXPECT_EQ(recycler.Take(type_, kSize), nullptr);
}

TEST_F(SessionBufferRecyclerTest, SmallBuffersAreFreed) {
  SessionBufferRecycler recycler(4 * kSize);
  recycler.Keep(NewBuffer(kSize - 1), kSize - 1);
  EXPECT_EQ(recycler.kept_bytes(), 0u);
  EXPECT_EQ(recycler.Take(type_, kSize - 1), nullptr);
}

TEST_F(SessionBufferRecyclerTest, OldestGoBeyondTheLimit) {
  SessionBufferRecycler recycler(2 * kSize);
  std::vector<void*> bases;
  for (int i = 0; i < 3; ++i) {
    std::unique_ptr<Buffer> b = NewBuffer(kSize);
    ASSERT_NE(b, nullptr);
    bases.push_back(b->base());
    recycler.Keep(std::move(b), kSize);
  }
  EXPECT_EQ(recycler.kept_bytes(), 2 * kSize);
  // The most recently kept first; the first one was freed.
  std::unique_ptr<Buffer> a = recycler.Take(type_, kSize);
  std::unique_ptr<Buffer> b = recycler.Take(type_, kSize);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->base(), bases[2]);
  EXPECT_EQ(b->base(), bases[1]);
  EXPECT_EQ(recycler.Take(type_, kSize), nullptr);
  // Nothing is kept when nothing may be.
  SessionBufferRecycler none(0);
  none.Keep(std::move(a), kSize);
  EXPECT_EQ(none.kept_bytes(), 0u);
}

TEST_F(SessionBufferRecyclerTest, KeptMemoryGoesBackAfterTheKeepTimeOrOnRelease) {
  SessionBufferRecycler recycler(4 * kSize, absl::Milliseconds(50));
  recycler.Keep(NewBuffer(kSize), kSize);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (recycler.kept_bytes() != 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(recycler.kept_bytes(), 0u);
  EXPECT_EQ(recycler.Take(type_, kSize), nullptr);

  SessionBufferRecycler long_keep(4 * kSize, absl::Hours(1));
  long_keep.Keep(NewBuffer(kSize), kSize);
  long_keep.Keep(NewBuffer(kSize), kSize);
  EXPECT_EQ(long_keep.ReleaseAll(), 2 * kSize);
  EXPECT_EQ(long_keep.kept_bytes(), 0u);
  EXPECT_EQ(long_keep.Take(type_, kSize), nullptr);
}

}  // namespace
}  // namespace tg::server
