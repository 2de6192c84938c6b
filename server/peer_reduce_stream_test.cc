// PeerReduceStream against a real rpc-server on loopback (in-process): a piece the peer
// refuses ends the stream with the peer's own error, which every later Send returns; a peer
// that cannot be reached is "peer unreachable: ENDPOINT"; a stream is closed at once, with
// pieces in flight or none. (Pieces a peer takes are checked end to end by
// tests/rpc/remote_tensor_split_test.cc, where the servers' all-reduce needs them.)
#include "server/peer_reduce_stream.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/grpc_channel.h"
#include "server/rpc_server.h"
#include "server/server_testing.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

pb::PeerReduceRequest Piece(const std::string& grant, uint32_t part) {
  pb::PeerReduceRequest r;
  r.set_grant(grant);
  r.set_collective(1);
  r.set_part(part);
  r.set_data(std::string(64, 'x'));
  return r;
}

// Waits up to 10 s for the stream to end; its status then.
absl::Status EndOf(const PeerReduceStream& stream) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (stream.status().ok() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  return stream.status();
}

// A loopback port nothing listens on (bound, then closed).
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

class PeerReduceStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config;
    config.port = 0;
    config.devices = testing::TwoCpuDevices();
    auto server = RpcServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  std::unique_ptr<PeerReduceStream> Open(const std::string& endpoint) {
    return std::make_unique<PeerReduceStream>(rpc::NewChannel(endpoint, {}), endpoint);
  }

  std::unique_ptr<RpcServer> server_;
};

TEST_F(PeerReduceStreamTest, RefusedPieceEndsTheStreamWithThePeersError) {
  std::unique_ptr<PeerReduceStream> stream = Open(server_->address());
  EXPECT_TRUE(stream->status().ok());
  EXPECT_FALSE(stream->ended());
  // Queued without waiting; the peer knows no such grant and ends the call.
  ASSERT_TRUE(stream->Send(Piece(std::string(32, '0'), 0)).ok());
  const absl::Status ended = EndOf(*stream);
  EXPECT_EQ(ended.code(), absl::StatusCode::kNotFound) << ended;
  EXPECT_NE(ended.message().find("peer_reduce from " + server_->address()), std::string::npos)
      << ended;
  EXPECT_NE(ended.message().find("unknown or revoked grant"), std::string::npos) << ended;
  EXPECT_TRUE(stream->ended());
  EXPECT_EQ(stream->Send(Piece(std::string(32, '0'), 1)), ended);
}

TEST_F(PeerReduceStreamTest, UnreachablePeerIsPeerUnreachable) {
  const int port = ClosedPort();
  ASSERT_NE(port, 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  std::unique_ptr<PeerReduceStream> stream = Open(endpoint);
  (void)stream->Send(Piece("g", 0));  // fails now or later, the same way.
  const absl::Status ended = EndOf(*stream);
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnavailable) << ended;
  EXPECT_EQ(ended.message(), "peer unreachable: " + endpoint);
}

TEST_F(PeerReduceStreamTest, ClosesAtOnceWithPiecesInFlightOrNone) {
  for (int pieces : {0, 1000}) {
    std::unique_ptr<PeerReduceStream> stream = Open(server_->address());
    for (int i = 0; i < pieces; ++i) (void)stream->Send(Piece(std::string(32, '1'), i));
    const auto start = std::chrono::steady_clock::now();
    stream.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2)) << pieces;
  }
  // The server took no harm: a new stream is open and refuses as before.
  std::unique_ptr<PeerReduceStream> stream = Open(server_->address());
  ASSERT_TRUE(stream->Send(Piece(std::string(32, '0'), 0)).ok());
  EXPECT_EQ(EndOf(*stream).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tg::server
