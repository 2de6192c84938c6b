// RpcCollectives against real rpc-servers on loopback (in-process, each exposing the CPU as
// two devices): over 2 and 3 servers x 2 devices, sizes on both sides of the ring/butterfly
// and direct thresholds, every device ends with the f64 sum of all inputs (to float rounding) and
// all with the same bits, through the servers (no tensor byte through the client, by ClientMetrics)
// and staged through the client (every byte counted); BF16 on the wire stays within BF16 rounding
// and bit-identical.
#include "client/rpc_collectives.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backends/register_builtin.h"
#include "client/client_metrics.h"
#include "client/client_testing.h"
#include "client/connection.h"
#include "client/remote_buffer.h"
#include "client/remote_device.h"
#include "core/context.h"
#include "core/lost_endpoint.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/rpc_server.h"
#include "server/service.h"
#include "tests/lib/test_util.h"

namespace tg::rpc {
namespace {

class RpcCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(RegisterBuiltinBackends().ok()); }
  // One server of `minor` with the CPU as two devices.
  void StartOlder(uint32_t minor) {
    Device* cpu = Registry::Get().CpuDevice();
    servers_.StartOlder({cpu, cpu}, minor);
  }
  // `servers` servers with the CPU as two devices each.
  void Start(int servers) {
    Device* cpu = Registry::Get().CpuDevice();
    for (int s = 0; s < servers; ++s) servers_.Start({cpu, cpu});
  }

  void TearDown() override {
    buffers_.clear();
    servers_.Stop();
  }

  // One tensor of `count` f32 per device, at a non-zero offset of its buffer, filled with
  // RandomFloats(count, seed + device).
  std::vector<Tensor*> Tensors(size_t count, uint32_t seed, std::vector<std::vector<float>>* in) {
    std::vector<Tensor*> out;
    for (size_t d = 0; d < devices_.size(); ++d) {
      Tensor* t = *ctx_.NewTensor(DType::kF32, {static_cast<int64_t>(count)});
      auto buffer = devices_[d]->default_buffer_type()->Allocate(t->NumBytes() + 256);
      EXPECT_TRUE(buffer.ok()) << buffer.status();
      EXPECT_TRUE(PlaceTensor(buffer->get(), t, 256).ok());
      in->push_back(tg::testing::RandomFloats(count, seed + static_cast<uint32_t>(d)));
      EXPECT_TRUE(t->buffer->SetTensor(t, in->back().data(), 0, t->NumBytes()).ok());
      buffers_.push_back(std::move(*buffer));
      out.push_back(t);
    }
    return out;
  }

  // Runs one all-reduce and checks every device's result against the f64 sum.
  void Check(RpcCollectiveOptions options, size_t count, bool want_on_servers) {
    SCOPED_TRACE(::testing::Message() << devices_.size() << " devices, " << count
                                      << " elements, bf16 " << options.bf16_wire);
    std::vector<std::vector<float>> in;
    std::vector<Tensor*> tensors = Tensors(count, 11, &in);
    RpcCollectives collectives(options);
    auto comm = collectives.Init(devices_);
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ(static_cast<RpcCommunicator*>(comm->get())->on_servers(), want_on_servers);
    ClientMetrics& m = ClientMetrics::Get();
    const uint64_t bytes_before = m.allreduce_client_bytes.load();
    ASSERT_TRUE((*comm)->AllReduce(tensors).ok());
    std::vector<std::vector<float>> out(tensors.size(), std::vector<float>(count));
    for (size_t d = 0; d < tensors.size(); ++d) {
      absl::Status s = tensors[d]->buffer->GetTensor(tensors[d], out[d].data(), 0, count * 4);
      ASSERT_TRUE(s.ok()) << s;
    }
    const uint64_t through_client = m.allreduce_client_bytes.load() - bytes_before;
    EXPECT_EQ(through_client, want_on_servers ? 0 : 2 * tensors.size() * count * 4);
    const double n = static_cast<double>(tensors.size());
    for (size_t i = 0; i < count; ++i) {
      double want = 0, scale = 0;
      for (const auto& v : in) {
        want += v[i];
        scale += std::fabs(v[i]);
      }
      const double tol = options.bf16_wire && count * 4 >= 64 * 1024
                             ? scale * n * std::ldexp(1.0, -8)
                             : scale * 1e-6 + 1e-7;
      ASSERT_NEAR(out[0][i], want, tol) << "element " << i;
      for (size_t d = 1; d < out.size(); ++d) {
        ASSERT_EQ(std::memcmp(&out[0][i], &out[d][i], 4), 0)
            << "device " << d << " element " << i << " differs from device 0";
      }
    }
  }

  Context ctx_;
  testing::LoopbackServers servers_;
  std::vector<Device*>& devices_ = servers_.devices();
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_F(RpcCollectivesTest, TwoServersSumOnTheServers) {
  Start(2);
  for (size_t count : {size_t{1}, size_t{288}, size_t{40000}}) Check({}, count, true);
}

TEST_F(RpcCollectivesTest, ThreeServersDirectAndRing) {
  Start(3);
  ASSERT_TRUE(UseDirectAllReduce(3, kProtocolMinor, 1000 * 4));
  ASSERT_FALSE(UseDirectAllReduce(3, kProtocolMinor, 70000 * 4));
  for (size_t count : {size_t{5}, size_t{1000}, size_t{70000}}) Check({}, count, true);
}

TEST(UseDirectAllReduceTest, SmallTensorsOnThreeServersOrMoreThatAllKnowIt) {
  EXPECT_FALSE(UseDirectAllReduce(2, kMinorDirectReduce, 8192));  // one step already.
  EXPECT_TRUE(UseDirectAllReduce(3, kMinorDirectReduce, 8192));
  EXPECT_TRUE(UseDirectAllReduce(3, kMinorDirectReduce, kDirectMaxSendBytes / 2));
  EXPECT_FALSE(UseDirectAllReduce(3, kMinorDirectReduce, kDirectMaxSendBytes / 2 + 4));
  EXPECT_TRUE(UseDirectAllReduce(9, kMinorDirectReduce, 8192));
  EXPECT_FALSE(UseDirectAllReduce(10, kMinorDirectReduce, 8192));
  // A server before DIRECT among them: the servers' own choice (AUTO).
  EXPECT_FALSE(UseDirectAllReduce(3, kMinorDirectReduce - 1, 8192));
}

TEST_F(RpcCollectivesTest, Bf16OnTheWireStaysBitIdentical) {
  Start(2);
  RpcCollectiveOptions o;
  o.bf16_wire = true;
  Check(o, 50000, true);
}

TEST_F(RpcCollectivesTest, StagedThroughTheClientCountsItsBytes) {
  Start(2);
  RpcCollectiveOptions o;
  o.route = AllReduceRoute::kClient;
  for (size_t count : {size_t{288}, size_t{300000}}) Check(o, count, false);
}

// A server before AllReduce (it would answer the command UNIMPLEMENTED) among the devices:
// the all-reduce is staged through the client, with the same sums.
TEST_F(RpcCollectivesTest, OlderServerGetsTheStagedPath) {
  Start(1);
  StartOlder(kMinorCollectives - 1);
  Check({}, 288, /*want_on_servers=*/false);
}

// The same for a server before PeerReduceStream, which its peers could not send pieces to.
TEST_F(RpcCollectivesTest, ServerBeforeReduceStreamsGetsTheStagedPath) {
  Start(1);
  StartOlder(kMinorReduceStream - 1);
  Check({}, 288, /*want_on_servers=*/false);
}

TEST_F(RpcCollectivesTest, OneServerSumsItsDevicesLocally) {
  Start(1);
  Check({}, 777, true);
}

// A server waiting for a peer's piece notices the peer is gone (its channel fails) and
// fails the command with "peer unreachable: ENDPOINT" within seconds, not after the minute
// a live but slow peer gets.
TEST_F(RpcCollectivesTest, PeerLostMidCollectiveFailsWithinSeconds) {
  Start(2);
  std::vector<std::vector<float>> in;
  std::vector<Tensor*> tensors = Tensors(16, 3, &in);
  auto* a = static_cast<RemoteBuffer*>(tensors[0]->buffer);
  auto* b = static_cast<RemoteBuffer*>(tensors[2]->buffer);
  absl::StatusOr<std::string> grant_a = a->connection()->PeerReadGrant(a->handle());
  absl::StatusOr<std::string> grant_b = b->connection()->PeerReadGrant(b->handle());
  ASSERT_TRUE(grant_a.ok() && grant_b.ok());
  // Rank 0's command only: rank 1 never sends its piece, and then its server goes away.
  tensorgrid::v1::SessionRequest request;
  tensorgrid::v1::AllReduce* ar = request.mutable_all_reduce();
  ar->set_collective(424242);
  ar->add_servers()->set_endpoint(a->connection()->endpoint());
  ar->mutable_servers(0)->set_grant(*grant_a);
  ar->add_servers()->set_endpoint(b->connection()->endpoint());
  ar->mutable_servers(1)->set_grant(*grant_b);
  ar->set_rank(0);
  tensorgrid::v1::CollectiveTensor* t = ar->add_tensors();
  t->set_device(0);
  t->set_buffer(a->handle());
  t->set_offset(a->OffsetOf(*tensors[0]));
  ar->set_count(16);
  ar->set_device(0);
  const std::string lost = b->connection()->endpoint();
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(300));
    servers_.server(1)->Shutdown(0);
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<tensorgrid::v1::SessionReply> reply = a->connection()->Call(request);
  const absl::Duration took = absl::Now() - start;
  killer.join();
  servers_.server(1).reset();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable) << reply.status();
  EXPECT_NE(reply.status().message().find("peer unreachable: " + lost), std::string::npos)
      << reply.status();
  // The server that answered is a's; the one its error reports lost, typed, is b's.
  EXPECT_EQ(LostEndpoint(reply.status()), lost) << reply.status();
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(RpcCollectiveOptionsTest, EnvironmentValues) {
  EXPECT_EQ(ParseCollectiveOptions(nullptr, nullptr)->route, AllReduceRoute::kServers);
  EXPECT_EQ(ParseCollectiveOptions("client", nullptr)->route, AllReduceRoute::kClient);
  EXPECT_TRUE(ParseCollectiveOptions("servers", "1")->bf16_wire);
  const absl::Status bad = ParseCollectiveOptions("host", nullptr).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("'host'"), std::string::npos) << bad;
  EXPECT_FALSE(ParseCollectiveOptions(nullptr, "yes").ok());
}

}  // namespace
}  // namespace tg::rpc
