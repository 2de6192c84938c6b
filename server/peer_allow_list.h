// PeerAllowList: the endpoints rpc-server may open connections to for server-to-server copies
// (rpc-server --peers). A PeerPull makes the server connect where a client says; outbound
// connections are a privilege, so an endpoint outside the list is refused before anything is
// resolved by gRPC or sent. Immutable after construction: safe to share between threads.
#ifndef TENSORGRID_SERVER_PEER_ALLOW_LIST_H_
#define TENSORGRID_SERVER_PEER_ALLOW_LIST_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::server {

// Where to connect for an allowed endpoint.
struct PeerTarget {
  // "1.2.3.4:port" or "[v6]:port": the checked address, so that a second resolution of the
  // name cannot lead elsewhere; the endpoint as given when a name entry allowed it.
  std::string address;
  // The name the client gave when `address` is an address it resolved to (the peer's TLS
  // certificate is checked against it); empty otherwise.
  std::string server_name;
};

class PeerAllowList {
 public:
  // LIST: comma-separated entries, each a host (a name or address: any port), host:port,
  // [v6] or [v6]:port, or a CIDR range (10.0.0.0/8, fd00::/8: any port); "none" alone
  // allows nothing. INVALID_ARGUMENT names the entry that does not parse.
  static absl::StatusOr<PeerAllowList> Parse(absl::string_view list);
  // Loopback (127.0.0.0/8, ::1) and the subnets of this machine's interfaces that are up:
  // the other containers of a compose network or pods of a node's subnet, nothing else.
  static PeerAllowList Default();

  // Where to connect for `endpoint` ("host:port", "[v6]:port"): allowed when its host is a
  // name entry (with its port, if the entry has one), or when it resolves to an address
  // inside an address entry. PERMISSION_DENIED naming the endpoint and the flag otherwise;
  // INVALID_ARGUMENT for a malformed endpoint.
  absl::StatusOr<PeerTarget> Check(absl::string_view endpoint) const;

  // The entries, comma-separated, CIDR ranges normalized ("127.0.0.0/8,db:50052").
  std::string ToString() const;

 private:
  struct Range {
    bool v6 = false;
    std::array<uint8_t, 16> addr = {};  // host bits cleared.
    int prefix = 0;
    int port = 0;  // 0: any.
  };
  struct Name {
    std::string host;  // lower case.
    int port = 0;      // 0: any.
  };

  static absl::StatusOr<Range> ParseRange(absl::string_view entry);
  static absl::Status AddEntry(absl::string_view entry, PeerAllowList& out);
  bool Allows(const Range& address, int port) const;

  std::vector<Range> ranges_;
  std::vector<Name> names_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_ALLOW_LIST_H_
