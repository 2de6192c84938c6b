#include "server/peer_allow_list.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace tg::server {
namespace {

constexpr int kV4Bits = 32;
constexpr int kV6Bits = 128;
constexpr int kMaxPort = 65535;
// The prefix of an IPv4 address mapped into IPv6 (::ffff:a.b.c.d): matched as the IPv4
// address, so that a mapped spelling neither escapes nor misses an IPv4 entry.
constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

struct HostPort {
  std::string host;  // without brackets.
  int port = 0;      // 0: none given.
};

absl::StatusOr<int> ParsePort(absl::string_view s, absl::string_view what) {
  int port = 0;
  if (!absl::SimpleAtoi(s, &port) || port < 1 || port > kMaxPort) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": port '", s, "' is not a number in 1..", kMaxPort));
  }
  return port;
}

// "host", "host:port", "[v6]", "[v6]:port" or a bare v6 address (two colons or more).
absl::StatusOr<HostPort> SplitHostPort(absl::string_view s, absl::string_view what) {
  HostPort out;
  if (absl::ConsumePrefix(&s, "[")) {
    const size_t close = s.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '[' without ']'"));
    }
    out.host = std::string(s.substr(0, close));
    absl::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (!absl::ConsumePrefix(&rest, ":")) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": text after ']'"));
      }
      TG_ASSIGN_OR_RETURN(out.port, ParsePort(rest, what));
    }
  } else if (std::count(s.begin(), s.end(), ':') == 1) {
    const size_t colon = s.find(':');
    out.host = std::string(s.substr(0, colon));
    TG_ASSIGN_OR_RETURN(out.port, ParsePort(s.substr(colon + 1), what));
  } else {
    out.host = std::string(s);
  }
  if (out.host.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no host"));
  return out;
}

// A name as DNS and /etc/hosts spell them; anything else is a typo or an attack.
bool ValidName(absl::string_view host) {
  return std::all_of(host.begin(), host.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

struct Address {
  bool v6 = false;
  std::array<uint8_t, 16> bytes = {};
};

Address FromV6(const uint8_t* b) {
  Address a;
  if (std::memcmp(b, kV4MappedPrefix, sizeof(kV4MappedPrefix)) == 0) {
    std::memcpy(a.bytes.data(), b + sizeof(kV4MappedPrefix), 4);
  } else {
    a.v6 = true;
    std::memcpy(a.bytes.data(), b, 16);
  }
  return a;
}

std::optional<Address> ParseAddress(const std::string& s) {
  uint8_t buf[16];
  if (inet_pton(AF_INET, s.c_str(), buf) == 1) {
    Address a;
    std::memcpy(a.bytes.data(), buf, 4);
    return a;
  }
  if (inet_pton(AF_INET6, s.c_str(), buf) == 1) return FromV6(buf);
  return std::nullopt;
}

std::optional<Address> FromSockaddr(const sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  if (sa->sa_family == AF_INET) {
    Address a;
    std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
    return a;
  }
  if (sa->sa_family == AF_INET6) {
    return FromV6(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr.s6_addr);
  }
  return std::nullopt;
}

std::string FormatAddress(const Address& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(a.v6 ? AF_INET6 : AF_INET, a.bytes.data(), buf, sizeof(buf));
  return buf;
}

int Bits(bool v6) { return v6 ? kV6Bits : kV4Bits; }

void ClearHostBits(std::array<uint8_t, 16>& bytes, int prefix) {
  for (int bit = prefix; bit < kV6Bits; ++bit) bytes[bit / 8] &= ~(0x80 >> (bit % 8));
}

bool InPrefix(const std::array<uint8_t, 16>& net, const std::array<uint8_t, 16>& addr, int prefix) {
  std::array<uint8_t, 16> masked = addr;
  ClearHostBits(masked, prefix);
  return masked == net;
}

// Every address `host` resolves to (itself when it is one); empty when it does not resolve.
std::vector<Address> Resolve(const std::string& host) {
  if (std::optional<Address> a = ParseAddress(host)) return {*a};
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return {};
  std::vector<Address> out;
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (std::optional<Address> a = FromSockaddr(ai->ai_addr)) out.push_back(*a);
  }
  freeaddrinfo(list);
  return out;
}

}  // namespace

absl::StatusOr<PeerAllowList::Range> PeerAllowList::ParseRange(absl::string_view entry) {
  const std::string what = absl::StrCat("--peers entry '", entry, "'");
  const size_t slash = entry.find('/');
  std::optional<Address> a = ParseAddress(std::string(entry.substr(0, slash)));
  if (!a.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not an IPv4 or IPv6 address"));
  }
  Range r;
  r.v6 = a->v6;
  r.addr = a->bytes;
  r.prefix = Bits(a->v6);
  if (slash != absl::string_view::npos && (!absl::SimpleAtoi(entry.substr(slash + 1), &r.prefix) ||
                                           r.prefix < 0 || r.prefix > Bits(a->v6))) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": prefix length must be 0..", Bits(a->v6)));
  }
  ClearHostBits(r.addr, r.prefix);
  return r;
}

absl::Status PeerAllowList::AddEntry(absl::string_view entry, PeerAllowList& out) {
  const std::string what = absl::StrCat("--peers entry '", entry, "'");
  if (absl::StrContains(entry, '/')) {
    TG_ASSIGN_OR_RETURN(Range r, ParseRange(entry));
    out.ranges_.push_back(r);
    return absl::OkStatus();
  }
  TG_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(entry, what));
  if (ParseAddress(hp.host).has_value()) {
    TG_ASSIGN_OR_RETURN(Range r, ParseRange(hp.host));
    r.port = hp.port;
    out.ranges_.push_back(r);
    return absl::OkStatus();
  }
  if (!ValidName(hp.host)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a host name, address, host:port or CIDR range"));
  }
  out.names_.push_back({absl::AsciiStrToLower(hp.host), hp.port});
  if (out.name_cache_ == nullptr) out.name_cache_ = std::make_shared<NameCache>();
  return absl::OkStatus();
}

absl::StatusOr<PeerAllowList> PeerAllowList::Parse(absl::string_view list) {
  PeerAllowList out;
  list = absl::StripAsciiWhitespace(list);
  if (list == "none") return out;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peers '", list, "' has an empty entry ('none' allows no peer)"));
    }
    TG_RETURN_IF_ERROR(AddEntry(entry, out));
  }
  return out;
}

PeerAllowList PeerAllowList::Default() { return *Parse("127.0.0.0/8,::1"); }

bool PeerAllowList::Allows(const Range& address, int port) const {
  return std::any_of(ranges_.begin(), ranges_.end(), [&](const Range& r) {
    return r.v6 == address.v6 && (r.port == 0 || r.port == port) &&
           InPrefix(r.addr, address.addr, r.prefix);
  });
}

absl::StatusOr<PeerTarget> PeerAllowList::Check(absl::string_view endpoint) const {
  const std::string what = absl::StrCat("peer endpoint '", endpoint, "'");
  TG_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(endpoint, what));
  if (hp.port == 0) return absl::InvalidArgumentError(absl::StrCat(what, " needs host:port"));
  const std::string host = absl::AsciiStrToLower(hp.host);
  for (const Name& n : names_) {
    if (n.host == host && (n.port == 0 || n.port == hp.port)) {
      return PeerTarget{std::string(endpoint), ""};
    }
  }
  const bool literal = ParseAddress(hp.host).has_value();
  if (literal || ValidName(hp.host)) {
    // A name entry allows the addresses it resolves to, under any name (a service's name
    // covers its replicas: rpc-server-1.rpc-server is one of rpc-server's addresses).
    const std::vector<Range> named = NamedAddresses();
    for (const Address& a : Resolve(hp.host)) {
      const Range r{a.v6, a.bytes, Bits(a.v6), 0};
      const bool by_name = std::any_of(named.begin(), named.end(), [&](const Range& n) {
        return n.v6 == r.v6 && n.addr == r.addr && (n.port == 0 || n.port == hp.port);
      });
      if (!by_name && !Allows(r, hp.port)) continue;
      const std::string addr = FormatAddress(a);
      return PeerTarget{
          a.v6 ? absl::StrCat("[", addr, "]:", hp.port) : absl::StrCat(addr, ":", hp.port),
          literal ? "" : hp.host};
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat(endpoint,
                   " is not an allowed peer of this server: no connection was made (rpc-server "
                   "--peers lists the hosts, host:port and CIDR ranges of its peers; "
                   "default: loopback only)"));
}

std::vector<PeerAllowList::Range> PeerAllowList::NamedAddresses() const {
  if (name_cache_ == nullptr) return {};
  absl::MutexLock lock(&name_cache_->mu);
  const absl::Time now = absl::Now();
  if (now - name_cache_->resolved > kNameTtl) {
    name_cache_->addresses.clear();
    for (const Name& n : names_) {
      for (const Address& a : Resolve(n.host)) {
        name_cache_->addresses.push_back(Range{a.v6, a.bytes, Bits(a.v6), n.port});
      }
    }
    name_cache_->resolved = now;
  }
  return name_cache_->addresses;
}

absl::Status PeerAllowList::CheckCaller(absl::string_view caller) const {
  const std::string what = absl::StrCat("peer call from '", caller, "'");
  std::optional<Address> address;
  absl::StatusOr<HostPort> hp = SplitHostPort(caller, what);
  if (hp.ok()) address = ParseAddress(hp->host);
  if (address.has_value()) {
    auto inside = [&](const Range& r) {
      return r.v6 == address->v6 && InPrefix(r.addr, address->bytes, r.prefix);
    };
    if (std::any_of(ranges_.begin(), ranges_.end(), inside)) return absl::OkStatus();
    const std::vector<Range> named = NamedAddresses();
    if (std::any_of(named.begin(), named.end(), inside)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      what,
      " refused: not an allowed peer of this server (rpc-server --peers lists the hosts, "
      "host:port and CIDR ranges of its peers; default: loopback only)"));
}

std::string PeerAllowList::ToString() const {
  std::vector<std::string> parts;
  for (const Range& r : ranges_) {
    const std::string addr = FormatAddress({r.v6, r.addr});
    std::string s = r.prefix == Bits(r.v6) ? addr : absl::StrCat(addr, "/", r.prefix);
    if (r.port != 0) s = r.v6 ? absl::StrCat("[", s, "]:", r.port) : absl::StrCat(s, ":", r.port);
    parts.push_back(std::move(s));
  }
  for (const Name& n : names_) {
    parts.push_back(n.port == 0 ? n.host : absl::StrCat(n.host, ":", n.port));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ",");
}

}  // namespace tg::server
