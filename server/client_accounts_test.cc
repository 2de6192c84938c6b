// Tests of ClientAccounts: one client's sessions share one byte limit and one session cap,
// clients do not share theirs, the counts go with the last session, and concurrent takes
// never pass the limit together.
#include "server/client_accounts.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

TEST(ClientAccounts, SessionsOfOneClientShareItsLimit) {
  ClientAccounts accounts(/*mem_limit=*/1000, /*max_sessions=*/0);
  absl::StatusOr<std::shared_ptr<ClientAccount>> a1 = accounts.Open("alice");
  absl::StatusOr<std::shared_ptr<ClientAccount>> a2 = accounts.Open("alice");
  absl::StatusOr<std::shared_ptr<ClientAccount>> b = accounts.Open("10.0.0.2");
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(accounts.clients(), 2u);
  EXPECT_TRUE((*a1)->Take(600).ok());
  const absl::Status refused = (*a2)->Take(600);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("client alice's memory limit of 1000 bytes"), std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("hold 600 bytes, 600 asked"), std::string::npos) << refused;
  EXPECT_EQ((*a2)->held(), 600u);  // a refusal takes nothing.
  EXPECT_TRUE((*a2)->Take(400).ok());
  EXPECT_TRUE((*b)->Take(1000).ok());  // another client's share is whole.
  (*a1)->Give(600);
  EXPECT_TRUE((*a2)->Take(600).ok());
  EXPECT_EQ((*a1)->held(), 1000u);
}

TEST(ClientAccounts, NoLimitTakesAnything) {
  ClientAccounts accounts(0, 0);
  absl::StatusOr<std::shared_ptr<ClientAccount>> a = accounts.Open("alice");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE((*a)->Take(uint64_t{1} << 62).ok());
  EXPECT_TRUE((*a)->Take(uint64_t{1} << 62).ok());
}

TEST(ClientAccounts, SessionCapIsPerClientAndTheEntryGoesWithTheLastSession) {
  ClientAccounts accounts(1000, /*max_sessions=*/2);
  auto a1 = accounts.Open("alice");
  auto a2 = accounts.Open("alice");
  ASSERT_TRUE(a1.ok() && a2.ok());
  absl::StatusOr<std::shared_ptr<ClientAccount>> a3 = accounts.Open("alice");
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a3.status().message().find("client alice has 2 sessions open"), std::string::npos)
      << a3.status();
  EXPECT_TRUE(accounts.Open("bob").ok());  // bob's session is closed again at once.
  EXPECT_EQ(accounts.clients(), 1u);
  ASSERT_TRUE((*a1)->Take(700).ok());
  (*a1)->Give(700);
  a1->reset();
  EXPECT_TRUE(accounts.Open("alice").ok());  // a1's slot is free.
  a2->reset();
  EXPECT_EQ(accounts.clients(), 0u);
  // A new session starts from nothing.
  auto again = accounts.Open("alice");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->held(), 0u);
}

TEST(ClientAccounts, ConcurrentTakesNeverPassTheLimitTogether) {
  constexpr uint64_t kLimit = 1 << 20;
  ClientAccounts accounts(kLimit, 0);
  std::vector<std::shared_ptr<ClientAccount>> sessions;
  for (int i = 0; i < 8; ++i) sessions.push_back(*accounts.Open("alice"));
  std::atomic<uint64_t> taken{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 10000; ++k) {
        if (sessions[i]->Take(1000).ok()) taken += 1000;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(taken.load(), kLimit / 1000 * 1000);
  EXPECT_EQ(sessions[0]->held(), taken.load());
}

}  // namespace
}  // namespace tg::server
