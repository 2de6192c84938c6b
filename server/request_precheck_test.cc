#include "server/request_precheck.h"

#include <string>

#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/session.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

Precheck Check(const std::string& bytes) {
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  return PrecheckSessionRequest(&in);
}

pb::SessionRequest ComputeWithTensors(uint64_t id, int tensors, int nodes) {
  pb::SessionRequest r;
  r.set_id(id);
  pb::GraphDesc* g = r.mutable_compute()->mutable_graph();
  for (int i = 0; i < tensors; ++i) g->add_tensors()->set_id(i + 1);
  for (int i = 0; i < nodes; ++i) g->add_nodes(1);
  return r;
}

TEST(RequestPrecheckTest, PassesOrdinaryRequests) {
  pb::SessionRequest r = ComputeWithTensors(7, 100, 50);
  Precheck p = Check(r.SerializeAsString());
  EXPECT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.id, 7u);
  pb::SessionRequest batch;
  batch.set_id(9);
  for (int i = 0; i < kMaxBatchCommands; ++i) {
    *batch.mutable_batch()->add_commands() = ComputeWithTensors(i + 1, 1, 1);
  }
  EXPECT_TRUE(Check(batch.SerializeAsString()).status.ok());
}

TEST(RequestPrecheckTest, RefusesTooManyTensorsNamingCountAndLimit) {
  const int n = static_cast<int>(rpc::kMaxGraphTensors) + 1;
  Precheck p = Check(ComputeWithTensors(3, n, 0).SerializeAsString());
  EXPECT_EQ(p.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status.message().find(std::to_string(n)), std::string::npos) << p.status;
  EXPECT_NE(p.status.message().find(std::to_string(rpc::kMaxGraphTensors)), std::string::npos);
  EXPECT_EQ(p.id, 3u);
}

TEST(RequestPrecheckTest, RefusesTooManyNodesPackedOrNot) {
  const int n = static_cast<int>(rpc::kMaxGraphNodes) + 1;
  Precheck p = Check(ComputeWithTensors(3, 1, n).SerializeAsString());
  EXPECT_EQ(p.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status.message().find("nodes"), std::string::npos);
}

TEST(RequestPrecheckTest, RefusesOversizedBatchNamingCountCapAndAdvice) {
  pb::SessionRequest batch;
  batch.set_id(5);
  for (int i = 0; i < kMaxBatchCommands + 10; ++i) {
    batch.mutable_batch()->add_commands()->set_id(1);
  }
  Precheck p = Check(batch.SerializeAsString());
  EXPECT_EQ(p.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status.message().find(std::to_string(kMaxBatchCommands + 10)), std::string::npos);
  EXPECT_NE(p.status.message().find(std::to_string(kMaxBatchCommands)), std::string::npos);
  EXPECT_NE(p.status.message().find("several batches"), std::string::npos);
  EXPECT_EQ(p.id, 5u);
}

TEST(RequestPrecheckTest, BoundsGraphTensorsAcrossABatch) {
  pb::SessionRequest batch;
  const int per = static_cast<int>(rpc::kMaxGraphTensors);
  for (size_t i = 0; i * per <= rpc::kMaxRequestGraphTensors; ++i) {
    *batch.mutable_batch()->add_commands() = ComputeWithTensors(i + 1, per, 0);
  }
  EXPECT_EQ(Check(batch.SerializeAsString()).status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestPrecheckTest, GarbageIsLeftToTheParser) {
  EXPECT_TRUE(Check(std::string("\xff\xff\xff\xff\x0f\x01", 6)).status.ok());
  EXPECT_TRUE(Check("").status.ok());
}

}  // namespace
}  // namespace tg::server
