// Host and host:port strings as rpc-server's flags and listeners spell them: IPv6 hosts in
// brackets, wildcard and loopback addresses. Pure functions; thread-safe.
#ifndef TENSORGRID_SERVER_HOST_PORT_H_
#define TENSORGRID_SERVER_HOST_PORT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tg::server {

// True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(absl::string_view host);
// True for "bind every address": "", 0.0.0.0, ::, [::].
bool IsWildcardHost(absl::string_view host);
// "host:port", with brackets around an IPv6 host.
std::string JoinHostPort(absl::string_view host, int port);
// The host to dial to reach a listener bound to `host` from this machine: 127.0.0.1 for a
// wildcard, else `host` without IPv6 brackets.
std::string LocalDialHost(absl::string_view host);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_HOST_PORT_H_
