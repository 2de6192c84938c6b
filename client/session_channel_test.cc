// SessionChannel against a real rpc-server on loopback: replies in order, errors that reach
// only the waits at or after their command, batches held until they end, fill up or are
// waited for, queued writes riding along, posts beside a thread waiting for a reply, and the
// broken state. What the server holds is read over a separate Download stream, so it shows
// what was sent without a wait on the channel sending it.
#include "client/session_channel.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client_testing.h"
#include "core/lost_endpoint.h"
#include "gtest/gtest.h"
#include "proto/grpc_channel.h"
#include "server/server_testing.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;
using server::testing::AllocRequest;
using server::testing::ReadRequest;
using server::testing::RowsCompute;
using server::testing::WriteRequest;

constexpr uint64_t kBufferBytes = 8 << 20;
constexpr uint64_t kNoSuchBuffer = 0x1234;
// A held command is not on the server within this (it never gets there); one that was sent
// gets there well within kArrival.
constexpr absl::Duration kHeld = absl::Milliseconds(200);
constexpr absl::Duration kArrival = absl::Seconds(20);

class SessionChannelTest : public testing::LoopbackServerTest {
 protected:
  void SetUp() override {
    LoopbackServerTest::SetUp();
    ASSERT_FALSE(HasFatalFailure());
    stub_ = pb::TensorGrid::NewStub(NewChannel(server_->address(), {}));
    auto channel =
        SessionChannel::Open(*stub_, std::make_unique<grpc::ClientContext>(), server_->address());
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = std::move(*channel);
    auto alloc = channel_->Call(AllocRequest(0, 0, kBufferBytes));
    ASSERT_TRUE(alloc.ok()) << alloc.status();
    buffer_ = alloc->alloc_buffer().buffer();
    ASSERT_TRUE(channel_->Call(WriteRequest(0, buffer_, 0, std::string(64, '-'))).ok());
  }

  void TearDown() override {
    channel_.reset();
    LoopbackServerTest::TearDown();
  }

  // The buffer's bytes on the server now, over a Download stream (not the channel).
  std::string OnServer(uint64_t offset, uint64_t size) {
    grpc::ClientContext context;
    pb::DownloadRequest request;
    request.set_session_id(channel_->session_id());
    request.mutable_range()->set_buffer(buffer_);
    request.mutable_range()->set_offset(offset);
    request.mutable_range()->set_size(size);
    auto stream = stub_->Download(&context, request);
    std::string out;
    pb::DataChunk chunk;
    while (stream->Read(&chunk)) out += chunk.data();
    EXPECT_TRUE(stream->Finish().ok());
    return out;
  }

  // True once [offset, +want.size()) holds `want` on the server (false after kArrival).
  bool Arrives(uint64_t offset, const std::string& want) {
    const absl::Time deadline = absl::Now() + kArrival;
    while (absl::Now() < deadline) {
      if (OnServer(offset, want.size()) == want) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  // Posts a read of [offset, +size) whose reply lands in *out.
  uint64_t PostRead(uint64_t offset, uint64_t size, std::string* out) {
    uint64_t id = 0;
    EXPECT_TRUE(channel_
                    ->Post(
                        ReadRequest(0, buffer_, offset, size),
                        [out](pb::SessionReply& r) {
                          *out = r.read().data();
                          return absl::OkStatus();
                        },
                        &id)
                    .ok());
    return id;
  }

  uint64_t PostBadRead() {
    uint64_t id = 0;
    EXPECT_TRUE(channel_->Post(ReadRequest(0, kNoSuchBuffer, 0, 4), nullptr, &id).ok());
    return id;
  }

  std::unique_ptr<pb::TensorGrid::Stub> stub_;
  std::unique_ptr<SessionChannel> channel_;
  uint64_t buffer_ = 0;
};

TEST_F(SessionChannelTest, PostedCommandsAreAnsweredInOrder) {
  std::vector<uint64_t> handled;
  const uint64_t before = channel_->last_sent_id();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(channel_
                    ->Post(WriteRequest(0, buffer_, i, std::string(1, 'a' + i)),
                           [&handled](pb::SessionReply& r) {
                             handled.push_back(r.id());
                             return absl::OkStatus();
                           })
                    .ok());
  }
  std::string read;
  const uint64_t read_id = PostRead(0, 5, &read);
  EXPECT_EQ(read_id, before + 6);
  EXPECT_EQ(channel_->last_sent_id(), read_id);
  EXPECT_TRUE(handled.empty());  // replies are read by a wait, not by Post.
  ASSERT_TRUE(channel_->Drain().ok());
  EXPECT_EQ(handled,
            (std::vector<uint64_t>{before + 1, before + 2, before + 3, before + 4, before + 5}));
  EXPECT_EQ(read, "abcde");
}

TEST_F(SessionChannelTest, AnEarlierPostedErrorWinsInCallAndTheStreamStaysInStep) {
  PostBadRead();
  auto call = channel_->Call(ReadRequest(0, buffer_, 0, 4));
  EXPECT_TRUE(absl::IsNotFound(call.status())) << call.status();
  EXPECT_NE(call.status().message().find(server_->address()), std::string::npos) << call.status();
  call = channel_->Call(ReadRequest(0, buffer_, 0, 4));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->read().data(), "----");
  EXPECT_TRUE(absl::IsNotFound(channel_->Call(ReadRequest(0, kNoSuchBuffer, 0, 4)).status()));
}

TEST_F(SessionChannelTest, AnErrorReachesOnlyTheWaitsAtOrAfterItsCommand) {
  std::string a, c;
  const uint64_t good = PostRead(0, 2, &a);
  const uint64_t bad = PostBadRead();
  const uint64_t later = PostRead(2, 2, &c);
  EXPECT_TRUE(channel_->WaitFor(good).ok());
  EXPECT_EQ(a, "--");
  EXPECT_TRUE(c.empty());  // still in flight.
  EXPECT_TRUE(absl::IsNotFound(channel_->WaitFor(later)));
  EXPECT_EQ(c, "--");
  EXPECT_TRUE(channel_->WaitFor(bad).ok());  // returned once.
  EXPECT_TRUE(channel_->Drain().ok());
}

// A BatchReply answers the whole batch at once: the error in its middle must still wait for
// a wait that reaches its command.
TEST_F(SessionChannelTest, AnErrorInABatchReachesOnlyTheWaitsAtOrAfterIt) {
  std::string a, c;
  channel_->BeginBatch();
  const uint64_t good = PostRead(0, 2, &a);
  const uint64_t bad = PostBadRead();
  const uint64_t later = PostRead(2, 2, &c);
  ASSERT_TRUE(channel_->EndBatch().ok());
  EXPECT_TRUE(channel_->WaitFor(good).ok());
  EXPECT_EQ(c, "--");  // came in the same message.
  // Idle now, but the error is kept for the wait that reaches it.
  EXPECT_TRUE(channel_->DrainIfBusy().ok());
  EXPECT_TRUE(absl::IsNotFound(channel_->WaitFor(bad)));
  EXPECT_TRUE(channel_->WaitFor(later).ok());
  EXPECT_TRUE(channel_->Drain().ok());
}

TEST_F(SessionChannelTest, ABatchIsHeldUntilItsOutermostEnd) {
  channel_->BeginBatch();
  channel_->BeginBatch();
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 0, "xy")).ok());
  ASSERT_TRUE(channel_->EndBatch().ok());
  absl::SleepFor(kHeld);
  EXPECT_EQ(OnServer(0, 2), "--");
  ASSERT_TRUE(channel_->EndBatch().ok());
  EXPECT_TRUE(Arrives(0, "xy"));
  EXPECT_TRUE(channel_->Drain().ok());
}

TEST_F(SessionChannelTest, AFullBatchGoesOutAtOnce) {
  channel_->BeginBatch();
  for (int i = 0; i < SessionChannel::kMaxBatchCommands - 1; ++i) {
    ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 0, "ab")).ok());
  }
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 2, "cd")).ok());
  EXPECT_TRUE(Arrives(0, "abcd"));
  // The next command opens a new batch, held again.
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 4, "ef")).ok());
  absl::SleepFor(kHeld);
  EXPECT_EQ(OnServer(4, 2), "--");
  ASSERT_TRUE(channel_->EndBatch().ok());
  EXPECT_TRUE(channel_->Drain().ok());
  EXPECT_EQ(OnServer(0, 6), "abcdef");
}

TEST_F(SessionChannelTest, ABatchGoesOutBeforeItPassesItsByteLimit) {
  const uint64_t half = SessionChannel::kMaxBatchBytes / 2 + 1;  // two do not fit.
  channel_->BeginBatch();
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 64, std::string(half, 'p'))).ok());
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 0, "q")).ok());  // joins the first.
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 64 + half, std::string(half, 'r'))).ok());
  EXPECT_TRUE(Arrives(0, "q"));  // the first two went out when the third did not fit.
  EXPECT_EQ(OnServer(64, half), std::string(half, 'p'));
  absl::SleepFor(kHeld);
  EXPECT_NE(OnServer(64 + half, 1), "r");  // the third is held.
  ASSERT_TRUE(channel_->EndBatch().ok());
  EXPECT_TRUE(channel_->Drain().ok());
  EXPECT_EQ(OnServer(64 + half, half), std::string(half, 'r'));
}

// Past kMaxPendingReplies unanswered commands a post waits for them all, but not inside a
// batch: what was sent may need what another server gets in a batch this thread still holds
// (a meta stream queueing steps ahead), so the batch stays held until its end.
TEST_F(SessionChannelTest, TooManyPendingInsideABatchWaitForItsEnd) {
  const int sent = static_cast<int>(SessionChannel::kMaxPendingReplies) - 8;
  for (int i = 0; i < sent; ++i) {
    ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 0, "ab")).ok());
  }
  channel_->BeginBatch();
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 2, "cd")).ok());
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 10, "zz")).ok());
  EXPECT_TRUE(Arrives(0, "ab"));
  absl::SleepFor(kHeld);
  EXPECT_EQ(OnServer(2, 10), "----------");  // the batch is held.
  ASSERT_TRUE(channel_->EndBatch().ok());
  EXPECT_TRUE(channel_->Drain().ok());
  EXPECT_EQ(OnServer(0, 12), "abcd------zz");
}

TEST_F(SessionChannelTest, WaitingForAHeldCommandSendsTheBatch) {
  std::string read;
  channel_->BeginBatch();
  ASSERT_TRUE(channel_->Post(WriteRequest(0, buffer_, 0, "hi")).ok());
  const uint64_t id = PostRead(0, 2, &read);
  EXPECT_TRUE(channel_->WaitFor(id).ok());  // would wait for ever for a held command.
  EXPECT_EQ(read, "hi");
  auto call = channel_->Call(ReadRequest(0, buffer_, 0, 2));  // a Call is never held.
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->read().data(), "hi");
  ASSERT_TRUE(channel_->EndBatch().ok());
}

TEST_F(SessionChannelTest, QueuedWritesGoBeforeTheNextCommand) {
  ASSERT_TRUE(channel_->QueueWrite(0, buffer_, 0, "uv", 2).ok());
  ASSERT_TRUE(channel_->QueueWrite(0, buffer_, 1, "w", 1).ok());  // in order: "uw".
  EXPECT_TRUE(channel_->has_queued_writes());
  EXPECT_EQ(channel_->queued_write_bytes(), 3);
  absl::SleepFor(kHeld);
  EXPECT_EQ(OnServer(0, 2), "--");
  const uint64_t before = channel_->last_sent_id();
  auto call = channel_->Call(ReadRequest(0, buffer_, 0, 2));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->read().data(), "uw");
  EXPECT_EQ(channel_->last_sent_id(), before + 3);  // two Writes, then the Read.
  EXPECT_FALSE(channel_->has_queued_writes());
}

// RowsCompute: GET_ROWS of rows (2, 0) of a 3x4 f32 table at offset 0; its first 64 bytes
// come back as the output.
TEST_F(SessionChannelTest, QueuedWritesTravelInsideTheNextCompute) {
  std::vector<float> table(12);
  for (int i = 0; i < 12; ++i) table[i] = 10.0f * i;
  ASSERT_TRUE(channel_->QueueWrite(0, buffer_, 0, table.data(), 48).ok());
  const uint64_t before = channel_->last_sent_id();
  auto call = channel_->Call(RowsCompute(0, buffer_, false, 2, 0));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(channel_->last_sent_id(), before + 1);  // one message: the Compute.
  ASSERT_EQ(call->compute().outputs_size(), 1);
  std::vector<float> got(12);
  std::memcpy(got.data(), call->compute().outputs(0).data(), 48);
  EXPECT_EQ(got, table);
  std::vector<float> picked(8);
  const std::string result = OnServer(192, 32);
  std::memcpy(picked.data(), result.data(), 32);
  EXPECT_EQ(picked, (std::vector<float>{80, 90, 100, 110, 0, 10, 20, 30}));
}

TEST_F(SessionChannelTest, QueuedWritesOverTheLimitArePostedFirst) {
  const std::string big(QueuedWrites::kMaxBytes / 2 + 1, 'b');
  ASSERT_TRUE(channel_->QueueWrite(0, buffer_, 0, big.data(), big.size()).ok());
  const uint64_t before = channel_->last_sent_id();
  ASSERT_TRUE(channel_->QueueWrite(0, buffer_, big.size(), big.data(), big.size()).ok());
  EXPECT_EQ(channel_->last_sent_id(), before + 1);  // the first went as a Write.
  EXPECT_EQ(channel_->queued_write_bytes(), big.size());
  EXPECT_TRUE(Arrives(0, big));
  ASSERT_TRUE(channel_->Drain().ok());
  EXPECT_EQ(OnServer(big.size(), big.size()), big);
}

// One thread waits for a reply that does not come yet: a PeerPull whose source command (on
// a second session) is not sent. Another thread's Post goes out meanwhile instead of waiting
// for that reply (two devices of one server, each driven by its own thread).
TEST_F(SessionChannelTest, AnotherThreadPostsWhileOneWaitsForAReply) {
  auto source =
      SessionChannel::Open(*stub_, std::make_unique<grpc::ClientContext>(), server_->address());
  ASSERT_TRUE(source.ok()) << source.status();
  auto alloc = (*source)->Call(AllocRequest(0, 0, 4096));
  ASSERT_TRUE(alloc.ok()) << alloc.status();
  const uint64_t src_buffer = alloc->alloc_buffer().buffer();
  pb::SessionRequest grant;
  grant.mutable_grant_peer_read()->set_buffer(src_buffer);
  auto granted = (*source)->Call(grant);
  ASSERT_TRUE(granted.ok()) << granted.status();

  const std::string payload = "pulled after the source's write";
  pb::SessionRequest pull;
  pb::PeerPull* p = pull.mutable_peer_pull();
  p->set_endpoint(server_->address());
  p->set_grant(granted->grant().grant());
  p->set_size(payload.size());
  p->set_dst_buffer(buffer_);
  p->set_after((*source)->last_sent_id() + 1);  // the write below, not sent yet.
  uint64_t pull_id = 0;
  ASSERT_TRUE(channel_->Post(pull, nullptr, &pull_id).ok());
  const uint64_t sent_before = channel_->messages_sent();
  std::atomic<bool> waited{false};
  absl::Status wait_status;
  std::thread waiter([&] {
    wait_status = channel_->WaitFor(pull_id);
    waited = true;
  });
  absl::SleepFor(kHeld);  // the waiter is reading by now.

  std::future<absl::Status> post = std::async(
      std::launch::async, [&] { return channel_->Post(WriteRequest(0, buffer_, 100, "later")); });
  const bool posted = post.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(posted) << "Post waited for another thread's reply";
  EXPECT_FALSE(waited);
  if (posted) {
    EXPECT_TRUE(post.get().ok());
    EXPECT_EQ(channel_->messages_sent(), sent_before + 1);
  }

  // The source's write lets the pull (and so the waiter, and the write behind it) finish.
  ASSERT_TRUE((*source)->Call(WriteRequest(0, src_buffer, 0, payload)).ok());
  waiter.join();
  EXPECT_TRUE(wait_status.ok()) << wait_status;
  ASSERT_TRUE(channel_->Drain().ok());
  EXPECT_EQ(OnServer(0, payload.size()), payload);
  EXPECT_EQ(OnServer(100, 5), "later");
}

// A server that cannot reach the peer a PeerPull names (here a server that went away)
// answers "peer unreachable" with the peer's endpoint in SessionReply.lost_endpoint; the
// client's error says so in words, naming both servers, and carries the peer, not the server
// that answered, as its typed identity (core/lost_endpoint.h).
TEST_F(SessionChannelTest, APeerTheServerLostArrivesAsTheErrorsIdentity) {
  server::ServerConfig config;
  config.port = 0;
  config.devices = {Registry::Get().CpuDevice()};
  auto peer = server::RpcServer::Start(config);
  ASSERT_TRUE(peer.ok()) << peer.status();
  const std::string lost = (*peer)->address();
  auto peer_stub = pb::TensorGrid::NewStub(NewChannel(lost, {}));
  auto source = SessionChannel::Open(*peer_stub, std::make_unique<grpc::ClientContext>(), lost);
  ASSERT_TRUE(source.ok()) << source.status();
  auto alloc = (*source)->Call(AllocRequest(0, 0, 4096));
  ASSERT_TRUE(alloc.ok()) << alloc.status();
  pb::SessionRequest grant;
  grant.mutable_grant_peer_read()->set_buffer(alloc->alloc_buffer().buffer());
  auto granted = (*source)->Call(grant);
  ASSERT_TRUE(granted.ok()) << granted.status();
  (*peer)->Shutdown(0);

  pb::SessionRequest pull;
  pb::PeerPull* p = pull.mutable_peer_pull();
  p->set_endpoint(lost);
  p->set_grant(granted->grant().grant());
  p->set_size(64);
  p->set_dst_buffer(buffer_);
  const absl::Status s = channel_->Call(pull).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat("rpc-server ", server_->address(), ": peer unreachable: ", lost));
  EXPECT_EQ(LostEndpoint(s), lost) << s;
  // The server that answered is alive: its channel goes on, and its own errors name no one.
  const absl::Status missing = channel_->Call(ReadRequest(0, kNoSuchBuffer, 0, 1)).status();
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(LostEndpoint(missing), std::nullopt) << missing;
  EXPECT_TRUE(channel_->Call(ReadRequest(0, buffer_, 0, 1)).ok());
}

TEST_F(SessionChannelTest, AGoneServerBreaksTheChannelForGood) {
  server_->Shutdown(0);
  const absl::Status first = channel_->Call(ReadRequest(0, buffer_, 0, 1)).status();
  EXPECT_TRUE(absl::IsUnavailable(first)) << first;
  EXPECT_NE(first.message().find("is gone"), std::string::npos) << first;
  EXPECT_EQ(LostEndpoint(first), server_->address()) << first;
  EXPECT_EQ(channel_->Call(ReadRequest(0, buffer_, 0, 1)).status(), first);
  EXPECT_EQ(channel_->Post(ReadRequest(0, buffer_, 0, 1)), first);
  EXPECT_EQ(channel_->QueueWrite(0, buffer_, 0, "z", 1), first);
  EXPECT_EQ(channel_->DrainIfBusy(), first);
}

}  // namespace
}  // namespace tg::rpc
