// Tests of server/memory_reservation: the limit check, release on destruction, Commit, moves,
// and that concurrent reservations never pass the limit together.
#include "server/memory_reservation.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

TEST(MemoryReservationTest, ReleasedOnDestructionUnlessCommitted) {
  std::atomic<uint64_t> held{100};
  {
    absl::StatusOr<MemoryReservation> r = MemoryReservation::Reserve(&held, 1000, 300);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->size(), 300u);
    EXPECT_EQ(held.load(), 400u);
  }
  EXPECT_EQ(held.load(), 100u);
  {
    absl::StatusOr<MemoryReservation> r = MemoryReservation::Reserve(&held, 1000, 300);
    ASSERT_TRUE(r.ok()) << r.status();
    r->Commit();
  }
  EXPECT_EQ(held.load(), 400u);
}

TEST(MemoryReservationTest, RefusedAboveTheLimitWithTheNumbers) {
  std::atomic<uint64_t> held{600};
  absl::StatusOr<MemoryReservation> r = MemoryReservation::Reserve(&held, 1000, 401);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  for (const char* part : {"1000", "600 held", "401 asked", "--session-mem-limit"}) {
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status();
  }
  EXPECT_EQ(held.load(), 600u);
  // Exactly up to the limit fits; sizes that would wrap the counter do not.
  EXPECT_TRUE(MemoryReservation::Reserve(&held, 1000, 400).ok());
  EXPECT_FALSE(MemoryReservation::Reserve(&held, 1000, UINT64_MAX).ok());
  EXPECT_EQ(held.load(), 600u);
}

TEST(MemoryReservationTest, ZeroLimitMeansNone) {
  std::atomic<uint64_t> held{0};
  absl::StatusOr<MemoryReservation> r = MemoryReservation::Reserve(&held, 0, uint64_t{1} << 50);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(held.load(), uint64_t{1} << 50);
}

TEST(MemoryReservationTest, MovedFromReleasesNothing) {
  std::atomic<uint64_t> held{0};
  std::optional<MemoryReservation> outer;
  {
    absl::StatusOr<MemoryReservation> r = MemoryReservation::Reserve(&held, 0, 64);
    ASSERT_TRUE(r.ok());
    outer.emplace(std::move(*r));
  }  // the moved-from one is gone: the bytes are still reserved.
  EXPECT_EQ(held.load(), 64u);
  outer.reset();
  EXPECT_EQ(held.load(), 0u);
}

TEST(MemoryReservationTest, ConcurrentReservationsStayWithinTheLimit) {
  constexpr uint64_t kLimit = 1000;
  constexpr uint64_t kSize = 300;  // at most 3 fit at once.
  constexpr int kThreads = 8;
  constexpr int kRounds = 200000;
  std::atomic<uint64_t> held{0};
  std::atomic<uint64_t> most{0};
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        absl::StatusOr<MemoryReservation> r = MemoryReservation::Reserve(&held, kLimit, kSize);
        if (!r.ok()) continue;
        ++granted;
        const uint64_t now = held.load();
        uint64_t seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_LE(most.load(), kLimit);
  EXPECT_GT(granted.load(), 0);
  EXPECT_EQ(held.load(), 0u);
}

}  // namespace
}  // namespace tg::server
