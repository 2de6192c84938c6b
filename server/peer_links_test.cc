// PeerLinks on loopback, with real sockets: a piece comes to the reader that waits for it and
// one for another collective waits in the mailbox, charged to the grant's session; a link
// needs a ticket this server issued (once), a grant it made and an address --peers allows,
// and is refused naming what is missing otherwise; a revoked grant closes its links; a
// malformed piece drops its link; a server not listening issues no tickets.
#include "server/peer_links.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/memory_reservation.h"
#include "server/server_testing.h"

namespace tg::server {
namespace {

constexpr uint64_t kBytes = 256;

class PeerLinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Device* cpu = testing::TwoCpuDevices()[0];
    auto b = cpu->default_buffer_type()->Allocate(kBytes);
    ASSERT_TRUE(b.ok()) << b.status();
    buffer_ = std::make_shared<SessionBuffer>(*std::move(b), 0, kBytes, nullptr);
    account_ = std::make_shared<MailboxAccount>(
        "receiver", [this](uint64_t n) { return MemoryReservation::Reserve(&held_, 0, n); },
        [this](uint64_t n) { held_ -= n; }, nullptr);
    grant_ = grants_.Grant(buffer_, account_);
    links_ = std::make_unique<PeerLinks>(&grants_, PeerAllowList::Default());
    ASSERT_TRUE(links_->Listen("127.0.0.1", 0).ok());
    ASSERT_NE(links_->port(), 0);
  }

  LinkHello Hello(const std::string& grant) {
    absl::StatusOr<std::string> ticket = links_->IssueTicket();
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    return {ticket.value_or(""), "sender-a", grant, "a:1"};
  }

  absl::StatusOr<std::unique_ptr<OutLink>> Dial(const LinkHello& hello) {
    return OutLink::Dial("127.0.0.1", links_->port(), hello, absl::Seconds(5));
  }

  // Waits (at most 5 s) for the listener to file the link of (grant, "a:1").
  bool LinkedSoon(const std::string& grant) {
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (!links_->Linked(grant, "a:1") && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    return links_->Linked(grant, "a:1");
  }

  PieceKey Key(uint64_t collective) { return {grant_, collective, 0, 0, 1}; }

  std::atomic<uint64_t> held_{0};
  GrantTable grants_;
  std::shared_ptr<SessionBuffer> buffer_;
  std::shared_ptr<MailboxAccount> account_;
  std::string grant_;
  std::unique_ptr<PeerLinks> links_;
  ReduceMailbox mailbox_{&grants_};
};

TEST_F(PeerLinksTest, APieceComesToItsReaderAndAnotherWaitsInTheMailbox) {
  absl::StatusOr<std::unique_ptr<OutLink>> link = Dial(Hello(grant_));
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_TRUE(LinkedSoon(grant_));
  EXPECT_FALSE(links_->Linked(grant_, "b:1"));  // pieces from elsewhere: the stream's.

  ASSERT_TRUE((*link)->Send({1, 0, 0, 1, 5}, "first").ok());
  ASSERT_TRUE((*link)->Send({2, 0, 0, 1, 6}, "second").ok());
  std::optional<std::string> second = links_->Take(Key(2), "a:1", absl::Seconds(5), mailbox_);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second, "second");
  // Collective 1's piece came first and waits in the mailbox, charged to the session.
  EXPECT_EQ(held_.load(), 5u);
  std::optional<std::string> first = links_->Take(Key(1), "a:1", absl::Seconds(5), mailbox_);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "first");
  EXPECT_EQ(held_.load(), 0u);
  // Nothing more comes: a wait ends empty-handed, the link kept.
  EXPECT_FALSE(links_->Take(Key(3), "a:1", absl::Milliseconds(20), mailbox_).has_value());
  EXPECT_TRUE(links_->Linked(grant_, "a:1"));

  // The sender closes it: the reader sees the end and drops it.
  link->reset();
  EXPECT_FALSE(links_->Take(Key(3), "a:1", absl::Seconds(5), mailbox_).has_value());
  EXPECT_FALSE(links_->Linked(grant_, "a:1"));
  EXPECT_EQ(links_->links(), 0u);
}

TEST_F(PeerLinksTest, ALinkNeedsAFreshTicketAGrantOfThisServerAndAnAllowedAddress) {
  LinkHello made_up = Hello(grant_);
  made_up.ticket = std::string(kTicketBytes, '0');
  absl::StatusOr<std::unique_ptr<OutLink>> no_ticket = Dial(made_up);
  EXPECT_EQ(no_ticket.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_ticket.status().message().find("unknown or used ticket"), std::string::npos)
      << no_ticket.status();

  const LinkHello once = Hello(grant_);
  ASSERT_TRUE(Dial(once).ok());
  absl::StatusOr<std::unique_ptr<OutLink>> again = Dial(once);
  EXPECT_NE(again.status().message().find("unknown or used ticket"), std::string::npos)
      << again.status();

  absl::StatusOr<std::unique_ptr<OutLink>> no_grant = Dial(Hello("not-a-grant"));
  EXPECT_NE(no_grant.status().message().find("unknown or revoked grant"), std::string::npos)
      << no_grant.status();
  EXPECT_FALSE(links_->Linked("not-a-grant", "a:1"));

  // --peers without loopback: the connection is closed before a byte is read.
  auto elsewhere = PeerAllowList::Parse("10.0.0.0/8");
  ASSERT_TRUE(elsewhere.ok());
  PeerLinks strict(&grants_, *elsewhere);
  ASSERT_TRUE(strict.Listen("127.0.0.1", 0).ok());
  absl::StatusOr<std::string> ticket = strict.IssueTicket();
  ASSERT_TRUE(ticket.ok());
  absl::StatusOr<std::unique_ptr<OutLink>> refused =
      OutLink::Dial("127.0.0.1", strict.port(), {*ticket, "", grant_, "a:1"}, absl::Seconds(5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_EQ(strict.links(), 0u);

  PeerLinks off(&grants_, PeerAllowList::Default());
  EXPECT_EQ(off.IssueTicket().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(PeerLinksTest, ARevokedGrantClosesItsLinks) {
  absl::StatusOr<std::unique_ptr<OutLink>> link = Dial(Hello(grant_));
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_TRUE(LinkedSoon(grant_));
  grants_.Revoke(grant_);
  EXPECT_FALSE(links_->Linked(grant_, "a:1"));
  EXPECT_EQ(links_->links(), 0u);
  // The sender learns it at its next writes (the first may still fit the socket).
  absl::Status s;
  for (int i = 0; i < 100 && s.ok(); ++i) {
    s = (*link)->Send({1, 0, 0, 1, 4}, "data");
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE((*link)->broken());
}

TEST_F(PeerLinksTest, AMalformedPieceDropsTheLink) {
  const LinkHello hello = Hello(grant_);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(links_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_TRUE(WriteFull(fd, EncodeLinkHello(hello).value()).ok());
  ASSERT_TRUE(ReadLinkAnswer(fd).ok());
  ASSERT_TRUE(LinkedSoon(grant_));
  LinkPieceHeader big;
  big.bytes = kMaxLinkPieceBytes + 1;
  char head[kLinkPieceHeaderBytes];
  EncodeLinkPieceHeader(big, head);
  ASSERT_TRUE(WriteFull(fd, std::string(head, sizeof(head))).ok());
  EXPECT_FALSE(links_->Take(Key(1), "a:1", absl::Seconds(5), mailbox_).has_value());
  EXPECT_FALSE(links_->Linked(grant_, "a:1"));
  EXPECT_EQ(held_.load(), 0u);
  close(fd);
}

}  // namespace
}  // namespace tg::server
