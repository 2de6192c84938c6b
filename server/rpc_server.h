// RpcServer: builds and runs the gRPC server around TensorGridService (listening port,
// TLS/mTLS, message limits, keepalive, health service, weight cache, metrics exposer). The
// grpc.health.v1 service answers without the bearer token (probes hold none; it says only
// SERVING or not); every tensorgrid.v1 call but the peer ones checks the token.
// rpc_server_main.cc and the in-process tests start the server through it.
#ifndef TENSORGRID_SERVER_RPC_SERVER_H_
#define TENSORGRID_SERVER_RPC_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/backend.h"
#include "proto/protocol.h"
#include "server/auth_policy.h"
#include "server/host_port.h"
#include "server/peer_client.h"
#include "server/session.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tg::server {

class BlobCache;
class Metrics;
class ModelIndex;
class ServerMemoryBudget;
class TensorGridService;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = rpc::kDefaultPort;  // 0: pick a free port (see RpcServer::port()).
  std::vector<Device*> devices;
  // PEM contents (not paths). cert+key enable TLS; client_ca additionally requires and
  // verifies client certificates (mTLS).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  std::string auth_token;  // empty: no token.
  std::vector<ClientToken> client_tokens;  // --client-tokens; see ServiceOptions.
  uint64_t client_mem_limit = 0;           // --client-mem-limit; 0 = none.
  int client_max_sessions = 0;             // --client-max-sessions; 0 = none.
  PeerClientOptions peer;  // PeerPull: --peers, --peer-tls-ca/-cert/-key.
  int max_sessions = 64;
  uint64_t session_mem_limit = 0;
  uint64_t mem_budget = 0;  // bytes all sessions may hold together (--mem-budget); 0 = none.
  uint64_t max_buffers_per_session = kDefaultMaxBuffersPerSession;  // 0 = no cap.
  std::string cache_dir;            // empty: no cache.
  uint64_t cache_max_bytes = 0;     // 0: unlimited.
  // Serve /metrics on metrics_host:metrics_port (0: any free port). Loopback by default:
  // the metrics are not the service, whatever `host` is.
  std::optional<int> metrics_port;
  std::string metrics_host = "127.0.0.1";
  std::string metrics_token;  // non-empty: /metrics needs `Authorization: Bearer <token>`.
  // Serve gRPC server reflection (grpc.reflection.v1alpha): it lists every method and message
  // to anyone who can connect, without the token, so it is off unless asked for.
  bool reflection = false;
  // --model-dir: GGUF files under these directories are indexed (in the background) and
  // served to clients loading the same model. Each must be a readable directory.
  std::vector<std::string> model_dirs;
  int index_threads = 0;  // hashing threads of the index; 0: one per core.
  // --peer-link-port: where peers' links (server/peer_links.h) are taken, 0 for a free
  // port; none: no links. Without TLS only (a server with TLS offers none).
  std::optional<int> peer_link_port = 0;
  // --stream-idle-timeout: an Upload/Download idle this long is cancelled; 0: never.
  absl::Duration stream_idle_timeout = absl::Seconds(30);
};

class RpcServer {
 public:
  // Binds and starts serving; UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<RpcServer>> Start(const ServerConfig& config);
  ~RpcServer();

  int port() const { return port_; }
  std::string address() const { return JoinHostPort(host_, port_); }
  Metrics& metrics() { return *metrics_; }
  ServerMemoryBudget& budget() { return *budget_; }
  TensorGridService& service() { return *service_; }
  BlobCache* cache() { return cache_.get(); }
  ModelIndex* models() { return models_.get(); }
  // Stops accepting calls, gives running calls `grace_ms` to finish, then cancels them.
  void Shutdown(int grace_ms = 2000);
  void Wait();

 private:
  RpcServer() = default;

  std::string host_;
  int port_ = 0;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<ServerMemoryBudget> budget_;  // after metrics_, which it reports to.
  std::unique_ptr<BlobCache> cache_;
  std::unique_ptr<ModelIndex> models_;
  std::unique_ptr<TensorGridService> service_;
  std::unique_ptr<grpc::Server> server_;
  bool shut_down_ = false;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_RPC_SERVER_H_
