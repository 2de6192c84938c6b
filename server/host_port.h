// Host and host:port strings as rpc-server's flags and listeners spell them: IPv6 hosts in
// brackets, wildcard and loopback addresses. Thread-safe; only IsLoopbackHost looks names up.
#ifndef TENSORGRID_SERVER_HOST_PORT_H_
#define TENSORGRID_SERVER_HOST_PORT_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tg::server {

// For a numeric address (IPv4, IPv6, IPv6 in brackets): whether it is a loopback one
// (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104). nullopt for anything else (a name). No lookups.
std::optional<bool> IsLoopbackAddress(absl::string_view host);
// True for hosts only this machine can reach: a loopback address (IsLoopbackAddress),
// "localhost", or a name that resolves (getaddrinfo, so it may block on DNS) to loopback
// addresses only. A name that does not resolve is not loopback; a name is not parsed for
// what it looks like ("127.evil.example" is whatever its DNS says).
bool IsLoopbackHost(absl::string_view host);
// True for "bind every address": "", 0.0.0.0, ::, [::].
bool IsWildcardHost(absl::string_view host);
// `host` without the brackets of an IPv6 address ("[::1]" -> "::1"); anything else as it is.
absl::string_view Unbracketed(absl::string_view host);
// "host:port", with brackets around an IPv6 host.
std::string JoinHostPort(absl::string_view host, int port);
// The host to dial to reach a listener bound to `host` from this machine: 127.0.0.1 for a
// wildcard, else `host` without IPv6 brackets.
std::string LocalDialHost(absl::string_view host);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_HOST_PORT_H_
