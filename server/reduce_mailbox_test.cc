// ReduceMailbox: a piece put before or while it is waited for is taken once; a wait gives up
// at its deadline or with the check's error; pieces of a finished collective are dropped;
// the held bytes are capped; a piece is never handed to another grant. With a grant table:
// each piece is charged to the session that made its grant, one session's full account never
// refuses another's pieces, and a revoked grant's pieces go at once, uncharged; an ended
// sender's pieces go, uncharged, and nobody else's, and its pieces that come after are
// refused uncharged (the last kMaxEndedSenders senders remembered).
#include "server/reduce_mailbox.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/register_builtin.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "server/grant_table.h"
#include "server/metrics.h"

namespace tg::server {
namespace {

PieceKey Key(const std::string& grant, uint64_t collective, uint32_t step) {
  return PieceKey{grant, collective, step, 0, 1};
}

absl::Status Fine() { return absl::OkStatus(); }

TEST(ReduceMailboxTest, PieceBeforeTheWaitIsTakenOnce) {
  ReduceMailbox box;
  ASSERT_TRUE(box.Put(Key("g", 7, 0), "abcd").ok());
  EXPECT_EQ(box.held_bytes(), 4u);
  EXPECT_EQ(box.Put(Key("g", 7, 0), "abcd").code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<std::string> got =
      box.Take(Key("g", 7, 0), absl::Now() + absl::Seconds(1), absl::Milliseconds(10), Fine);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "abcd");
  EXPECT_EQ(box.held_bytes(), 0u);
  got =
      box.Take(Key("g", 7, 0), absl::Now() + absl::Milliseconds(50), absl::Milliseconds(10), Fine);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ReduceMailboxTest, WaiterWakesWhenThePieceComes) {
  ReduceMailbox box;
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(box.Put(Key("g", 1, 3), "xy").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got =
      box.Take(Key("g", 1, 3), absl::Now() + absl::Seconds(10), absl::Seconds(5), Fine);
  late.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "xy");
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // woken, not polled.
}

TEST(ReduceMailboxTest, AnotherGrantsPieceIsNotTaken) {
  ReduceMailbox box;
  ASSERT_TRUE(box.Put(Key("other", 1, 0), "zz").ok());
  absl::StatusOr<std::string> got = box.Take(
      Key("mine", 1, 0), absl::Now() + absl::Milliseconds(30), absl::Milliseconds(10), Fine);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("rank 1"), std::string::npos) << got.status();
}

TEST(ReduceMailboxTest, CheckErrorEndsTheWait) {
  ReduceMailbox box;
  int polls = 0;
  absl::StatusOr<std::string> got =
      box.Take(Key("g", 1, 0), absl::Now() + absl::Seconds(30), absl::Milliseconds(5), [&] {
        return ++polls < 3 ? absl::OkStatus() : absl::UnavailableError("peer unreachable: x:1");
      });
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(polls, 3);
}

TEST(ReduceMailboxTest, AGonePeerIsSeenAtTheFirstCheckNotAfterAWholePoll) {
  ReduceMailbox box;
  int polls = 0;
  // A poll of an hour: the wait learns of the peer's loss at kFirstCheck, well before the
  // deadline, instead of running into it.
  absl::StatusOr<std::string> got =
      box.Take(Key("g", 1, 0), absl::Now() + absl::Seconds(5), absl::Hours(1), [&] {
        ++polls;
        return absl::UnavailableError("peer unreachable: x:1");
      });
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_EQ(polls, 1);
}

TEST(ReduceMailboxTest, DropRemovesOneCollectivesPieces) {
  ReduceMailbox box;
  ASSERT_TRUE(box.Put(Key("g", 1, 0), "aa").ok());
  ASSERT_TRUE(box.Put(Key("g", 1, 1), "bb").ok());
  ASSERT_TRUE(box.Put(Key("g", 2, 0), "cc").ok());
  box.Drop("g", 1);
  EXPECT_EQ(box.held_bytes(), 2u);
  EXPECT_TRUE(
      box.Take(Key("g", 2, 0), absl::Now() + absl::Seconds(1), absl::Milliseconds(10), Fine).ok());
}

TEST(ReduceMailboxTest, HeldBytesAreCapped) {
  ReduceMailbox box;
  const std::string big(ReduceMailbox::kMaxUnaccountedBytes / 2, 'x');
  ASSERT_TRUE(box.Put(Key("g", 1, 0), big).ok());
  ASSERT_TRUE(box.Put(Key("g", 1, 1), big).ok());
  const absl::Status s = box.Put(Key("g", 1, 2), "y");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(box.held_bytes(), ReduceMailbox::kMaxUnaccountedBytes);
}

// A session as the mailbox sees it: a buffer to grant and an account charging `limit` bytes.
struct Tenant {
  Tenant(GrantTable& grants, uint64_t limit, Metrics* metrics) {
    EXPECT_TRUE(RegisterBuiltinBackends().ok());
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        Registry::Get().CpuDevice()->default_buffer_type()->Allocate(64);
    EXPECT_TRUE(b.ok()) << b.status();
    buffer = std::make_shared<SessionBuffer>(*std::move(b), 0, 64, nullptr);
    account = std::make_shared<MailboxAccount>(
        "tenant", [this, limit](uint64_t n) { return MemoryReservation::Reserve(&held, limit, n); },
        [this](uint64_t n) { held -= n; }, metrics);
    grant = grants.Grant(buffer, account);
  }
  std::atomic<uint64_t> held{0};
  std::shared_ptr<SessionBuffer> buffer;
  std::shared_ptr<MailboxAccount> account;
  std::string grant;
};

TEST(ReduceMailboxTest, PiecesAreChargedToTheSessionThatMadeTheGrant) {
  GrantTable grants;
  Metrics metrics;
  ReduceMailbox box(&grants);
  Tenant attacker(grants, 1000, &metrics);
  Tenant honest(grants, 1000, &metrics);
  const std::string piece(600, 'x');
  ASSERT_TRUE(box.Put(Key(attacker.grant, 1, 0), piece).ok());
  EXPECT_EQ(attacker.held.load(), 600u);
  EXPECT_EQ(attacker.account->held(), 600u);
  // The attacker's next piece passes its own limit: refused, naming the numbers...
  const absl::Status full = box.Put(Key(attacker.grant, 1, 1), piece, "peer_deliver");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_TRUE(absl::StartsWith(full.message(), "peer_deliver: ")) << full;
  EXPECT_NE(full.message().find("600"), std::string::npos) << full;
  EXPECT_NE(full.message().find("1000"), std::string::npos) << full;
  EXPECT_EQ(attacker.held.load(), 600u);
  // ...while another session's pieces are taken as if it were not there.
  ASSERT_TRUE(box.Put(Key(honest.grant, 1, 0), piece).ok());
  EXPECT_EQ(honest.held.load(), 600u);
  EXPECT_EQ(box.held_bytes(), 1200u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 1200.0);
  // A piece taken is the taker's: uncharged.
  ASSERT_TRUE(box.Take(Key(honest.grant, 1, 0), absl::Now() + absl::Seconds(1),
                       absl::Milliseconds(10), Fine)
                  .ok());
  EXPECT_EQ(honest.held.load(), 0u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 600.0);
  // A grant the table does not know files nothing.
  EXPECT_EQ(box.Put(Key("made-up", 1, 0), "x").code(), absl::StatusCode::kNotFound);
  // The same piece twice is refused and charged once.
  EXPECT_EQ(box.Put(Key(attacker.grant, 1, 0), "y").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(attacker.held.load(), 600u);
}

TEST(ReduceMailboxTest, RevokedGrantsPiecesGoAtOnceUncharged) {
  GrantTable grants;
  Metrics metrics;
  ReduceMailbox box(&grants);
  ReduceMailbox other(&grants);  // every mailbox listens (pushes and all-reduce alike).
  Tenant t(grants, 0, &metrics);
  ASSERT_TRUE(box.Put(Key(t.grant, 1, 0), std::string(300, 'a')).ok());
  ASSERT_TRUE(other.Put(Key(t.grant, 0, 0), std::string(200, 'b')).ok());
  EXPECT_EQ(t.held.load(), 500u);
  grants.Revoke(t.grant);
  EXPECT_EQ(box.held_bytes(), 0u);
  EXPECT_EQ(other.held_bytes(), 0u);
  EXPECT_EQ(t.held.load(), 0u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 0.0);
  EXPECT_EQ(box.Put(Key(t.grant, 1, 1), "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.held.load(), 0u);
}

TEST(ReduceMailboxTest, ClosedAccountRefundsEverythingAndRefusesMore) {
  GrantTable grants;
  Metrics metrics;
  ReduceMailbox box(&grants);
  Tenant t(grants, 0, &metrics);
  ASSERT_TRUE(box.Put(Key(t.grant, 1, 0), std::string(100, 'a')).ok());
  t.account->Close();  // the session ended (its grants would be revoked first).
  EXPECT_EQ(t.held.load(), 0u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 0.0);
  EXPECT_EQ(box.Put(Key(t.grant, 1, 1), "x").code(), absl::StatusCode::kNotFound);
  // The piece still filed goes without charging anything back twice.
  box.Drop(t.grant, 1);
  EXPECT_EQ(t.held.load(), 0u);
  EXPECT_EQ(box.held_bytes(), 0u);
}

TEST(ReduceMailboxTest, OneSessionHoldsAtMostItsShare) {
  GrantTable grants;
  ReduceMailbox box(&grants);
  Tenant t(grants, 0, nullptr);  // no memory limit: the per-session cap still holds.
  const std::string chunk(64 << 20, 'z');
  uint64_t filed = 0;
  absl::Status s;
  for (uint32_t i = 0; s.ok() && i < 64; ++i) {
    s = box.Put(Key(t.grant, 1, i), chunk);
    if (s.ok()) filed += chunk.size();
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(filed, MailboxAccount::kMaxHeldBytes);
  EXPECT_EQ(t.held.load(), MailboxAccount::kMaxHeldBytes);
}

TEST(ReduceMailboxTest, AnEndedSendersPiecesGoUnchargedAndNobodyElses) {
  GrantTable grants;
  Metrics metrics;
  ReduceMailbox box(&grants);
  Tenant receiver(grants, 0, &metrics);
  // Two sending sessions fill one receiver's mailbox; one piece came from a sender unknown.
  ASSERT_TRUE(
      box.Put(Key(receiver.grant, 0, 1), std::string(300, 'a'), "peer_deliver", "gone").ok());
  ASSERT_TRUE(
      box.Put(Key(receiver.grant, 0, 2), std::string(200, 'a'), "peer_deliver", "gone").ok());
  ASSERT_TRUE(
      box.Put(Key(receiver.grant, 0, 3), std::string(50, 'b'), "peer_deliver", "alive").ok());
  ASSERT_TRUE(box.Put(Key(receiver.grant, 0, 4), std::string(7, 'c'), "peer_deliver").ok());
  EXPECT_EQ(receiver.held.load(), 557u);
  EXPECT_EQ(box.DropSender(""), 0u);  // "not known" names no sender.
  EXPECT_EQ(box.DropSender("nobody"), 0u);
  EXPECT_EQ(box.DropSender("gone"), 500u);
  EXPECT_EQ(box.held_bytes(), 57u);
  EXPECT_EQ(receiver.held.load(), 57u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 57.0);
  EXPECT_EQ(box.DropSender("gone"), 0u);  // twice: nothing more, nothing refunded twice.
  EXPECT_EQ(receiver.held.load(), 57u);
  // The other pieces are still there for the receiver.
  auto take = [&](uint32_t tag) {
    return box.Take(Key(receiver.grant, 0, tag), absl::Now() + absl::Milliseconds(50),
                    absl::Milliseconds(10), Fine);
  };
  EXPECT_EQ(take(1).status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<std::string> alive = take(3);
  ASSERT_TRUE(alive.ok()) << alive.status();
  EXPECT_EQ(*alive, std::string(50, 'b'));
  ASSERT_TRUE(take(4).ok());
  EXPECT_EQ(receiver.held.load(), 0u);
}

TEST(ReduceMailboxTest, AnEndedSendersLatePieceIsRefusedUncharged) {
  GrantTable grants;
  Metrics metrics;
  ReduceMailbox box(&grants);
  Tenant receiver(grants, 0, &metrics);
  ASSERT_TRUE(
      box.Put(Key(receiver.grant, 1, 0), std::string(100, 'a'), "peer_reduce", "gone").ok());
  EXPECT_EQ(box.DropSender("gone"), 100u);
  // A piece of the ended sender that was on its way when the end was told.
  const absl::Status late =
      box.Put(Key(receiver.grant, 1, 1), std::string(100, 'a'), "peer_reduce", "gone");
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  EXPECT_TRUE(absl::StrContains(late.message(), "peer_reduce: the session that sent this piece"))
      << late;
  EXPECT_EQ(box.held_bytes(), 0u);
  EXPECT_EQ(receiver.held.load(), 0u);
  EXPECT_EQ(metrics.peer_mailbox_bytes(), 0.0);
  // Other senders, and pieces of no known sender, are filed as before.
  ASSERT_TRUE(box.Put(Key(receiver.grant, 1, 2), "abcd", "peer_reduce", "alive").ok());
  ASSERT_TRUE(box.Put(Key(receiver.grant, 1, 3), "efgh").ok());
  EXPECT_EQ(receiver.held.load(), 8u);
}

TEST(ReduceMailboxTest, EndedSendersAreRememberedUpToTheCap) {
  ReduceMailbox box;
  EXPECT_EQ(box.DropSender("first"), 0u);  // a sender that sent nothing here is remembered too.
  for (size_t i = 1; i < ReduceMailbox::kMaxEndedSenders; ++i) {
    box.DropSender(absl::StrCat("sender-", i));
  }
  // Exactly at the cap: "first" and the last are both still refused.
  EXPECT_EQ(box.Put(Key("g", 1, 0), "abcd", "peer_reduce", "first").code(),
            absl::StatusCode::kFailedPrecondition);
  const std::string last = absl::StrCat("sender-", ReduceMailbox::kMaxEndedSenders - 1);
  EXPECT_EQ(box.Put(Key("g", 1, 0), "abcd", "peer_reduce", last).code(),
            absl::StatusCode::kFailedPrecondition);
  // One more: the oldest is forgotten, the rest stay.
  box.DropSender("one-more");
  EXPECT_TRUE(box.Put(Key("g", 1, 0), "abcd", "peer_reduce", "first").ok());
  EXPECT_EQ(box.Put(Key("g", 1, 1), "abcd", "peer_reduce", "sender-1").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(box.held_bytes(), 4u);
}

}  // namespace
}  // namespace tg::server
