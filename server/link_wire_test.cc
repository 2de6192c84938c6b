// LinkWire over a socketpair: a hello, an answer and pieces read back as written; what is
// not a link, a name too long and a piece over kMaxLinkPieceBytes are refused naming it; the
// end of the stream mid-piece is UNAVAILABLE.
#include "server/link_wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

class LinkWireTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd_), 0); }
  void TearDown() override {
    for (int& fd : fd_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  void CloseWriter() {
    close(fd_[0]);
    fd_[0] = -1;
  }
  int fd_[2] = {-1, -1};
};

TEST_F(LinkWireTest, HelloAnswerAndPiecesReadBackAsWritten) {
  const LinkHello hello{std::string(kTicketBytes, 't'), "sender-key", "grant-1", "10.0.0.1:50052"};
  absl::StatusOr<std::string> bytes = EncodeLinkHello(hello);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(WriteFull(fd_[0], *bytes).ok());
  absl::StatusOr<LinkHello> got = ReadLinkHello(fd_[1]);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ticket, hello.ticket);
  EXPECT_EQ(got->sender, hello.sender);
  EXPECT_EQ(got->grant, hello.grant);
  EXPECT_EQ(got->from, hello.from);

  ASSERT_TRUE(WriteLinkAnswer(fd_[1], absl::OkStatus()).ok());
  EXPECT_TRUE(ReadLinkAnswer(fd_[0]).ok());
  ASSERT_TRUE(WriteLinkAnswer(fd_[1], absl::NotFoundError("unknown grant")).ok());
  const absl::Status refused = ReadLinkAnswer(fd_[0]);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(), "peer link refused: unknown grant");

  // Values that use every byte of each field, to catch a field written short.
  const LinkPieceHeader h{0x0102030405060708ull, 0x11121314, 0x21222324, 0x31323334, 5};
  ASSERT_TRUE(WriteLinkPiece(fd_[0], h, "hello").ok());
  char head[kLinkPieceHeaderBytes];
  ASSERT_TRUE(ReadFull(fd_[1], head, sizeof(head)).ok());
  absl::StatusOr<LinkPieceHeader> back = DecodeLinkPieceHeader(head);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->collective, h.collective);
  EXPECT_EQ(back->step, h.step);
  EXPECT_EQ(back->part, h.part);
  EXPECT_EQ(back->from_rank, h.from_rank);
  EXPECT_EQ(back->bytes, 5u);
  std::string data(5, '\0');
  ASSERT_TRUE(ReadFull(fd_[1], data.data(), data.size()).ok());
  EXPECT_EQ(data, "hello");
}

TEST_F(LinkWireTest, WhatIsNotALinkOrTooLargeIsRefusedNamingIt) {
  ASSERT_TRUE(WriteFull(fd_[0], "GET / HTTP/1.1\r\nHost: x\r\n\r\n").ok());
  absl::StatusOr<LinkHello> http = ReadLinkHello(fd_[1]);
  EXPECT_EQ(http.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(http.status().message().find("not a tensorgrid peer link"), std::string::npos);

  // The rest of that text is still in the socket: a new connection for the next hello.
  TearDown();
  SetUp();
  EXPECT_FALSE(EncodeLinkHello({"short", "", "g", ""}).ok());
  EXPECT_FALSE(
      EncodeLinkHello({std::string(kTicketBytes, 't'), "", std::string(65, 'g'), ""}).ok());
  // A hello that says its grant is longer than any.
  std::string long_name(kLinkMagic, kLinkMagicBytes);
  long_name += std::string(kTicketBytes, 't');
  long_name += std::string("\0\0\xff\xff", 4);  // no sender, a grant of 65535 bytes.
  ASSERT_TRUE(WriteFull(fd_[0], long_name).ok());
  absl::StatusOr<LinkHello> too_long = ReadLinkHello(fd_[1]);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("a grant of 65535 bytes (at most 64)"),
            std::string::npos)
      << too_long.status();

  LinkPieceHeader big;
  big.bytes = kMaxLinkPieceBytes + 1;
  char head[kLinkPieceHeaderBytes];
  EncodeLinkPieceHeader(big, head);
  absl::StatusOr<LinkPieceHeader> refused = DecodeLinkPieceHeader(head);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("262145 bytes"), std::string::npos);
  EXPECT_FALSE(WriteLinkPiece(fd_[0], big, std::string(big.bytes, 'x')).ok());
  LinkPieceHeader lying;
  lying.bytes = 3;
  EXPECT_FALSE(WriteLinkPiece(fd_[0], lying, "four").ok());
}

TEST_F(LinkWireTest, TheEndOfTheStreamMidPieceIsUnavailable) {
  ASSERT_TRUE(WriteFull(fd_[0], "abc").ok());
  CloseWriter();
  char buf[8];
  const absl::Status s = ReadFull(fd_[1], buf, sizeof(buf));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace tg::server
