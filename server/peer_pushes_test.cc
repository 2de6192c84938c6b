// PeerPushes on the receiving side: pieces delivered with a sender's key are charged to the
// session that made the grant and go, uncharged, when that sender ends (DropSender), while
// the pieces of other senders stay and are awaited as before. One sender's end drops its
// all-reduce pieces too (the mailbox PeerPushes is given), and refuses its later pieces of
// both kinds. An await whose session ends gives up at once instead of waiting out its piece
// wait.
#include "server/peer_pushes.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "backends/register_builtin.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "server/grant_table.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

constexpr uint64_t kBufferBytes = 64;

// A receiving session: a buffer, its grant and the account its pieces are charged to.
struct Receiver {
  Receiver(GrantTable& grants, Metrics* metrics) {
    EXPECT_TRUE(RegisterBuiltinBackends().ok());
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        Registry::Get().CpuDevice()->default_buffer_type()->Allocate(kBufferBytes);
    EXPECT_TRUE(b.ok()) << b.status();
    buffer = std::make_shared<SessionBuffer>(*std::move(b), 0, kBufferBytes, nullptr);
    account = std::make_shared<MailboxAccount>(
        "receiver", [this](uint64_t n) { return MemoryReservation::Reserve(&held, 0, n); },
        [this](uint64_t n) { held -= n; }, metrics);
    grant = grants.Grant(buffer, account);
  }
  std::atomic<uint64_t> held{0};
  std::shared_ptr<SessionBuffer> buffer;
  std::shared_ptr<MailboxAccount> account;
  std::string grant;
};

pb::PeerDeliverRequest Delivery(const std::string& grant, uint64_t tag, const std::string& data) {
  pb::PeerDeliverRequest r;
  pb::DeliveredPiece* p = r.add_pieces();
  p->set_grant(grant);
  p->set_tag(tag);
  p->set_data(data);
  return r;
}

pb::AwaitPush Await(uint64_t tag, uint64_t size) {
  pb::AwaitPush a;
  a.set_endpoint("127.0.0.1:1");
  a.set_tag(tag);
  a.set_size(size);
  return a;
}

TEST(PeerPushesTest, AnEndedSendersPiecesGoAndTheOthersAreAwaited) {
  GrantTable grants;
  Metrics metrics;
  // No PeerClient: Await does not watch the source; a short wait for the piece that went.
  PeerPushes pushes(nullptr, &grants, &metrics, absl::Milliseconds(100));
  Receiver r(grants, &metrics);
  ASSERT_TRUE(pushes.Receive(Delivery(r.grant, 1, std::string(40, 'a')), "sender-a").ok());
  ASSERT_TRUE(pushes.Receive(Delivery(r.grant, 2, std::string(16, 'b')), "sender-b").ok());
  EXPECT_EQ(r.held.load(), 56u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 56.0);

  EXPECT_EQ(pushes.DropSender("sender-a"), 40u);
  EXPECT_EQ(pushes.held_bytes(), 16u);
  EXPECT_EQ(r.held.load(), 16u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 16.0);

  // sender-b's piece is still the receiver's.
  const absl::Status got = pushes.Await(Await(2, 16), r.grant, *r.buffer);
  ASSERT_TRUE(got.ok()) << got;
  std::string bytes(16, '\0');
  ASSERT_TRUE(r.buffer->Read(0, bytes.data(), bytes.size()).ok());
  EXPECT_EQ(bytes, std::string(16, 'b'));
  EXPECT_EQ(r.held.load(), 0u);
  // sender-a's is gone: an await of it finds nothing.
  EXPECT_EQ(pushes.Await(Await(1, 40), r.grant, *r.buffer).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(PeerPushesTest, AnAwaitGivesUpWhenItsSessionEnds) {
  GrantTable grants;
  // A piece wait past the 30 s bound below: only the session's end can end this await in time.
  PeerPushes pushes(nullptr, &grants, nullptr, absl::Seconds(60));
  Receiver r(grants, nullptr);
  std::atomic<bool> ended{false};
  std::future<absl::Status> waiting = std::async(std::launch::async, [&] {
    return pushes.Await(Await(7, 16), r.grant, *r.buffer, [&] { return ended.load(); });
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ended = true;
  // Within a few polls (kPeerPoll); the bound only keeps a broken build from hanging here.
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const absl::Status s = waiting.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("await_push: the session ended"), std::string::npos) << s;
}

TEST(PeerPushesTest, AnotherSendersKeyDropsNothing) {
  GrantTable grants;
  PeerPushes pushes(nullptr, &grants, nullptr, absl::Milliseconds(100));
  Receiver r(grants, nullptr);
  ASSERT_TRUE(pushes.Receive(Delivery(r.grant, 1, "abcd"), "sender-a").ok());
  ASSERT_TRUE(pushes.Receive(Delivery(r.grant, 2, "efgh")).ok());  // sender not known.
  EXPECT_EQ(pushes.DropSender("sender-b"), 0u);
  EXPECT_EQ(pushes.DropSender(""), 0u);
  EXPECT_EQ(pushes.held_bytes(), 8u);
  EXPECT_EQ(r.held.load(), 8u);
}

TEST(PeerPushesTest, AnEndedSenderThatNeverPushedIsANoOp) {
  GrantTable grants;
  PeerPushes pushes(nullptr, &grants, nullptr);
  pushes.SenderEnded("never-pushed");  // no PeerClient, no entry: nothing to tell anyone.
  EXPECT_EQ(pushes.held_bytes(), 0u);
}

TEST(PeerPushesTest, AnEndedSendersAllReducePiecesGoToo) {
  GrantTable grants;
  Metrics metrics;
  ReduceMailbox reduce(&grants);
  PeerPushes pushes(nullptr, &grants, &metrics, absl::Milliseconds(100), &reduce);
  Receiver r(grants, &metrics);
  ASSERT_TRUE(pushes.Receive(Delivery(r.grant, 1, std::string(40, 'a')), "gone").ok());
  ASSERT_TRUE(
      reduce.Put(PieceKey{r.grant, 9, 1, 0, 1}, std::string(30, 'r'), "peer_reduce", "gone").ok());
  ASSERT_TRUE(
      reduce.Put(PieceKey{r.grant, 9, 1, 1, 1}, std::string(5, 'r'), "peer_reduce", "alive").ok());
  EXPECT_EQ(r.held.load(), 75u);

  EXPECT_EQ(pushes.DropSender("gone"), 70u);
  EXPECT_EQ(pushes.held_bytes(), 0u);
  EXPECT_EQ(reduce.held_bytes(), 5u);
  EXPECT_EQ(r.held.load(), 5u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 5.0);
  // Its pieces of either kind that come after are refused, uncharged.
  EXPECT_EQ(pushes.Receive(Delivery(r.grant, 2, "late"), "gone").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reduce.Put(PieceKey{r.grant, 9, 1, 2, 1}, "late", "peer_reduce", "gone").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.held.load(), 5u);
}

}  // namespace
}  // namespace tg::server
