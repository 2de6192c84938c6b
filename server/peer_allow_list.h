// PeerAllowList: the servers rpc-server exchanges data with directly (rpc-server --peers).
// Outbound: a PeerPull makes the server connect where a client says; outbound connections
// are a privilege, so an endpoint outside the list is refused before anything is resolved by
// gRPC or sent. Inbound: a peer call (PeerCopy, PeerDeliver, PeerReduce[Stream]) is taken
// only from a caller whose address the list allows. The default is loopback only: a cluster
// names its hosts or CIDR ranges. Thread-safe (immutable after construction, but for a cache
// of the name entries' addresses, which has its own lock).
#ifndef TENSORGRID_SERVER_PEER_ALLOW_LIST_H_
#define TENSORGRID_SERVER_PEER_ALLOW_LIST_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

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
  // Loopback (127.0.0.0/8, ::1) only: servers on one host. Servers on other hosts are named
  // with --peers (a host's subnets are no trust boundary: other tenants' pods share them).
  static PeerAllowList Default();

  // Where to connect for `endpoint` ("host:port", "[v6]:port"): allowed when its host is a
  // name entry (with its port, if the entry has one), or when it resolves to an address
  // inside an address entry or to one a name entry resolves to (so that a service name
  // allows its replicas' own names). PERMISSION_DENIED naming the endpoint and the flag otherwise;
  // INVALID_ARGUMENT for a malformed endpoint.
  absl::StatusOr<PeerTarget> Check(absl::string_view endpoint) const;

  // An inbound peer call from `caller` ("1.2.3.4:port", "[v6]:port" or a bare address, as
  // the transport reports it): OK when the address is inside an address entry or is one a
  // name entry resolves to (resolved at most every kNameTtl), whatever the entries' ports (a
  // caller's port is its own ephemeral one). PERMISSION_DENIED naming the address and the
  // flag otherwise, also for a caller that is not an IP address.
  absl::Status CheckCaller(absl::string_view caller) const;
  static constexpr absl::Duration kNameTtl = absl::Seconds(30);

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
  // The addresses the name entries resolve to (with the entries' ports), resolved again
  // after kNameTtl.
  std::vector<Range> NamedAddresses() const;

  // The addresses the name entries resolved to, and when.
  struct NameCache {
    absl::Mutex mu;
    absl::Time resolved ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    std::vector<Range> addresses ABSL_GUARDED_BY(mu);
  };

  std::vector<Range> ranges_;
  std::vector<Name> names_;
  // Shared by copies of this list; made when the first name entry is added.
  std::shared_ptr<NameCache> name_cache_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_ALLOW_LIST_H_
