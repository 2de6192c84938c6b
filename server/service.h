// TensorGridService: the tensorgrid.v1 gRPC service (sync API, but for PeerReduceStream). Owns the
// server-wide session table and grant table; Session streams create and destroy Sessions, Upload,
// FillPieces and Download reach into them by session id, PeerCopy serves grants to other servers.
// Thread-safe (gRPC calls every method from its own threads).
#ifndef TENSORGRID_SERVER_SERVICE_H_
#define TENSORGRID_SERVER_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "server/collective_runner.h"
#include "server/grant_table.h"
#include "server/peer_client.h"
#include "server/peer_pushes.h"
#include "server/session.h"
#include "server/session_buffer_recycler.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {

class BlobCache;
class Metrics;
class ModelIndex;

struct ServiceOptions {
  std::vector<Device*> devices;  // exposed in this order (DeviceInfo.index).
  std::string auth_token;        // empty: no bearer token required.
  int max_sessions = 64;
  uint64_t session_mem_limit = 0;  // bytes; 0 = no limit.
  BlobCache* cache = nullptr;      // --cache; may be null.
  ModelIndex* models = nullptr;    // --model-dir; may be null.
  Metrics* metrics = nullptr;      // may be null.
  PeerClientOptions peer;          // PeerPull: allowed peers, TLS.
};

class TensorGridService final
    : public ::tensorgrid::v1::TensorGrid::WithCallbackMethod_PeerReduceStream<
          ::tensorgrid::v1::TensorGrid::Service> {
 public:
  explicit TensorGridService(ServiceOptions options);
  ~TensorGridService() override;

  grpc::Status Hello(grpc::ServerContext* context, const ::tensorgrid::v1::HelloRequest* request,
                     ::tensorgrid::v1::HelloReply* reply) override;
  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<::tensorgrid::v1::SessionReply,
                                                ::tensorgrid::v1::SessionRequest>* stream) override;
  // Upload, on raw byte buffers (proto/upload_frame.h): chunk bytes go from gRPC's slices
  // straight into the session's buffer. Installed in place of the generated handler.
  grpc::Status UploadRaw(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<::tensorgrid::v1::UploadReply, grpc::ByteBuffer>* stream);
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

  const std::string& server_id() const { return server_id_; }
  size_t active_sessions() const ABSL_LOCKS_EXCLUDED(mu_);
  GrantTable& grants() { return grants_; }

 private:
  grpc::Status CheckAuth(const grpc::ServerContext* context) const;
  std::shared_ptr<server::Session> FindSession(const std::string& id) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const ServiceOptions options_;
  const std::string server_id_;
  std::vector<std::vector<uint32_t>> supported_ops_;  // per device.
  // Freed weight buffers kept for the next session's load (SessionBufferRecycler).
  const std::shared_ptr<SessionBufferRecycler> recycler_;
  GrantTable grants_;
  PeerClient peers_;
  CollectiveRunner collectives_;  // uses peers_ and grants_.
  PeerPushes pushes_;             // uses peers_ and grants_.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<server::Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SERVICE_H_
