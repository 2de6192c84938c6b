// Connection against a real rpc-server on loopback: inline outputs that hold until a later
// write (through RemoteStream and RemoteBuffer, the way the scheduler uses them), the
// peer-grant cache, messages above gRPC's default limit, uploads ordered after posted
// commands, and an unreachable endpoint.
#include "client/connection.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/client_testing.h"
#include "client/remote_device.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/server_testing.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;
using server::testing::AllocRequest;
using server::testing::ReadRequest;
using server::testing::WriteRequest;
using ::testing::Each;
using ::testing::ElementsAreArray;

class ConnectionTest : public testing::LoopbackServerTest {
 protected:
  uint64_t Alloc(Connection& c, uint64_t size) {
    auto reply = c.Call(AllocRequest(0, 0, size));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? reply->alloc_buffer().buffer() : 0;
  }
};

// c = a + b on the server's CPU, its result flagged as an output (it comes back inline).
class InlineOutputTest : public ConnectionTest {
 protected:
  void SetUp() override {
    ConnectionTest::SetUp();
    ASSERT_FALSE(HasFatalFailure());
    std::unique_ptr<Connection> connection = Connect();
    ASSERT_NE(connection, nullptr);
    connection_ = connection.get();
    family_ = std::make_unique<RemoteFamily>(std::move(connection));
    Device* remote = family_->devices().at(0);
    stream_ = *remote->CreateStream();
    a_ = *ctx_.NewTensor(DType::kF32, {4});
    b_ = *ctx_.NewTensor(DType::kF32, {4});
    a_->flags |= kFlagInput;
    b_->flags |= kFlagInput;
    c_ = *Add(ctx_, a_, b_);
    graph_ = *BuildGraph({c_});
    allocator_ = std::make_unique<GraphAllocator>(remote->default_buffer_type());
    ASSERT_TRUE(allocator_->Allocate(graph_).ok());
    ASSERT_TRUE(stream_->SetTensorAsync(a_, a1_.data(), 0, 16).ok());
    ASSERT_TRUE(stream_->SetTensorAsync(b_, b1_.data(), 0, 16).ok());
  }

  void TearDown() override {
    allocator_.reset();
    stream_.reset();
    family_.reset();
    ConnectionTest::TearDown();
  }

  std::vector<float> ReadC() {
    std::vector<float> out(4, -1);
    EXPECT_TRUE(c_->buffer->GetTensor(c_, out.data(), 0, 16).ok());
    return out;
  }

  const std::vector<float> a1_ = {1, 2, 3, 4}, b1_ = {10, 20, 30, 40};
  const std::vector<float> sum_ = {11, 22, 33, 44};
  Connection* connection_ = nullptr;
  std::unique_ptr<RemoteFamily> family_;
  std::unique_ptr<Stream> stream_;
  Context ctx_;
  Tensor *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
  Graph graph_;
  std::unique_ptr<GraphAllocator> allocator_;
};

TEST_F(InlineOutputTest, AComputesOutputIsReadWithoutARoundTrip) {
  ASSERT_TRUE(stream_->Compute(graph_).ok());
  ASSERT_TRUE(connection_->Drain().ok());
  const uint64_t sent = connection_->last_sent_id();
  EXPECT_THAT(ReadC(), ElementsAreArray(sum_));
  EXPECT_EQ(connection_->last_sent_id(), sent);  // no Read command went out.
}

// The Compute's reply is read only after the Memset was sent: its bytes are stale by then.
TEST_F(InlineOutputTest, AComputesOutputIsStaleAfterALaterPostedWrite) {
  ASSERT_TRUE(stream_->Compute(graph_).ok());
  ASSERT_TRUE(c_->buffer->MemsetTensor(c_, 0, 0, 16).ok());
  EXPECT_THAT(ReadC(), Each(0.0f));
}

TEST_F(InlineOutputTest, AComputesOutputIsStaleAfterALaterQueuedWrite) {
  ASSERT_TRUE(stream_->Compute(graph_).ok());
  const std::vector<float> written = {-1, -2, -3, -4};
  ASSERT_TRUE(c_->buffer->SetTensor(c_, written.data(), 0, 16).ok());  // a queued write.
  EXPECT_THAT(ReadC(), ElementsAreArray(written));
}

TEST_F(InlineOutputTest, AFreedBuffersOutputsAreForgotten) {
  ASSERT_TRUE(stream_->Compute(graph_).ok());
  ASSERT_TRUE(connection_->Drain().ok());
  auto* buffer = dynamic_cast<RemoteBuffer*>(c_->buffer);
  ASSERT_NE(buffer, nullptr);
  const uint64_t at = buffer->OffsetOf(*c_);
  float got[4];
  EXPECT_TRUE(connection_->inline_outputs().Read(buffer->handle(), at, got, 16));
  connection_->ForgetBuffer(buffer->handle());
  EXPECT_FALSE(connection_->inline_outputs().Read(buffer->handle(), at, got, 16));
}

TEST_F(ConnectionTest, APeerReadGrantIsAskedForOncePerBuffer) {
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  const uint64_t buffer = Alloc(*c, 64);
  auto grant = c->PeerReadGrant(buffer);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_FALSE(grant->empty());
  const uint64_t sent = c->last_sent_id();
  auto again = c->PeerReadGrant(buffer);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *grant);
  EXPECT_EQ(c->last_sent_id(), sent);  // from the cache.
  c->ForgetBuffer(buffer);
  ASSERT_TRUE(c->PeerReadGrant(buffer).ok());
  EXPECT_EQ(c->last_sent_id(), sent + 1);  // asked again.
  EXPECT_TRUE(absl::IsNotFound(c->PeerReadGrant(0x1234).status()));
}

// gRPC's default receive limit is 4 MiB; the protocol's inline limit is above it.
TEST_F(ConnectionTest, InlineMessagesAboveGrpcsDefaultLimitGetThrough) {
  static_assert(kMaxInlineBytes > (size_t{4} << 20) + 4096);
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  const size_t size = (size_t{4} << 20) + 4096;
  const uint64_t buffer = Alloc(*c, size);
  std::string bytes(size, 0);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 7 + i / 4096);
  ASSERT_TRUE(c->Call(WriteRequest(0, buffer, 0, bytes)).ok());
  auto read = c->Call(ReadRequest(0, buffer, 0, size));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->read().data() == bytes);
}

// A Clear posted before an Upload of the same bytes must not land after them.
TEST_F(ConnectionTest, AnUploadLandsAfterTheCommandsPostedBeforeIt) {
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  const size_t size = size_t{3} << 20;
  const uint64_t buffer = Alloc(*c, size);
  std::string bytes(size, 0);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i % 251);
  for (bool cacheable : {false, true}) {
    pb::SessionRequest clear;
    clear.mutable_clear_buffer()->set_buffer(buffer);
    clear.mutable_clear_buffer()->set_value(0x55);
    // Held in a batch, the Clear would go out only with the Download's drain if the Upload
    // did not send it and wait for it first.
    c->BeginBatch();
    ASSERT_TRUE(c->Post(clear).ok());
    ASSERT_TRUE(c->Upload(buffer, 0, bytes.data(), size, cacheable).ok());
    std::string back(size, 0);
    ASSERT_TRUE(c->Download(buffer, 0, back.data(), size).ok());
    ASSERT_TRUE(c->EndBatch().ok());
    EXPECT_TRUE(back == bytes) << "cacheable " << cacheable;
  }
}

TEST_F(ConnectionTest, AnUnreachableServerIsUnavailableAndNamed) {
  const std::string endpoint = server_->address();
  server_->Shutdown(0);
  ClientOptions options;
  options.progress = false;
  auto c = Connection::Open(endpoint, options);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsUnavailable(c.status())) << c.status();
  EXPECT_NE(c.status().message().find(endpoint), std::string::npos) << c.status();
}

// A full server is reported as full, with its numbers (from the refusal's trailing
// metadata), not as a server that is gone.
TEST(ConnectionFullServerTest, AFullServerSaysSoWithItsNumbers) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  server::ServerConfig config;
  config.port = 0;
  config.max_sessions = 1;
  config.devices = {Registry::Get().CpuDevice()};
  auto server = server::RpcServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions options;
  options.progress = false;
  auto first = Connection::Open((*server)->address(), options);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Connection::Open((*server)->address(), options);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  const std::string message(second.status().message());
  EXPECT_THAT(message,
              ::testing::HasSubstr(absl::StrCat("server ", (*server)->address(),
                                                " is full (1 sessions, --max-sessions 1)")));
  EXPECT_THAT(message, ::testing::Not(::testing::HasSubstr("is gone")));
  first->reset();
  (*server)->Shutdown(0);
}

}  // namespace
}  // namespace tg::rpc
