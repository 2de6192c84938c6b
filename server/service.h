// TensorGridService: the tensorgrid.v1 gRPC service (sync API, but for Upload and
// PeerReduceStream, which use the callback API so that an idle stream holds no thread). Owns the
// server-wide session table and grant table; Session streams create and destroy Sessions, Upload,
// FillPieces and Download reach into them by session id, PeerCopy serves grants to other servers.
// Every method first asks the auth table who may call it (server/auth_policy.h): clients with
// the bearer token, or, for the peer calls (PeerCopy, PeerDeliver, PeerReduce,
// PeerReduceStream, PeerLink), authenticated peers at allowed addresses.
// Thread-safe (gRPC calls every method from its own threads).
#ifndef TENSORGRID_SERVER_SERVICE_H_
#define TENSORGRID_SERVER_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/backend.h"
#include "server/auth_policy.h"
#include "server/client_accounts.h"
#include "server/collective_runner.h"
#include "server/grant_table.h"
#include "server/peer_client.h"
#include "server/peer_links.h"
#include "server/peer_pushes.h"
#include "server/session.h"
#include "server/session_buffer_recycler.h"
#include "server/stream_deadline.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {

class BlobCache;
class Metrics;
class ModelIndex;

struct ServiceOptions {
  std::vector<Device*> devices;  // exposed in this order (DeviceInfo.index).
  std::string auth_token;        // empty: no bearer token required.
  // Clients' own tokens (--client-tokens): each names its client (AuthPolicy::ClientOf).
  std::vector<ClientToken> client_tokens;
  // What one client's sessions may hold together (--client-mem-limit), and how many it may
  // have open (--client-max-sessions); 0 = no limit.
  uint64_t client_mem_limit = 0;
  int client_max_sessions = 0;
  int max_sessions = 64;
  uint64_t session_mem_limit = 0;  // bytes; 0 = no limit.
  // What all sessions hold together (--mem-budget); may be null (no budget). Must outlive
  // the service.
  ServerMemoryBudget* budget = nullptr;
  uint64_t max_buffers_per_session = kDefaultMaxBuffersPerSession;  // 0 = no cap.
  BlobCache* cache = nullptr;      // --cache; may be null.
  ModelIndex* models = nullptr;    // --model-dir; may be null.
  Metrics* metrics = nullptr;      // may be null.
  PeerClientOptions peer;          // PeerPull: allowed peers, TLS.
  // An Upload or Download that makes no progress (no message received, no write accepted)
  // for this long is cancelled and lets go of its buffer (--stream-idle-timeout); zero or
  // less: never.
  absl::Duration stream_idle_timeout = absl::Seconds(30);
};

class TensorGridService final
    : public ::tensorgrid::v1::TensorGrid::WithCallbackMethod_PeerReduceStream<
          ::tensorgrid::v1::TensorGrid::Service> {
 public:
  explicit TensorGridService(ServiceOptions options);
  ~TensorGridService() override;

  grpc::Status Hello(grpc::ServerContext* context, const ::tensorgrid::v1::HelloRequest* request,
                     ::tensorgrid::v1::HelloReply* reply) override;
  // Session, on raw byte buffers: each request's counts are checked on its wire bytes
  // (server/request_precheck.h) before it is parsed. Installed in place of the generated
  // handler.
  grpc::Status SessionRaw(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<::tensorgrid::v1::SessionReply, grpc::ByteBuffer>* stream);
  // Upload, on raw byte buffers (proto/upload_frame.h) and the callback API: chunk bytes go
  // from gRPC's slices straight into the session's buffer on the gRPC thread that read them,
  // and a stream waiting for its client holds no thread. Installed in place of the generated
  // handler.
  grpc::ServerBidiReactor<grpc::ByteBuffer, ::tensorgrid::v1::UploadReply>* UploadReactor(
      grpc::CallbackServerContext* context);
  grpc::Status Download(grpc::ServerContext* context,
                        const ::tensorgrid::v1::DownloadRequest* request,
                        grpc::ServerWriter<::tensorgrid::v1::DataChunk>* writer) override;
  grpc::Status PeerCopy(grpc::ServerContext* context,
                        const ::tensorgrid::v1::PeerCopyRequest* request,
                        grpc::ServerWriter<::tensorgrid::v1::DataChunk>* writer) override;
  grpc::Status PeerReduce(grpc::ServerContext* context,
                          const ::tensorgrid::v1::PeerReduceRequest* request,
                          ::tensorgrid::v1::PeerReduceReply* reply) override;
  // Callback API: each piece is filed on the gRPC thread that read it, with no hand-off to
  // a handler thread.
  grpc::ServerBidiReactor<::tensorgrid::v1::PeerReduceRequest, ::tensorgrid::v1::PeerReduceReply>*
  PeerReduceStream(grpc::CallbackServerContext* context) override;
  grpc::Status PeerDeliver(grpc::ServerContext* context,
                           const ::tensorgrid::v1::PeerDeliverRequest* request,
                           ::tensorgrid::v1::PeerDeliverReply* reply) override;
  grpc::Status FillPieces(grpc::ServerContext* context,
                          const ::tensorgrid::v1::FillPiecesRequest* request,
                          ::tensorgrid::v1::FillPiecesReply* reply) override;
  grpc::Status PeerLink(grpc::ServerContext* context,
                        const ::tensorgrid::v1::PeerLinkRequest* request,
                        ::tensorgrid::v1::PeerLinkReply* reply) override;

  const std::string& server_id() const { return server_id_; }
  size_t active_sessions() const ABSL_LOCKS_EXCLUDED(mu_);
  GrantTable& grants() { return grants_; }
  // This server's peer links: RpcServer makes them listen (PeerLinks::Listen).
  PeerLinks& links() { return links_; }
  CollectiveRunner& collectives() { return collectives_; }

 private:
  std::shared_ptr<server::Session> FindSession(const std::string& id) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const ServiceOptions options_;
  const std::string server_id_;
  const AuthPolicy auth_;  // who may call each method; every handler asks it first.
  // What each client's sessions hold together; outlives every session (their accounts).
  ClientAccounts clients_;
  std::vector<std::vector<uint32_t>> supported_ops_;  // per device.
  // Freed weight buffers kept for the next session's load (SessionBufferRecycler).
  const std::shared_ptr<SessionBufferRecycler> recycler_;
  GrantTable grants_;
  PeerClient peers_;
  PeerLinks links_;               // uses grants_.
  CollectiveRunner collectives_;  // uses peers_, grants_ and links_.
  PeerPushes pushes_;             // uses peers_ and grants_.
  // Cancels Uploads and Downloads idle for longer than options_.stream_idle_timeout.
  StreamWatchdog watchdog_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<server::Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SERVICE_H_
