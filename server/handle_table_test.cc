// Tests of HandleTable on its own: handles unique, nonzero and different across tables; a
// buffer's charge (at least kMinBufferCharge) taken by ReserveBuffer and given back by Remove
// and Clear, against both the session limit and the server budget; the buffer cap's refusal
// naming the count and the flag; model files known only once opened.
#include "server/handle_table.h"

#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "server/memory_reservation.h"
#include "server/server_testing.h"
#include "server/session_buffer.h"

namespace tg::server {
namespace {

class HandleTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::TwoCpuDevices();
    ASSERT_FALSE(devices_.empty());
  }
  // A buffer of `size` bytes on CPU0, charged to `table` and filed there.
  absl::StatusOr<uint64_t> Add(HandleTable& table, uint64_t size) {
    absl::StatusOr<MemoryReservation> charge = table.ReserveBuffer(size);
    if (!charge.ok()) return charge.status();
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        devices_[0]->default_buffer_type()->Allocate(std::max<uint64_t>(size, 1));
    if (!buffer.ok()) return buffer.status();
    auto entry = std::make_shared<SessionBuffer>(*std::move(buffer), 0, size, nullptr);
    return table.Insert(std::move(entry), *std::move(charge));
  }

  std::vector<Device*> devices_;
  ServerMemoryBudget budget_{1 << 20};
};

TEST_F(HandleTableTest, HandlesAreUniqueNonzeroAndDifferAcrossTables) {
  HandleTable a({}), b({});
  absl::flat_hash_set<uint64_t> seen;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<uint64_t> h = Add(a, 16);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_NE(*h, 0u);
    EXPECT_TRUE(seen.insert(*h).second) << *h;
  }
  // Two tables' first handles differ (random keys), and neither finds the other's.
  absl::StatusOr<uint64_t> hb = Add(b, 16);
  ASSERT_TRUE(hb.ok());
  EXPECT_FALSE(seen.contains(*hb));
  EXPECT_EQ(a.Find(*hb).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a.Find(0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a.buffer_count(), 100u);
}

TEST_F(HandleTableTest, PredictableHandlesCountFromOne) {
  HandleTable t({.predictable_handles = true});
  for (uint64_t want = 1; want <= 3; ++want) {
    absl::StatusOr<uint64_t> h = Add(t, 8);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(*h, want);
  }
}

TEST_F(HandleTableTest, ChargesGoInWithTheBufferAndComeBackWithIt) {
  HandleTable t({.budget = &budget_});
  absl::StatusOr<uint64_t> big = Add(t, 300 << 10);
  absl::StatusOr<uint64_t> tiny = Add(t, 0);
  ASSERT_TRUE(big.ok() && tiny.ok());
  EXPECT_EQ(t.bytes_held(), (300u << 10) + kMinBufferCharge);
  EXPECT_EQ(budget_.held(), t.bytes_held());
  // A reservation never inserted gives its bytes back when dropped.
  { ASSERT_TRUE(t.ReserveBuffer(1000).ok()); }
  EXPECT_EQ(budget_.held(), (300u << 10) + kMinBufferCharge);

  absl::StatusOr<std::shared_ptr<SessionBuffer>> removed = t.Remove(*big);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ((*removed)->size(), 300u << 10);
  EXPECT_EQ(t.bytes_held(), kMinBufferCharge);
  EXPECT_EQ(t.Remove(*big).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.Find(*big).status().code(), absl::StatusCode::kNotFound);

  std::vector<std::shared_ptr<SessionBuffer>> left = t.Clear();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0]->size(), 0u);
  EXPECT_EQ(t.bytes_held(), 0u);
  EXPECT_EQ(budget_.held(), 0u);
  EXPECT_EQ(t.buffer_count(), 0u);
}

TEST_F(HandleTableTest, TheSessionLimitAndTheBudgetRefuseAndGiveNothingAway) {
  HandleTable t({.mem_limit = 64 << 10, .budget = &budget_});
  ASSERT_TRUE(Add(t, 60 << 10).ok());
  absl::StatusOr<uint64_t> over = Add(t, 8 << 10);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.bytes_held(), 60u << 10);
  EXPECT_EQ(budget_.held(), 60u << 10);
  // The budget, shared with another table, refuses the rest of the server's memory.
  HandleTable other({.budget = &budget_});
  EXPECT_EQ(Add(other, (1 << 20) - (60 << 10) + 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(other.bytes_held(), 0u);
  EXPECT_TRUE(Add(other, (1 << 20) - (60 << 10)).ok());
}

TEST_F(HandleTableTest, TheBufferCapRefusesNamingCountAndFlag) {
  HandleTable t({.max_buffers = 3});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Add(t, 0).ok());
  absl::StatusOr<uint64_t> fourth = Add(t, 0);
  ASSERT_EQ(fourth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(fourth.status().message().find("holds 3 buffers"), std::string::npos)
      << fourth.status();
  EXPECT_NE(fourth.status().message().find("--max-buffers-per-session"), std::string::npos);
  EXPECT_EQ(t.bytes_held(), 3 * kMinBufferCharge);  // the refusal charged nothing.
  // No cap: 0.
  HandleTable open({.max_buffers = 0});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Add(open, 0).ok());
}

TEST_F(HandleTableTest, ModelFilesAreKnownOnceOpened) {
  HandleTable t({});
  EXPECT_EQ(t.ModelFile(7).status().code(), absl::StatusCode::kNotFound);
  t.AddModelFile(7);
  absl::StatusOr<uint64_t> f = t.ModelFile(7);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, 7u);
  EXPECT_EQ(t.ModelFile(8).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tg::server
