#include "server/host_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tg::server {
namespace {

// 127.0.0.0/8: the first byte of the address in network order.
bool IsLoopbackV4(const in_addr& a) { return (ntohl(a.s_addr) >> 24) == 127; }

// ::1, or an IPv4-mapped loopback address (::ffff:127.x.y.z).
bool IsLoopbackV6(const in6_addr& a) {
  if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
  if (!IN6_IS_ADDR_V4MAPPED(&a)) return false;
  return a.s6_addr[12] == 127;
}

}  // namespace

absl::string_view Unbracketed(absl::string_view host) {
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

std::optional<bool> IsLoopbackAddress(absl::string_view host) {
  const std::string text(Unbracketed(host));
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return IsLoopbackV4(v4);
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return IsLoopbackV6(v6);
  return std::nullopt;
}

bool IsLoopbackHost(absl::string_view host) {
  if (std::optional<bool> address = IsLoopbackAddress(host)) return *address;
  const std::string name(Unbracketed(host));
  if (name.empty()) return false;  // the wildcard.
  if (absl::AsciiStrToLower(name) == "localhost") return true;
  // A name counts only when every address it resolves to is a loopback one: a name that
  // merely starts like one ("127.evil.example") is whatever its DNS says.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool loopback = true;
  for (const addrinfo* a = found; a != nullptr && loopback; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      loopback = IsLoopbackV4(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr);
    } else if (a->ai_family == AF_INET6) {
      loopback = IsLoopbackV6(reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
    } else {
      loopback = false;
    }
  }
  freeaddrinfo(found);
  return loopback;
}

bool IsWildcardHost(absl::string_view host) {
  host = Unbracketed(host);
  return host.empty() || host == "0.0.0.0" || host == "::";
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

std::string LocalDialHost(absl::string_view host) {
  return IsWildcardHost(host) ? "127.0.0.1" : std::string(Unbracketed(host));
}

}  // namespace tg::server
