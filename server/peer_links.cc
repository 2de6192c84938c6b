#include "server/peer_links.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "server/host_port.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/random_id.h"

namespace tg::server {
namespace {

void SetTimeout(int fd, int option, absl::Duration d) {
  const timeval tv = absl::ToTimeval(d);
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

// Each end's socket buffer: a whole piece fits in the sender's alone, so that two servers
// writing each other a piece at once (a butterfly step) never both wait for a reader. The
// kernel doubles the value and caps it at net.core.[rw]mem_max (208 KiB by default: 416 KiB
// of buffer, still more than kMaxLinkPieceBytes plus its header).
void SetBuffers(int fd) {
  const int bytes = static_cast<int>(2 * kMaxLinkPieceBytes);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// "1.2.3.4:port" or "[v6]:port" of a socket address.
std::string AddressOf(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
  return absl::StrCat("[", host, "]:", ntohs(in6->sin6_port));
}

// Milliseconds for poll(), at least 0.
int PollMs(absl::Duration d) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d + absl::Microseconds(999)), 0, 1 << 30));
}

}  // namespace

// ---- OutLink ------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<OutLink>> OutLink::Dial(const std::string& host, int port,
                                                       const LinkHello& hello,
                                                       absl::Duration timeout) {
  TG_ASSIGN_OR_RETURN(const std::string bytes, EncodeLinkHello(hello));
  const std::string bare(Unbracketed(host));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(bare.c_str(), absl::StrCat(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("peer link: ", host, " is not an address"));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return absl::UnavailableError(absl::StrCat("peer link: socket: ", std::strerror(errno)));
  }
  std::unique_ptr<OutLink> link(new OutLink(fd));
  SetBuffers(fd);
  const int rc = connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  const std::string where = absl::StrCat(host, ":", port);
  if (rc != 0 && errno != EINPROGRESS) {
    return absl::UnavailableError(
        absl::StrCat("peer link to ", where, ": connect: ", std::strerror(errno)));
  }
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, PollMs(timeout)) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      return absl::UnavailableError(absl::StrCat(
          "peer link to ", where, ": connect: ", err != 0 ? std::strerror(err) : "timed out"));
    }
  }
  // Blocking from here, with timeouts: the command threads write and read it directly.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  SetNoDelay(fd);
  SetTimeout(fd, SO_SNDTIMEO, PeerLinks::kPieceWait);
  SetTimeout(fd, SO_RCVTIMEO, timeout);
  TG_RETURN_IF_ERROR(WriteFull(fd, bytes));
  TG_RETURN_IF_ERROR(ReadLinkAnswer(fd));
  return link;
}

OutLink::~OutLink() { close(fd_); }

absl::Status OutLink::Send(const LinkPieceHeader& header, absl::string_view data) {
  absl::MutexLock lock(&mu_);
  if (broken_) return absl::UnavailableError("peer link closed");
  absl::Status s = WriteLinkPiece(fd_, header, data);
  if (!s.ok()) broken_ = true;
  return s;
}

bool OutLink::ClosedByPeer() const {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) != 1) return false;
  char byte;
  return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0 || (p.revents & (POLLHUP | POLLERR));
}

bool OutLink::broken() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

// ---- PeerLinks ----------------------------------------------------------------------------

PeerLinks::InLink::~InLink() {
  if (fd >= 0) close(fd);
}

PeerLinks::PeerLinks(GrantTable* grants, PeerAllowList allowed, Metrics* metrics)
    : grants_(grants), allowed_(std::move(allowed)), metrics_(metrics) {
  if (grants_ != nullptr) grants_->AddListener(this);
}

PeerLinks::~PeerLinks() {
  if (acceptor_.joinable()) {
    const char stop = 1;
    (void)!write(wake_fd_[1], &stop, 1);
    acceptor_.join();
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) close(fd);
  }
  if (grants_ != nullptr) grants_->RemoveListener(this);
}

absl::Status PeerLinks::Listen(const std::string& host, int port) {
  if (listen_fd_ >= 0) return absl::FailedPreconditionError("peer links: already listening");
  const std::string bare(Unbracketed(host));
  const std::string where = JoinHostPort(host, port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(bare.empty() ? nullptr : bare.c_str(), absl::StrCat(port).c_str(),
                                 &hints, &found);
      rc != 0 || found == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("peer links: cannot resolve ", where, ": ", gai_strerror(rc)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    SetBuffers(fd);  // accepted connections inherit them.
  }
  const bool bound =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 64) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (!bound) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("peer links: cannot listen on ", where, ": ", std::strerror(err)));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port_bound =
      ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                      : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  if (pipe2(wake_fd_, O_CLOEXEC) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("peer links: pipe: ", std::strerror(errno)));
  }
  listen_fd_ = fd;
  acceptor_ = std::thread([this] { AcceptLoop(); });
  // Last: peers get tickets, and pieces go over links, from here on.
  port_.store(port_bound);
  return absl::OkStatus();
}

void PeerLinks::AcceptLoop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      kServerLog.Error("peer links: poll failed", {{"error", std::strerror(errno)}});
      return;
    }
    if (p[1].revents != 0) return;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the caller gave up, or too many files: the next one may do.
    Admit(fd, AddressOf(addr));
  }
}

void PeerLinks::Admit(int fd, const std::string& peer) {
  auto link = std::make_shared<InLink>();
  link->fd = fd;
  link->peer = peer;
  // From an address --peers allows, before a byte is read.
  if (absl::Status s = allowed_.CheckCaller(peer); !s.ok()) {
    kServerLog.Warn("peer link refused", {{"peer", peer}, {"error", s.message()}});
    return;  // closed with `link`.
  }
  SetTimeout(fd, SO_RCVTIMEO, kHelloWait);
  SetTimeout(fd, SO_SNDTIMEO, kHelloWait);
  absl::StatusOr<LinkHello> hello = ReadLinkHello(fd);
  absl::Status ok = hello.ok() ? CheckHello(*hello) : hello.status();
  (void)WriteLinkAnswer(fd, ok);
  if (!ok.ok()) {
    kServerLog.Warn("peer link refused", {{"peer", peer}, {"error", ok.message()}});
    return;
  }
  SetNoDelay(fd);
  // Once a piece has begun, the rest follows at once; waits for the next piece are polls.
  SetTimeout(fd, SO_RCVTIMEO, kPieceWait);
  link->sender = hello->sender;
  std::shared_ptr<InLink> replaced;  // closed outside the lock.
  absl::ReleasableMutexLock lock(&mu_);
  auto& slot = links_[LinkKey(hello->grant, hello->from)];
  replaced = std::move(slot);
  if (replaced == nullptr && links_.size() > kMaxLinks) {
    links_.erase(LinkKey(hello->grant, hello->from));
    kServerLog.Warn("peer link refused", {{"peer", peer}, {"error", "too many links"}});
    return;
  }
  // A sender that dials again (its link broke) replaces its link.
  if (replaced != nullptr) shutdown(replaced->fd, SHUT_RDWR);
  slot = link;
  lock.Release();
  // A grant revoked since CheckHello told no one of this link: drop it now.
  if (grants_->Find(hello->grant) == nullptr) Revoked(hello->grant);
}

absl::Status PeerLinks::CheckHello(const LinkHello& hello) {
  {
    absl::MutexLock lock(&mu_);
    auto it = tickets_.find(hello.ticket);
    if (it == tickets_.end()) return absl::PermissionDeniedError("unknown or used ticket");
    const bool fresh = absl::Now() - it->second <= kTicketLife;
    tickets_.erase(it);
    if (!fresh) return absl::PermissionDeniedError("expired ticket");
  }
  if (grants_ == nullptr || grants_->Find(hello.grant) == nullptr) {
    return absl::NotFoundError("unknown or revoked grant");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PeerLinks::IssueTicket() {
  if (port() == 0) return absl::FailedPreconditionError("this server takes no peer links");
  const absl::Time now = absl::Now();
  std::string ticket = RandomHex(kTicketBytes / 2);
  absl::MutexLock lock(&mu_);
  if (tickets_.size() >= kMaxTickets) {
    absl::erase_if(tickets_, [&](const auto& t) { return now - t.second > kTicketLife; });
  }
  if (tickets_.size() >= kMaxTickets) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("peer links: %d tickets wait for their links", tickets_.size()));
  }
  tickets_[ticket] = now;
  return ticket;
}

bool PeerLinks::Linked(const std::string& grant, const std::string& from) const {
  absl::MutexLock lock(&mu_);
  return links_.contains(LinkKey(grant, from));
}

size_t PeerLinks::links() const {
  absl::MutexLock lock(&mu_);
  return links_.size();
}

void PeerLinks::Revoked(const std::string& grant) {
  std::vector<std::shared_ptr<InLink>> gone;  // closed outside the lock.
  absl::MutexLock lock(&mu_);
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->first.first == grant) {
      // Wakes a reader polling it; the descriptor closes with its last holder.
      shutdown(it->second->fd, SHUT_RDWR);
      gone.push_back(std::move(it->second));
      links_.erase(it++);
    } else {
      ++it;
    }
  }
}

void PeerLinks::Drop(const LinkKey& key, const std::shared_ptr<InLink>& link,
                     const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    auto it = links_.find(key);
    if (it != links_.end() && it->second == link) links_.erase(it);
  }
  shutdown(link->fd, SHUT_RDWR);
  // A sender that closed its link (its session ended) is the usual end.
  if (why.code() != absl::StatusCode::kUnavailable) {
    kServerLog.Warn("peer link dropped", {{"peer", link->peer}, {"error", why.message()}});
  }
}

absl::StatusOr<std::optional<std::string>> PeerLinks::ReadPiece(InLink& link, const PieceKey& key,
                                                                ReduceMailbox& mailbox) {
  char head[kLinkPieceHeaderBytes];
  TG_RETURN_IF_ERROR(ReadFull(link.fd, head, sizeof(head)));
  TG_ASSIGN_OR_RETURN(const LinkPieceHeader h, DecodeLinkPieceHeader(head));
  std::string data(h.bytes, '\0');
  TG_RETURN_IF_ERROR(ReadFull(link.fd, data.data(), data.size()));
  if (metrics_ != nullptr) metrics_->PeerCopyBytes(data.size());
  PieceKey got{key.grant, h.collective, h.step, h.part, h.from_rank};
  if (got == key) return data;
  TG_RETURN_IF_ERROR(mailbox.Put(std::move(got), std::move(data), "peer_reduce", link.sender));
  return std::nullopt;
}

std::optional<std::string> PeerLinks::Take(const PieceKey& key, const std::string& from,
                                           absl::Duration wait, ReduceMailbox& mailbox) {
  const LinkKey lk(key.grant, from);
  const absl::Time deadline = absl::Now() + wait;
  for (;;) {
    if (std::optional<std::string> there = mailbox.TryTake(key)) return there;
    std::shared_ptr<InLink> link;
    {
      absl::MutexLock lock(&mu_);
      auto it = links_.find(lk);
      if (it != links_.end()) link = it->second;
    }
    if (link == nullptr) return std::nullopt;
    const absl::Duration left = deadline - absl::Now();
    if (!link->read_mu.TryLock()) {
      // Another command thread reads this link: what it reads for us goes to the mailbox.
      absl::StatusOr<std::string> filed =
          mailbox.Take(key, absl::Now() + std::min(left, absl::Milliseconds(1)),
                       absl::InfiniteDuration(), [] { return absl::OkStatus(); });
      if (filed.ok()) return *std::move(filed);
    } else {
      pollfd p{link->fd, POLLIN, 0};
      int ready = 0;
      const absl::Time spin_end = std::min(deadline, absl::Now() + kSpinBeforeSleep);
      while ((ready = poll(&p, 1, 0)) == 0 && absl::Now() < spin_end) {
        sched_yield();  // a server computing on this core (more servers than cores) goes on.
      }
      if (ready == 0)
        ready = poll(&p, 1, PollMs(std::max(deadline - absl::Now(), absl::ZeroDuration())));
      absl::StatusOr<std::optional<std::string>> piece = std::optional<std::string>();
      if (ready == 1) piece = ReadPiece(*link, key, mailbox);
      link->read_mu.Unlock();
      if (!piece.ok()) {
        Drop(lk, link, piece.status());
        return std::nullopt;
      }
      if (piece->has_value()) return *std::move(piece);
    }
    if (absl::Now() >= deadline) return std::nullopt;
  }
}

}  // namespace tg::server
