#include "server/host_port.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tg::server {
namespace {

absl::string_view Unbracketed(absl::string_view host) {
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

bool IsLoopbackHost(absl::string_view host) {
  host = Unbracketed(host);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
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
