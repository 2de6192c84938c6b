// Tests of server/memory_reservation: the limit check, release on destruction, Commit, moves,
// that concurrent reservations never pass the limit together; the host reserve check and
// the defaults of --mem-reserve and --session-mem-limit; that BoundHostHeap leaves no freed
// buffer in the heap.
#include "server/memory_reservation.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/client_accounts.h"

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

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(HostMemoryReserveTest, RefusesWhatWouldLeaveLessThanTheReserve) {
  EXPECT_TRUE(CheckHostMemoryReserve(6 * kGiB, 8 * kGiB, 2 * kGiB).ok());  // exactly fits.
  absl::Status s = CheckHostMemoryReserve(6 * kGiB + 1, 8 * kGiB, 2 * kGiB);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  for (const char* part : {"6442450945 bytes asked", "reserve of 2147483648 bytes", "2.0 GiB",
                           "8589934592 available", "--mem-reserve"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << s;
  }
  // Less available than the reserve already: even one byte is refused.
  EXPECT_FALSE(CheckHostMemoryReserve(1, kGiB, 2 * kGiB).ok());
  // No reserve: anything goes (the device's own free-memory check still applies).
  EXPECT_TRUE(CheckHostMemoryReserve(UINT64_MAX, 0, 0).ok());
}

TEST(MemoryDefaultsTest, ReserveIsATenthWithinOneToEightGiB) {
  EXPECT_EQ(DefaultHostMemoryReserve(24 * kGiB), 24 * kGiB / 10);
  EXPECT_EQ(DefaultHostMemoryReserve(4 * kGiB), kGiB);        // a tenth would be 0.4 GiB.
  EXPECT_EQ(DefaultHostMemoryReserve(512 * kGiB), 8 * kGiB);  // a tenth would be 51 GiB.
  EXPECT_EQ(DefaultHostMemoryReserve(kGiB), kGiB / 2);        // at most half the host.
}

TEST(MemoryDefaultsTest, SessionGetsHalfOfWhatSessionsMayUse) {
  // The host: 24 GiB, CPU devices only. Reserve 2.4 GiB; a session 10.8 GiB, so a
  // second session always finds as much again.
  const uint64_t reserve = DefaultHostMemoryReserve(24 * kGiB);
  EXPECT_EQ(DefaultSessionMemLimit(24 * kGiB, true, reserve, 0), (24 * kGiB - reserve) / 2);
  // A GPU host serving only its 80 GiB GPU: half of the GPU; the host memory is not served.
  EXPECT_EQ(DefaultSessionMemLimit(128 * kGiB, false, 8 * kGiB, 80 * kGiB), 40 * kGiB);
  // Both: the halves add up (one counter covers all of a session's devices).
  EXPECT_EQ(DefaultSessionMemLimit(128 * kGiB, true, 8 * kGiB, 80 * kGiB), 60 * kGiB + 40 * kGiB);
  // Never 0, which would mean no limit.
  EXPECT_EQ(DefaultSessionMemLimit(kGiB, true, 2 * kGiB, 0), 1u);
}

TEST(MemoryDefaultsTest, BudgetIsWhatSessionsMayUseTogether) {
  // A 1 GiB container: the reserve is half of it, the budget the other half.
  const uint64_t reserve = DefaultHostMemoryReserve(kGiB);
  EXPECT_EQ(DefaultServerMemoryBudget(kGiB, true, reserve, 0), kGiB / 2);
  // A GPU host serving only its GPU: the GPU's memory; both: the sum.
  EXPECT_EQ(DefaultServerMemoryBudget(128 * kGiB, false, 8 * kGiB, 80 * kGiB), 80 * kGiB);
  EXPECT_EQ(DefaultServerMemoryBudget(128 * kGiB, true, 8 * kGiB, 80 * kGiB), 200 * kGiB);
  // A reserve above the host: nothing fits, yet never 0 (no budget).
  EXPECT_EQ(DefaultServerMemoryBudget(kGiB, true, 2 * kGiB, 0), 1u);
}

TEST(ServerMemoryBudgetTest, TakesAndGivesWithinTheBudget) {
  ServerMemoryBudget budget(1000);
  EXPECT_TRUE(budget.Take(600).ok());
  absl::Status s = budget.Take(401);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  for (const char* part : {"server memory budget of 1000 bytes", "hold 600", "401 asked",
                           "--mem-budget", "--mem-reserve"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << s;
  }
  EXPECT_EQ(budget.held(), 600u);
  EXPECT_TRUE(budget.Take(400).ok());  // exactly up to the budget.
  EXPECT_FALSE(budget.Take(UINT64_MAX).ok());
  budget.Give(1000);
  EXPECT_EQ(budget.held(), 0u);
  ServerMemoryBudget none(0);
  EXPECT_TRUE(none.Take(uint64_t{1} << 60).ok());
}

TEST(ServerMemoryBudgetTest, ReservationsChargeTheSessionAndTheBudget) {
  ServerMemoryBudget budget(1000);
  std::atomic<uint64_t> a{0};
  std::atomic<uint64_t> b{0};
  {
    absl::StatusOr<MemoryReservation> ra = MemoryReservation::Reserve(&a, 800, 500, &budget);
    ASSERT_TRUE(ra.ok()) << ra.status();
    EXPECT_EQ(budget.held(), 500u);
    ra->Commit();
    // Within b's own limit, not within what the budget has left: the budget is named.
    absl::StatusOr<MemoryReservation> rb = MemoryReservation::Reserve(&b, 800, 600, &budget);
    ASSERT_FALSE(rb.ok());
    EXPECT_NE(rb.status().message().find("--mem-budget"), std::string::npos) << rb.status();
    EXPECT_EQ(b.load(), 0u);
    // Past both: still the budget, which raising the session's limit would not help.
    rb = MemoryReservation::Reserve(&b, 100, 2000, &budget);
    EXPECT_NE(rb.status().message().find("--mem-budget"), std::string::npos) << rb.status();
    // Past the session's limit only: the session's is named, and the budget is untouched.
    rb = MemoryReservation::Reserve(&b, 100, 200, &budget);
    ASSERT_FALSE(rb.ok());
    EXPECT_NE(rb.status().message().find("--session-mem-limit"), std::string::npos) << rb.status();
    EXPECT_EQ(budget.held(), 500u);
    // Not committed: given back to both when dropped; a move assignment gives back the
    // overwritten one's.
    rb = MemoryReservation::Reserve(&b, 800, 300, &budget);
    ASSERT_TRUE(rb.ok());
    EXPECT_EQ(budget.held(), 800u);
    rb = MemoryReservation::Reserve(&b, 800, 100, &budget);
    ASSERT_TRUE(rb.ok());
    EXPECT_EQ(budget.held(), 600u);
    EXPECT_EQ(b.load(), 100u);
  }
  EXPECT_EQ(budget.held(), 500u);  // the committed one stays.
  EXPECT_EQ(a.load(), 500u);
  EXPECT_EQ(b.load(), 0u);
}

TEST(ServerMemoryBudgetTest, ReservationsChargeTheClientBetweenBudgetAndSession) {
  ServerMemoryBudget budget(10000);
  ClientAccounts accounts(/*mem_limit=*/1000, 0);
  std::shared_ptr<ClientAccount> client = *accounts.Open("alice");
  std::atomic<uint64_t> s{0};
  {
    absl::StatusOr<MemoryReservation> r =
        MemoryReservation::Reserve(&s, 5000, 700, &budget, client.get());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(client->held(), 700u);
    // Past the client's limit and the session's: the client's is named (the wider), and
    // neither the budget nor the session keeps anything of the refusal.
    absl::StatusOr<MemoryReservation> past =
        MemoryReservation::Reserve(&s, 800, 400, &budget, client.get());
    ASSERT_FALSE(past.ok());
    EXPECT_NE(past.status().message().find("--client-mem-limit"), std::string::npos)
        << past.status();
    EXPECT_EQ(budget.held(), 700u);
    EXPECT_EQ(s.load(), 700u);
    // Past the session's only: the session's is named and the client gets its bytes back.
    past = MemoryReservation::Reserve(&s, 800, 200, &budget, client.get());
    ASSERT_FALSE(past.ok());
    EXPECT_NE(past.status().message().find("--session-mem-limit"), std::string::npos)
        << past.status();
    EXPECT_EQ(client->held(), 700u);
    // Past the budget too: the budget's.
    past = MemoryReservation::Reserve(&s, 800, 20000, &budget, client.get());
    EXPECT_NE(past.status().message().find("--mem-budget"), std::string::npos) << past.status();
    EXPECT_EQ(client->held(), 700u);
    // Moved: released once.
    MemoryReservation moved = *std::move(r);
    EXPECT_EQ(client->held(), 700u);
  }
  EXPECT_EQ(client->held(), 0u);
  EXPECT_EQ(budget.held(), 0u);
  EXPECT_EQ(s.load(), 0u);
}

TEST(ServerMemoryBudgetTest, ConcurrentSessionsNeverPassTheBudget) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 100000;
  ServerMemoryBudget budget(1000);
  std::atomic<bool> passed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::atomic<uint64_t> session{0};  // each thread a session of its own.
      for (int i = 0; i < kRounds; ++i) {
        absl::StatusOr<MemoryReservation> r = MemoryReservation::Reserve(&session, 0, 300, &budget);
        if (budget.held() > 1000) passed = true;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(passed.load());
  EXPECT_EQ(budget.held(), 0u);
}

// Buffers that come and go on several threads, as sessions' do, each larger one freed before
// a smaller one is asked for: glibc would raise its mmap threshold with the first and serve
// the next from a thread's arena, where it stays once freed. Bounded, all go back.
TEST(BoundHostHeapTest, FreedBuffersGoBackToTheSystem) {
#if !defined(__GLIBC__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "glibc's own allocator only";
#else
  constexpr int kThreads = 4;
  constexpr size_t kMiB = size_t{1} << 20;
  BoundHostHeap();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (size_t size : {4 * kMiB, 3 * kMiB, 2 * kMiB, kMiB}) {
        void* p = std::aligned_alloc(64, size);
        ASSERT_NE(p, nullptr);
        std::memset(p, t + 1, size);  // resident, as a tensor's buffer is once written.
        std::free(p);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // Free bytes the arenas keep: what a soak saw grow (docs/reliability.md).
  EXPECT_LT(mallinfo2().fordblks, kMiB);
#endif
}

}  // namespace
}  // namespace tg::server
