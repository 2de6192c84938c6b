#include "server/link_wire.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tg::server {
namespace {

constexpr size_t kMaxAnswerChars = 1024;

// Writes the low `bytes` bytes of v at `out`, little-endian; returns the byte after them.
char* StoreLe(uint64_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out + bytes;
}

void PutLe(uint64_t v, int bytes, std::string* out) {
  char b[8];
  out->append(b, StoreLe(v, bytes, b) - b);
}

uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

absl::Status IoError(const char* what, int err) {
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return absl::DeadlineExceededError(absl::StrFormat("peer link: %s timed out", what));
  }
  return absl::UnavailableError(absl::StrFormat("peer link: %s: %s", what, std::strerror(err)));
}

// Reads a u16 length and that many bytes (at most `max`).
absl::StatusOr<std::string> ReadName(int fd, size_t max, const char* what) {
  char n[2];
  TG_RETURN_IF_ERROR(ReadFull(fd, n, sizeof(n)));
  const size_t len = GetLe(n, 2);
  if (len > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("peer link hello: a %s of %d bytes (at most %d)", what, len, max));
  }
  std::string out(len, '\0');
  TG_RETURN_IF_ERROR(ReadFull(fd, out.data(), len));
  return out;
}

}  // namespace

absl::Status ReadFull(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r == 0) return absl::UnavailableError("peer link closed");
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET) return absl::UnavailableError("peer link closed");
      return IoError("read", errno);
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, absl::string_view data) {
  while (!data.empty()) {
    // MSG_NOSIGNAL: a peer that closed is an error here, not a SIGPIPE for the server.
    const ssize_t w = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("write", errno);
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeLinkHello(const LinkHello& hello) {
  if (hello.ticket.size() != kTicketBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("peer link ticket of %d bytes (want %d)",
                                                      hello.ticket.size(), kTicketBytes));
  }
  if (hello.sender.size() > kMaxLinkNameBytes || hello.grant.size() > kMaxLinkNameBytes ||
      hello.from.size() > kMaxLinkEndpointBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer link: sender key of %d and grant of %d bytes (at most %d each), endpoint of %d "
        "(at most %d)",
        hello.sender.size(), hello.grant.size(), kMaxLinkNameBytes, hello.from.size(),
        kMaxLinkEndpointBytes));
  }
  std::string out(kLinkMagic, kLinkMagicBytes);
  out += hello.ticket;
  PutLe(hello.sender.size(), 2, &out);
  out += hello.sender;
  PutLe(hello.grant.size(), 2, &out);
  out += hello.grant;
  PutLe(hello.from.size(), 2, &out);
  out += hello.from;
  return out;
}

absl::StatusOr<LinkHello> ReadLinkHello(int fd) {
  // The magic alone first: what is not a link is refused without waiting for more.
  char magic[kLinkMagicBytes];
  TG_RETURN_IF_ERROR(ReadFull(fd, magic, sizeof(magic)));
  if (std::memcmp(magic, kLinkMagic, kLinkMagicBytes) != 0) {
    return absl::InvalidArgumentError("peer link hello: not a tensorgrid peer link");
  }
  LinkHello hello;
  hello.ticket.assign(kTicketBytes, '\0');
  TG_RETURN_IF_ERROR(ReadFull(fd, hello.ticket.data(), kTicketBytes));
  TG_ASSIGN_OR_RETURN(hello.sender, ReadName(fd, kMaxLinkNameBytes, "sender key"));
  TG_ASSIGN_OR_RETURN(hello.grant, ReadName(fd, kMaxLinkNameBytes, "grant"));
  TG_ASSIGN_OR_RETURN(hello.from, ReadName(fd, kMaxLinkEndpointBytes, "endpoint"));
  return hello;
}

absl::Status WriteLinkAnswer(int fd, const absl::Status& answer) {
  std::string out(1, answer.ok() ? '\0' : '\1');
  const std::string why(answer.message().substr(0, kMaxAnswerChars));
  PutLe(why.size(), 2, &out);
  out += why;
  return WriteFull(fd, out);
}

absl::Status ReadLinkAnswer(int fd) {
  char code;
  TG_RETURN_IF_ERROR(ReadFull(fd, &code, 1));
  TG_ASSIGN_OR_RETURN(const std::string why, ReadName(fd, kMaxAnswerChars, "answer"));
  if (code == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("peer link refused: ", why));
}

void EncodeLinkPieceHeader(const LinkPieceHeader& h, char out[kLinkPieceHeaderBytes]) {
  out = StoreLe(h.collective, 8, out);
  out = StoreLe(h.step, 4, out);
  out = StoreLe(h.part, 4, out);
  out = StoreLe(h.from_rank, 4, out);
  StoreLe(h.bytes, 4, out);
}

absl::StatusOr<LinkPieceHeader> DecodeLinkPieceHeader(const char in[kLinkPieceHeaderBytes]) {
  LinkPieceHeader h;
  h.collective = GetLe(in, 8);
  h.step = static_cast<uint32_t>(GetLe(in + 8, 4));
  h.part = static_cast<uint32_t>(GetLe(in + 12, 4));
  h.from_rank = static_cast<uint32_t>(GetLe(in + 16, 4));
  h.bytes = static_cast<uint32_t>(GetLe(in + 20, 4));
  if (h.bytes > kMaxLinkPieceBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("peer link: a piece of %d bytes (at most %d)",
                                                      h.bytes, kMaxLinkPieceBytes));
  }
  return h;
}

absl::Status WriteLinkPiece(int fd, const LinkPieceHeader& h, absl::string_view data) {
  if (data.size() != h.bytes || data.size() > kMaxLinkPieceBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("peer link: a piece of %d bytes under a header of %d (at most %d)",
                        data.size(), h.bytes, kMaxLinkPieceBytes));
  }
  char head[kLinkPieceHeaderBytes];
  EncodeLinkPieceHeader(h, head);
  // One sendmsg for header and data: a small piece leaves as one segment.
  iovec iov[2] = {{head, sizeof(head)}, {const_cast<char*>(data.data()), data.size()}};
  size_t left = sizeof(head) + data.size();
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  while (left > 0) {
    const ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("write", errno);
    }
    left -= static_cast<size_t>(w);
    size_t done = static_cast<size_t>(w);
    while (msg.msg_iovlen > 0 && done >= msg.msg_iov->iov_len) {
      done -= msg.msg_iov->iov_len;
      ++msg.msg_iov;
      --msg.msg_iovlen;
    }
    if (msg.msg_iovlen > 0) {
      msg.msg_iov->iov_base = static_cast<char*>(msg.msg_iov->iov_base) + done;
      msg.msg_iov->iov_len -= done;
    }
  }
  return absl::OkStatus();
}

}  // namespace tg::server
