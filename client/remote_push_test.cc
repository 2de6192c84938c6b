// RemoteStream::PushTensorAsync between real rpc-servers on loopback (in-process, one CPU
// device each): the bytes reach the destination tensor, several pushes of one boundary go
// together, a push needs protocol minor 5 on both servers (UNIMPLEMENTED otherwise, so the
// scheduler pulls instead), and a push to a server that is gone is an error naming it at the
// source's next wait, never a hang.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "backends/register_builtin.h"
#include "client/client_testing.h"
#include "client/connection.h"
#include "client/remote_device.h"
#include "client/remote_stream.h"
#include "core/context.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/rpc_server.h"
#include "server/service.h"
#include "tests/lib/test_util.h"

namespace tg::rpc {
namespace {

class RemotePushTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(RegisterBuiltinBackends().ok()); }

  void TearDown() override {
    streams_.clear();
    buffers_.clear();
    servers_.Stop();
  }

  // A server with one CPU device, and a stream on it.
  void StartServer() {
    servers_.Start({Registry::Get().CpuDevice()});
    streams_.push_back(*servers_.devices().back()->CreateStream());
  }
  // The same, of the minor before pushes.
  void StartOlderServer() {
    servers_.StartOlder({Registry::Get().CpuDevice()}, kMinorPush - 1);
    streams_.push_back(*servers_.devices().back()->CreateStream());
  }

  // `count` f32 on device d, 256 bytes into its own buffer.
  Tensor* NewTensor(size_t d, int64_t count) {
    Tensor* t = *ctx_.NewTensor(DType::kF32, {count});
    auto buffer = servers_.devices()[d]->default_buffer_type()->Allocate(t->NumBytes() + 256);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_TRUE(PlaceTensor(buffer->get(), t, 256).ok());
    buffers_.push_back(std::move(*buffer));
    return t;
  }

  static void Write(Tensor* t, const std::vector<float>& v) {
    ASSERT_TRUE(t->buffer->SetTensor(t, v.data(), 0, t->NumBytes()).ok());
  }
  static std::vector<float> Read(const Tensor* t) {
    std::vector<float> v(t->NumElements());
    absl::Status s = t->buffer->GetTensor(t, v.data(), 0, t->NumBytes());
    EXPECT_TRUE(s.ok()) << s;
    return v;
  }

  Context ctx_;
  testing::LoopbackServers servers_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

TEST_F(RemotePushTest, PushesOfOneBoundaryReachTheDestination) {
  StartServer();
  StartServer();
  const std::vector<float> a = tg::testing::RandomFloats(1000, 1);
  const std::vector<float> b = tg::testing::RandomFloats(7, 2);
  Tensor* src_a = NewTensor(0, 1000);
  Tensor* src_b = NewTensor(0, 7);
  Tensor* dst_a = NewTensor(1, 1000);
  Tensor* dst_b = NewTensor(1, 7);
  Write(src_a, a);
  Write(src_b, b);
  ASSERT_TRUE(streams_[0]->PushTensorAsync(src_a, streams_[1].get(), dst_a).ok());
  ASSERT_TRUE(streams_[0]->PushTensorAsync(src_b, streams_[1].get(), dst_b).ok());
  // The destination's stream sends the held push and waits for its awaits.
  ASSERT_TRUE(streams_[1]->Synchronize().ok());
  EXPECT_EQ(Read(dst_a), a);
  EXPECT_EQ(Read(dst_b), b);
  ASSERT_TRUE(streams_[0]->Synchronize().ok());
  // A push into a tensor of another size, or within one server, is not one.
  EXPECT_FALSE(streams_[0]->PushTensorAsync(src_a, streams_[1].get(), dst_b).ok());
  EXPECT_TRUE(absl::IsUnimplemented(
      streams_[0]->PushTensorAsync(src_a, streams_[0].get(), NewTensor(0, 1000))));
  // Too large for one message to the peer: the caller pulls it instead.
  Tensor* big_src = NewTensor(0, kMaxPushBytes / sizeof(float) + 1);
  Tensor* big_dst = NewTensor(1, kMaxPushBytes / sizeof(float) + 1);
  EXPECT_TRUE(
      absl::IsUnimplemented(streams_[0]->PushTensorAsync(big_src, streams_[1].get(), big_dst)));
}

TEST_F(RemotePushTest, AServerBeforePushesIsNotPushedTo) {
  StartServer();
  StartOlderServer();
  Tensor* src = NewTensor(0, 16);
  Tensor* dst = NewTensor(1, 16);
  EXPECT_TRUE(absl::IsUnimplemented(streams_[0]->PushTensorAsync(src, streams_[1].get(), dst)));
  EXPECT_TRUE(absl::IsUnimplemented(streams_[1]->PushTensorAsync(dst, streams_[0].get(), src)));
}

TEST_F(RemotePushTest, APushToAServerThatIsGoneFailsAtTheSourcesWait) {
  StartServer();
  StartServer();
  Tensor* src = NewTensor(0, 16);
  Tensor* dst = NewTensor(1, 16);
  Write(src, tg::testing::RandomFloats(16, 3));
  const std::string gone = servers_.server(1)->address();
  ASSERT_TRUE(streams_[0]->PushTensorAsync(src, streams_[1].get(), dst).ok());
  servers_.server(1)->Shutdown(0);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = streams_[0]->Synchronize();
  // The source's "peer unreachable", or the client's own channel to the destination failing
  // first: either way an error naming the server that is gone.
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), gone)) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace tg::rpc
