// Tests of GraphCache on its own, over a HandleTable: a graph sent once is found by key
// after (on its device only); each graph is charged to the table before it is decoded and
// while it is kept; a graph over the session's memory limit is refused naming its size,
// while graphs that fit one at a time evict older ones; rpc::kGraphCacheGraphs bounds the
// count and rpc::kGraphCacheTensors their tensors;
// DropUsing drops the graphs of a freed buffer and their charges; a graph over the tensor
// limit is refused naming count and limit.
#include "server/graph_cache.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/memory_reservation.h"
#include "server/server_testing.h"
#include "server/session_buffer.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

// A Compute carrying a graph of `n` one-element F32 leaves in `buffer` under `key`.
pb::Compute LeavesCompute(uint64_t buffer, uint64_t key, int n, uint32_t device = 0) {
  pb::Compute c;
  c.set_device(device);
  c.set_graph_key(key);
  for (int i = 0; i < n; ++i) {
    pb::TensorDesc* t = c.mutable_graph()->add_tensors();
    t->set_id(i + 1);
    t->set_type(0);  // F32
    for (int d = 0; d < 4; ++d) {
      t->add_ne(1);
      t->add_nb(4);
    }
    t->set_buffer(buffer);
  }
  return c;
}

// The same Compute naming the graph by key only.
pb::Compute ByKey(uint64_t key, uint32_t device = 0) {
  pb::Compute c;
  c.set_device(device);
  c.set_graph_key(key);
  return c;
}

class GraphCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::TwoCpuDevices();
    ASSERT_FALSE(devices_.empty());
  }
  uint64_t AddBuffer(HandleTable& table, uint64_t size) {
    absl::StatusOr<MemoryReservation> charge = table.ReserveBuffer(size);
    EXPECT_TRUE(charge.ok()) << charge.status();
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        devices_[0]->default_buffer_type()->Allocate(size);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    return table.Insert(std::make_shared<SessionBuffer>(*std::move(buffer), 0, size, nullptr),
                        *std::move(charge));
  }

  std::vector<Device*> devices_;
};

TEST_F(GraphCacheTest, AGraphSentOnceIsFoundByKeyOnItsDevice) {
  HandleTable table({});
  GraphCache cache(&table);
  const uint64_t h = AddBuffer(table, 4096);
  EXPECT_EQ(cache.For(ByKey(5), devices_[0]).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::shared_ptr<GraphCache::Entry>> sent =
      cache.For(LeavesCompute(h, 5, 10), devices_[0]);
  ASSERT_TRUE(sent.ok()) << sent.status();
  absl::StatusOr<std::shared_ptr<GraphCache::Entry>> named = cache.For(ByKey(5), devices_[0]);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->get(), sent->get());
  EXPECT_EQ((*named)->graph->handles, std::vector<uint64_t>{h});
  // The same key on another device is another graph.
  EXPECT_EQ(cache.For(ByKey(5, 1), devices_[1]).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A graph naming a buffer the table lacks is refused, and nothing stays charged for it.
  const uint64_t before = table.bytes_held();
  EXPECT_EQ(cache.For(LeavesCompute(h + 1, 6, 3), devices_[0]).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(table.bytes_held(), before);
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(GraphCacheTest, CachedGraphsAreChargedToTheTable) {
  HandleTable table({.mem_limit = uint64_t{4} << 20});
  GraphCache cache(&table);
  const uint64_t h = AddBuffer(table, 4096);
  const uint64_t before = table.bytes_held();
  const pb::Compute small = LeavesCompute(h, 1, 1000);
  const uint64_t charge = DecodedGraphBytes(small.graph());
  ASSERT_TRUE(cache.For(small, devices_[0]).ok());
  EXPECT_EQ(table.bytes_held(), before + charge);
  EXPECT_EQ(cache.bytes(), charge);
  // A graph over the limit is refused before it is decoded, naming its size.
  absl::Status big = cache.For(LeavesCompute(h, 2, 60000), devices_[0]).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.message().find("60000 tensors"), std::string::npos) << big;
  // Graphs that fit one at a time evict older ones instead of passing the limit.
  const int per = static_cast<int>(((uint64_t{4} << 20) - 4096) / 3 / charge * 1000);
  for (uint64_t k = 0; k < 8; ++k) {
    ASSERT_TRUE(cache.For(LeavesCompute(h, 100 + k, per), devices_[0]).ok());
    EXPECT_LE(table.bytes_held(), uint64_t{4} << 20);
  }
  // Dropping the graphs of the buffer gives their charges back.
  cache.DropUsing(h);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(table.bytes_held(), before);
}

TEST_F(GraphCacheTest, AGraphHeldPastItsEvictionKeepsItsChargeUntilLetGo) {
  HandleTable table({});
  GraphCache cache(&table);
  const uint64_t h = AddBuffer(table, 4096);
  const uint64_t before = table.bytes_held();
  absl::StatusOr<std::shared_ptr<GraphCache::Entry>> held =
      cache.For(LeavesCompute(h, 1, 10), devices_[0]);
  ASSERT_TRUE(held.ok());
  cache.Clear();
  EXPECT_GT(table.bytes_held(), before);  // a queued Compute still holds it.
  held->reset();
  EXPECT_EQ(table.bytes_held(), before);
}

TEST_F(GraphCacheTest, AtMostkGraphCacheGraphsAreKeptNewestFirst) {
  HandleTable table({});
  GraphCache cache(&table);
  const uint64_t h = AddBuffer(table, 4096);
  for (uint64_t k = 1; k <= rpc::kGraphCacheGraphs + 2; ++k) {
    ASSERT_TRUE(cache.For(LeavesCompute(h, k, 2), devices_[0]).ok());
  }
  EXPECT_EQ(cache.size(), rpc::kGraphCacheGraphs);
  // The two oldest went; the rest are there.
  EXPECT_FALSE(cache.For(ByKey(1), devices_[0]).ok());
  EXPECT_FALSE(cache.For(ByKey(2), devices_[0]).ok());
  EXPECT_TRUE(cache.For(ByKey(3), devices_[0]).ok());
  EXPECT_TRUE(cache.For(ByKey(rpc::kGraphCacheGraphs + 2), devices_[0]).ok());
}

// Graphs of the most tensors one may have: the cache holds kGraphCacheTensors of them in all,
// the next evicting the oldest.
TEST_F(GraphCacheTest, AtMostkGraphCacheTensorsAreKept) {
  HandleTable table({});
  GraphCache cache(&table);
  const uint64_t h = AddBuffer(table, 4096);
  constexpr int kTensors = static_cast<int>(rpc::kMaxGraphTensors);
  constexpr uint64_t kFit = rpc::kGraphCacheTensors / rpc::kMaxGraphTensors;
  for (uint64_t k = 1; k <= kFit + 1; ++k) {
    ASSERT_TRUE(cache.For(LeavesCompute(h, k, kTensors), devices_[0]).ok());
  }
  EXPECT_EQ(cache.size(), kFit);
  EXPECT_FALSE(cache.For(ByKey(1), devices_[0]).ok());
  EXPECT_TRUE(cache.For(ByKey(2), devices_[0]).ok());
  EXPECT_TRUE(cache.For(ByKey(kFit + 1), devices_[0]).ok());
}

TEST_F(GraphCacheTest, GraphOverTheTensorLimitIsRefusedNamingCountAndLimit) {
  HandleTable table({});
  GraphCache cache(&table);
  const uint64_t h = AddBuffer(table, 4096);
  const int n = static_cast<int>(rpc::kMaxGraphTensors) + 1;
  absl::Status s = cache.For(LeavesCompute(h, 1, n), devices_[0]).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(absl::StrCat(n)), std::string::npos) << s;
  EXPECT_NE(s.message().find(absl::StrCat(rpc::kMaxGraphTensors)), std::string::npos);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace tg::server
