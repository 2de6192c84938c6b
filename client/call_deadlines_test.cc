// CallDeadlines' arithmetic, and the deadlines at work against a real gRPC server that is
// stuck: it answers Hello and opens the session, then never answers a command or an upload
// while its process (and so keepalive) stays alive, as with a hung device or a full disk.
#include "client/call_deadlines.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "core/op.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

constexpr double kMiB = 1 << 20;

TEST(CallDeadlinesTest, AssumedSpeedUntilMeasured) {
  DeadlineAllowances a;
  a.base = absl::Seconds(2);
  a.compute = absl::Seconds(7);
  a.slack = 3;
  a.assumed_bytes_per_second = 1 * kMiB;
  CallDeadlines d(a);
  // 4 MiB at 1 MiB/s, three times over, after 2 s.
  EXPECT_EQ(d.ForTransfer(4 << 20), absl::Seconds(2 + 4 * 3));
  EXPECT_EQ(d.ForCommands(4 << 20), absl::Seconds(7 + 2 + 4 * 3));
  EXPECT_EQ(d.ForTransfer(0), absl::Seconds(2));
}

TEST(CallDeadlinesTest, MeasuredSpeedReplacesTheAssumption) {
  DeadlineAllowances a;
  a.base = absl::Seconds(1);
  a.slack = 2;
  a.assumed_bytes_per_second = 1 * kMiB;
  CallDeadlines d(a);
  d.RecordTransfer(1000, absl::Seconds(10));  // too small to say anything about the link.
  EXPECT_DOUBLE_EQ(d.bytes_per_second(), 1 * kMiB);
  d.RecordTransfer(64 << 20, absl::Seconds(1));  // 64 MiB/s.
  EXPECT_DOUBLE_EQ(d.bytes_per_second(), 64 * kMiB);
  EXPECT_EQ(d.ForTransfer(128 << 20), absl::Seconds(1 + 2 * 2));
  // A slower transfer moves the estimate a quarter of the way (64 -> 64 - 0.25 * 32).
  d.RecordTransfer(32 << 20, absl::Seconds(1));
  EXPECT_DOUBLE_EQ(d.bytes_per_second(), 56 * kMiB);
}

// Answers Hello and Session's Started; then reads and never answers.
class StuckServer final : public pb::TensorGrid::Service {
 public:
  grpc::Status Hello(grpc::ServerContext*, const pb::HelloRequest*,
                     pb::HelloReply* reply) override {
    reply->set_protocol_version(kProtocolVersion);
    reply->set_op_table_fingerprint(OpTableFingerprint());
    return grpc::Status::OK;
  }
  grpc::Status Session(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<pb::SessionReply, pb::SessionRequest>* stream) override {
    pb::SessionReply started;
    started.mutable_started()->set_session_id("stuck");
    stream->Write(started);
    pb::SessionRequest request;
    while (stream->Read(&request)) {
    }
    return grpc::Status::OK;
  }
  grpc::Status Upload(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<pb::UploadReply, pb::UploadMessage>* stream) override {
    pb::UploadMessage message;
    while (stream->Read(&message)) {
    }
    return grpc::Status::OK;
  }
};

class StuckServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    // Keepalive pings answered as rpc-server answers them (server/rpc_server.cc): the
    // connection stays up, so only the deadline can end the wait.
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    endpoint_ = absl::StrCat("127.0.0.1:", port_);
  }
  void TearDown() override { server_->Shutdown(absl::ToChronoTime(absl::Now())); }

  std::unique_ptr<Connection> Connect(absl::Duration base, absl::Duration compute) {
    ClientOptions options;
    options.progress = false;
    options.deadlines.base = base;
    options.deadlines.compute = compute;
    auto c = Connection::Open(endpoint_, options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  StuckServer service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string endpoint_;
};

// Its allowance, plus the time a loaded test machine may take to cancel and return.
constexpr absl::Duration kCancelGrace = absl::Seconds(3);

TEST_F(StuckServerTest, SessionCommandFailsAtItsDeadline) {
  auto c = Connect(absl::Seconds(1), absl::Seconds(1));
  ASSERT_NE(c, nullptr);
  pb::SessionRequest request;
  request.mutable_alloc_buffer()->set_size(64);
  const absl::Duration limit = c->deadlines().ForCommands(request.ByteSizeLong() + 8);
  const absl::Time start = absl::Now();
  auto reply = c->Call(request);
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDeadlineExceeded) << reply.status();
  EXPECT_NE(reply.status().message().find(endpoint_), std::string::npos) << reply.status();
  EXPECT_NE(reply.status().message().find("stalled"), std::string::npos) << reply.status();
  EXPECT_GE(took, absl::Seconds(2) - absl::Milliseconds(50));  // not before its deadline.
  EXPECT_LE(took, limit + kCancelGrace);
  // The channel stays broken with the same error; it does not wait again.
  const absl::Time again = absl::Now();
  EXPECT_EQ(c->Call(request).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LE(absl::Now() - again, absl::Milliseconds(500));
}

TEST_F(StuckServerTest, UploadFailsAtItsDeadline) {
  auto c = Connect(absl::Seconds(1), absl::Seconds(60));
  ASSERT_NE(c, nullptr);
  const std::string bytes(1 << 20, 'x');
  // 1 s + 1 MiB at the assumed 1 MiB/s times 4: 5 s; far below the compute allowance.
  const absl::Duration limit = c->deadlines().ForTransfer(bytes.size());
  ASSERT_LT(limit, absl::Seconds(10));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(c->Upload(1, 0, bytes.data(), bytes.size(), false).ok());
  const absl::Status s = c->WaitUploads();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find(endpoint_), std::string::npos) << s;
  EXPECT_GE(took, limit - absl::Milliseconds(50));
  EXPECT_LE(took, limit + kCancelGrace);
}

}  // namespace
}  // namespace tg::rpc
