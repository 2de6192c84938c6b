// LinkWire: the bytes of a peer link (server/peer_links.h), a plain TCP connection from one
// server's session to a peer server that carries that session's small all-reduce pieces for
// one grant of the peer, written and read by the command threads themselves: no HTTP/2
// framing, no flow-control frames and no thread hand-off on either side. Integers are
// little-endian.
//   hello  (dialer -> listener): kLinkMagic, the ticket (kTicketBytes, from the peer's
//          PeerLink call), u16 n + the sender key, u16 n + the grant the pieces are for,
//          u16 n + the endpoint the sender is known by in its collectives.
//   answer (listener -> dialer): u8 0 (taken) or 1 (refused), u16 n + why.
//   piece  (dialer -> listener): u64 collective, u32 step, u32 part, u32 from_rank,
//          u32 n, then n bytes (at most kMaxLinkPieceBytes).
// Blocking reads and writes over a file descriptor, whose timeouts (SO_RCVTIMEO, SO_SNDTIMEO)
// the caller sets. Functions only; thread-compatible.
#ifndef TENSORGRID_SERVER_LINK_WIRE_H_
#define TENSORGRID_SERVER_LINK_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::server {

inline constexpr char kLinkMagic[] = "TGLINK1\n";  // 8 bytes on the wire, no terminator.
inline constexpr size_t kLinkMagicBytes = 8;
inline constexpr size_t kTicketBytes = 32;  // 32 hex digits (RandomHex).
// Longest sender key and grant a hello carries (ours are 32 hex digits), and endpoint.
inline constexpr size_t kMaxLinkNameBytes = 64;
inline constexpr size_t kMaxLinkEndpointBytes = 256;
// Largest piece a link carries: a decode step's all-reduce (a 16k-wide model's row is
// 64 KiB); larger collectives go over the gRPC stream, where nothing waits on a full socket.
inline constexpr size_t kMaxLinkPieceBytes = size_t{256} << 10;
inline constexpr size_t kLinkPieceHeaderBytes = 24;

struct LinkHello {
  std::string ticket;  // kTicketBytes raw bytes.
  std::string sender;  // the sending session's key (PeerPushes::SenderKey); may be empty.
  std::string grant;   // the receiver's grant every piece of the link is for.
  // The sender's endpoint as the collectives name it (CollectiveServer.endpoint): which
  // pieces the receiver reads from this link.
  std::string from;
};

struct LinkPieceHeader {
  uint64_t collective = 0;
  uint32_t step = 0;
  uint32_t part = 0;
  uint32_t from_rank = 0;
  uint32_t bytes = 0;
};

// The hello's bytes; INVALID_ARGUMENT for a ticket of the wrong size or a name too long.
absl::StatusOr<std::string> EncodeLinkHello(const LinkHello& hello);
// Reads a hello: INVALID_ARGUMENT naming what is wrong (not a link, a name too long).
absl::StatusOr<LinkHello> ReadLinkHello(int fd);
// Writes the listener's answer: OK takes the link; any other status refuses it with its
// message (cut to 1 KiB).
absl::Status WriteLinkAnswer(int fd, const absl::Status& answer);
// Reads the answer: OK, or FAILED_PRECONDITION "peer link refused: WHY".
absl::Status ReadLinkAnswer(int fd);

void EncodeLinkPieceHeader(const LinkPieceHeader& h, char out[kLinkPieceHeaderBytes]);
// INVALID_ARGUMENT when the piece is larger than kMaxLinkPieceBytes.
absl::StatusOr<LinkPieceHeader> DecodeLinkPieceHeader(const char in[kLinkPieceHeaderBytes]);
// Writes one piece (header and data) whole.
absl::Status WriteLinkPiece(int fd, const LinkPieceHeader& h, absl::string_view data);

// Reads exactly n bytes: UNAVAILABLE "link closed" at the end of the stream or on a reset,
// DEADLINE_EXCEEDED when the socket's receive timeout passes first.
absl::Status ReadFull(int fd, void* data, size_t n);
// Writes all of `data`: UNAVAILABLE naming errno, DEADLINE_EXCEEDED when the socket's send
// timeout passes first.
absl::Status WriteFull(int fd, absl::string_view data);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_LINK_WIRE_H_
