// Health probing over grpc.health.v1, for container runtimes and cluster schedulers:
// - ProbeHealth asks a server whether it is SERVING: `rpc-server --health-probe [HOST:]PORT`
//   runs it, so a Docker HEALTHCHECK needs no third-party probe binary.
// - HealthPort serves grpc.health.v1 in plaintext on a second port (`rpc-server --health-port
//   P`) for probes that cannot speak TLS, such as Kubernetes' native gRPC probes (the kubelet
//   dials without TLS). It answers a Check by probing the main port with the server's own
//   TLS settings, so its answer is the main port's, not merely "this process is up"; an
//   answer is reused for a second and one probe runs at a time, so a flood of checks does
//   not make the server dial itself per check. It serves nothing but health, without a token
//   (as the main port's grpc.health.v1 does: a probe holds none, and the answer is only
//   SERVING or not); rpc-server binds it to --health-host, loopback by default.
// Thread-safety: ProbeHealth may be called from any thread; HealthPort is created and
// destroyed by one thread while gRPC's threads serve it.
#ifndef TENSORGRID_SERVER_HEALTH_PROBE_H_
#define TENSORGRID_SERVER_HEALTH_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/rpc_server.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tg::server {

struct HealthProbeOptions {
  std::string target;  // host:port.
  // TLS when either is set. pinned_cert_pem: accept only a server presenting this certificate
  // (the server's own --tls-cert, so a probe inside its container needs no CA and no host name
  // in the certificate). ca_pem: verify the server's chain and host name against these roots.
  std::string pinned_cert_pem;
  std::string ca_pem;
  std::string token;    // bearer token sent with the check; empty: none.
  std::string service;  // the service asked about; "" is the server as a whole.
  absl::Duration timeout = absl::Seconds(3);
};

// OK when the server answers SERVING. Otherwise UNAVAILABLE (not reachable, TLS refused, timed
// out), FAILED_PRECONDITION (reachable but NOT_SERVING), NOT_FOUND (unknown service), each
// message naming the target.
absl::Status ProbeHealth(const HealthProbeOptions& options);

// "[HOST:]PORT" (HOST may be [v6]) to host:port; the host defaults to 127.0.0.1.
absl::StatusOr<std::string> ProbeTarget(absl::string_view spec);

// `rpc-server --health-probe SPEC` with the server's flags: --tls-cert pins the certificate,
// --peer-tls-ca verifies against a CA instead, --auth-token-file sends the token. Prints one
// line and returns the process exit code: 0 when SERVING, 1 otherwise.
int RunHealthProbe(absl::string_view spec, const std::string& tls_cert_file,
                   const std::string& ca_file, const std::string& token_file);

// How a server started with `config` (listening on `port`) is probed from its own host: a
// wildcard bind is reached on loopback, TLS is checked against the server's own certificate.
HealthProbeOptions ProbeOptionsFor(const ServerConfig& config, int port);

class HealthPort {
 public:
  // Listens in plaintext on host:port (0: any free port) and answers each Check with the
  // result of probing `main` (within the caller's deadline). UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(absl::string_view host, int port,
                                                           HealthProbeOptions main);
  ~HealthPort();

  int port() const { return port_; }
  // Probes of the main port made so far (tests: checks share them).
  uint64_t probes() const;

 private:
  class Service;
  HealthPort();

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_HEALTH_PROBE_H_
