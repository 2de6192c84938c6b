// Tests of what sessions charge the server's memory budget (SessionEnv::budget): buffers
// charged to the session and the budget together, at least kMinBufferCharge each; given back
// by Free and when the session ends; one session's holdings refusing another's; the cap on
// buffers per session; and the gauges in /metrics.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/memory_reservation.h"
#include "server/session.h"
#include "server/session_testing.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;
using testing::AllocRequest;
using testing::FreeRequest;

constexpr int kOk = 0;
constexpr int kExhausted = static_cast<int>(absl::StatusCode::kResourceExhausted);

class SessionMemoryTest : public testing::SessionEnvTest {
 protected:
  std::unique_ptr<Session> NewSession(uint64_t mem_limit = 0) {
    SessionEnv env = env_;
    env.mem_limit = mem_limit;
    env.budget = &budget_;
    env.predictable_handles = true;
    return std::make_unique<Session>("s" + std::to_string(++sessions_), std::move(env));
  }
  // The handle, or 0 when refused (the reply in *reply).
  uint64_t Alloc(Session& s, uint64_t size, pb::SessionReply* reply = nullptr) {
    pb::SessionReply r = s.Handle(AllocRequest(next_id_++, 0, size));
    if (reply != nullptr) *reply = r;
    return r.code() == kOk ? r.alloc_buffer().buffer() : 0;
  }

  ServerMemoryBudget budget_{1 << 20, &metrics_};
  int sessions_ = 0;
  uint64_t next_id_ = 1;
};

TEST_F(SessionMemoryTest, BuffersChargeTheBudgetUntilFreedOrTheSessionEnds) {
  auto a = NewSession();
  const uint64_t h = Alloc(*a, 300 << 10);
  ASSERT_NE(h, 0u);
  Alloc(*a, 0);  // charged its bookkeeping.
  EXPECT_EQ(budget_.held(), (300u << 10) + kMinBufferCharge);
  EXPECT_EQ(a->bytes_held(), budget_.held());
  EXPECT_EQ(metrics_.mem_held_bytes(), static_cast<double>(budget_.held()));
  EXPECT_EQ(a->Handle(FreeRequest(next_id_++, h)).code(), kOk);
  EXPECT_EQ(budget_.held(), kMinBufferCharge);
  ASSERT_NE(Alloc(*a, 100 << 10), 0u);
  a.reset();  // buffers never freed go back with the session.
  EXPECT_EQ(budget_.held(), 0u);
  EXPECT_EQ(metrics_.mem_held_bytes(), 0.0);
  EXPECT_NE(metrics_.Serialize().find("tg_mem_budget_bytes 1048576"), std::string::npos)
      << metrics_.Serialize();
}

TEST_F(SessionMemoryTest, OneSessionsHoldingsRefuseAnothersWithinItsOwnLimit) {
  auto a = NewSession(/*mem_limit=*/800 << 10);
  auto b = NewSession(/*mem_limit=*/800 << 10);
  ASSERT_NE(Alloc(*a, 700 << 10), 0u);
  pb::SessionReply r;
  EXPECT_EQ(Alloc(*b, 700 << 10, &r), 0u);  // within b's limit, not within the budget.
  EXPECT_EQ(r.code(), kExhausted);
  for (const char* part : {"server memory budget of 1048576 bytes", "hold 716800 bytes",
                           "716800 asked", "--mem-budget"}) {
    EXPECT_NE(r.message().find(part), std::string::npos) << r.message();
  }
  EXPECT_EQ(b->bytes_held(), 0u);
  EXPECT_EQ(budget_.held(), 700u << 10);
  a.reset();
  EXPECT_NE(Alloc(*b, 700 << 10), 0u);  // a's memory is b's to take now.
}

TEST_F(SessionMemoryTest, ARefusedAllocationGivesTheBudgetBack) {
  auto a = NewSession();
  pb::SessionReply r;
  // Passes the budget check, then the device refuses (far more than the host has free)...
  ServerMemoryBudget big(uint64_t{1} << 62);
  SessionEnv env = env_;
  env.budget = &big;
  Session s("unlimited", std::move(env));
  r = s.Handle(AllocRequest(1, 0, uint64_t{1} << 60));
  EXPECT_EQ(r.code(), kExhausted) << r.message();
  EXPECT_EQ(big.held(), 0u);
  // ...and with a budget: refused by it, nothing kept.
  EXPECT_EQ(Alloc(*a, 2 << 20, &r), 0u);
  EXPECT_EQ(budget_.held(), 0u);
}

TEST_F(SessionMemoryTest, BuffersPerSessionAreCapped) {
  env_.max_buffers = 3;
  auto a = NewSession();
  for (int i = 0; i < 3; ++i) ASSERT_NE(Alloc(*a, 0), 0u);
  pb::SessionReply r;
  EXPECT_EQ(Alloc(*a, 0, &r), 0u);
  EXPECT_EQ(r.code(), kExhausted);
  for (const char* part : {"holds 3 buffers", "--max-buffers-per-session (3)"}) {
    EXPECT_NE(r.message().find(part), std::string::npos) << r.message();
  }
  EXPECT_EQ(budget_.held(), 3 * kMinBufferCharge);
  auto b = NewSession();  // the cap is per session.
  EXPECT_NE(Alloc(*b, 0), 0u);
}

}  // namespace
}  // namespace tg::server
