// CollectiveRunner through a Session (no transport): every malformed AllReduce is refused
// naming what is wrong, before anything is read, written or sent; a grant of another
// session is PERMISSION_DENIED; a peer outside --peers is PERMISSION_DENIED before any
// connection; one server's part alone sums its two devices (the sum a loop here makes) into
// both, once for the two commands of the collective; PeerReduce takes only this server's
// grants and pieces of at most one chunk.
#include "server/collective_runner.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/grant_table.h"
#include "server/peer_client.h"
#include "server/server_test_util.h"
#include "server/session.h"

namespace tg::server {
namespace {

using testing::AllocRequest;
using testing::Bytes;
using testing::Floats;
using testing::ReadRequest;
using testing::ToFloats;
using testing::WriteRequest;
namespace pb = ::tensorgrid::v1;

constexpr uint64_t kCount = 40;

class CollectiveRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::TwoCpuDevices();
    ASSERT_EQ(devices_.size(), 2u);
    PeerClientOptions peer;
    auto allowed = PeerAllowList::Parse("127.0.0.1:1");  // nothing that listens.
    ASSERT_TRUE(allowed.ok()) << allowed.status();
    peer.allowed = *allowed;
    peers_ = std::make_unique<PeerClient>(peer);
    runner_ = std::make_unique<CollectiveRunner>(peers_.get(), &grants_, nullptr);
    session_ = NewSession("s1");
    for (uint32_t d = 0; d < 2; ++d) {
      buffers_.push_back(Alloc(*session_, d));
      in_.push_back(Floats(kCount, 7 + d));
      ASSERT_EQ(session_->Handle(WriteRequest(1, buffers_[d], 16, Bytes(in_[d]))).code(), 0);
    }
  }

  std::unique_ptr<Session> NewSession(const std::string& id) {
    SessionEnv env;
    env.devices = devices_;
    env.grants = &grants_;
    env.peers = peers_.get();
    env.collectives = runner_.get();
    return std::make_unique<Session>(id, std::move(env));
  }

  uint64_t Alloc(Session& s, uint32_t device) {
    pb::SessionReply r = s.Handle(AllocRequest(1, device, 16 + kCount * 4));
    EXPECT_EQ(r.code(), 0) << r.message();
    return r.alloc_buffer().buffer();
  }

  std::string GrantOf(Session& s, uint64_t buffer) {
    pb::SessionRequest r;
    r.set_id(1);
    r.mutable_grant_peer_read()->set_buffer(buffer);
    return s.Handle(r).grant().grant();
  }

  // The command for device `device` of a one-server collective over both buffers.
  pb::SessionRequest Command(uint32_t device) {
    pb::SessionRequest r;
    r.set_id(2);
    pb::AllReduce* a = r.mutable_all_reduce();
    a->set_collective(9);
    a->add_servers()->set_endpoint("127.0.0.1:50052");
    a->set_rank(0);
    for (uint32_t d = 0; d < 2; ++d) {
      pb::CollectiveTensor* t = a->add_tensors();
      t->set_device(d);
      t->set_buffer(buffers_[d]);
      t->set_offset(16);
    }
    a->set_count(kCount);
    a->set_device(device);
    return r;
  }

  std::vector<float> Read(uint32_t d) {
    return ToFloats(session_->Handle(ReadRequest(1, buffers_[d], 16, kCount * 4)).read().data());
  }

  std::vector<Device*> devices_;
  GrantTable grants_;
  std::unique_ptr<PeerClient> peers_;
  std::unique_ptr<CollectiveRunner> runner_;
  std::unique_ptr<Session> session_;
  std::vector<uint64_t> buffers_;
  std::vector<std::vector<float>> in_;
};

TEST_F(CollectiveRunnerTest, OneServerSumsItsDevicesIntoBoth) {
  for (uint32_t d = 0; d < 2; ++d) {
    pb::SessionReply r = session_->Handle(Command(d));
    ASSERT_EQ(r.code(), 0) << r.message();
  }
  for (uint32_t d = 0; d < 2; ++d) {
    const std::vector<float> got = Read(d);
    ASSERT_EQ(got.size(), kCount);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(got[i], in_[0][i] + in_[1][i]) << i;
  }
}

TEST_F(CollectiveRunnerTest, MalformedCommandsAreRefusedNamingTheValue) {
  struct Case {
    const char* what;
    std::function<void(pb::AllReduce*)> edit;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"no servers", [](pb::AllReduce* a) { a->clear_servers(); }, "over 0 servers"},
      {"rank past the servers", [](pb::AllReduce* a) { a->set_rank(1); }, "rank 1 of 1"},
      {"no tensors", [](pb::AllReduce* a) { a->clear_tensors(); }, "0 tensors"},
      {"no elements", [](pb::AllReduce* a) { a->set_count(0); }, "of 0 f32 elements"},
      {"too many elements",
       [](pb::AllReduce* a) { a->set_count(CollectiveRunner::kMaxBytes / 4 + 1); },
       "f32 elements (1 to"},
      {"range past the buffer", [](pb::AllReduce* a) { a->set_count(kCount + 1); }, "bytes"},
      {"buffer of another device", [](pb::AllReduce* a) { a->mutable_tensors(1)->set_device(0); },
       "is on device 1, not 0"},
      {"unknown buffer", [](pb::AllReduce* a) { a->mutable_tensors(0)->set_buffer(12345); },
       "no buffer with handle"},
      {"command for a device not listed", [](pb::AllReduce* a) { a->set_device(5); },
       "for device 5 lists no tensor"},
      {"unknown algorithm",
       [](pb::AllReduce* a) { a->set_algorithm(static_cast<pb::AllReduce::Algorithm>(77)); },
       "all_reduce.algorithm 77 is not one of AUTO (0), RING (1), BUTTERFLY (2)"},
  };
  for (const Case& c : cases) {
    pb::SessionRequest r = Command(0);
    r.mutable_all_reduce()->set_collective(100 + (&c - cases.data()));
    c.edit(r.mutable_all_reduce());
    pb::SessionReply reply = session_->Handle(r);
    EXPECT_NE(reply.code(), 0) << c.what;
    EXPECT_NE(reply.message().find(c.says), std::string::npos) << c.what << ": " << reply.message();
  }
  EXPECT_EQ(Read(0), in_[0]);  // nothing written.
}

TEST_F(CollectiveRunnerTest, UnknownAlgorithmIsInvalidArgumentAndRunsNothing) {
  pb::SessionRequest r = Command(0);
  r.mutable_all_reduce()->set_algorithm(static_cast<pb::AllReduce::Algorithm>(77));
  pb::SessionReply reply = session_->Handle(r);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << reply.message();
  EXPECT_NE(reply.message().find("algorithm 77"), std::string::npos) << reply.message();
  EXPECT_EQ(Read(0), in_[0]);
  EXPECT_EQ(Read(1), in_[1]);
}

TEST_F(CollectiveRunnerTest, GrantOfAnotherSessionIsRefused) {
  std::unique_ptr<Session> other = NewSession("s2");
  const std::string foreign = GrantOf(*other, Alloc(*other, 0));
  pb::SessionRequest r = Command(0);
  pb::AllReduce* a = r.mutable_all_reduce();
  a->mutable_servers(0)->set_grant(foreign);
  a->add_servers()->set_endpoint("127.0.0.1:1");
  pb::SessionReply reply = session_->Handle(r);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kPermissionDenied)) << reply.message();
  EXPECT_NE(reply.message().find("not this session's grant"), std::string::npos) << reply.message();
}

TEST_F(CollectiveRunnerTest, PeerOutsideTheAllowListIsRefusedBeforeAnyConnection) {
  pb::SessionRequest r = Command(0);
  pb::AllReduce* a = r.mutable_all_reduce();
  a->mutable_servers(0)->set_grant(GrantOf(*session_, buffers_[0]));
  a->add_servers()->set_endpoint("127.0.0.1:2");
  pb::SessionReply reply = session_->Handle(r);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kPermissionDenied)) << reply.message();
  EXPECT_NE(reply.message().find("127.0.0.1:2"), std::string::npos) << reply.message();
  EXPECT_EQ(Read(0), in_[0]);
}

TEST_F(CollectiveRunnerTest, PeerReduceTakesOnlyThisServersGrantsAndOneChunk) {
  pb::PeerReduceRequest req;
  req.set_grant("not-a-grant");
  EXPECT_EQ(runner_->Receive(req).code(), absl::StatusCode::kNotFound);
  req.set_grant(GrantOf(*session_, buffers_[0]));
  req.set_data(std::string(rpc::kChunkBytes + 1, 'x'));
  EXPECT_EQ(runner_->Receive(req).code(), absl::StatusCode::kInvalidArgument);
  req.set_data("abcd");
  EXPECT_TRUE(runner_->Receive(req).ok());
  EXPECT_EQ(runner_->held_bytes(), 4u);
}

}  // namespace
}  // namespace tg::server
