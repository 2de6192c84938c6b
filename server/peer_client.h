// PeerClient: rpc-server's side of server-to-server copies (PeerPull): opens and caches one
// gRPC channel per peer endpoint and streams a granted range from the peer's PeerCopy into a
// local buffer. Insecure channels unless a CA bundle (--peer-tls-ca) is given. Thread-safe.
#ifndef TENSORGRID_SERVER_PEER_CLIENT_H_
#define TENSORGRID_SERVER_PEER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/session_buffer.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace tg::server {

class PeerClient {
 public:
  // tls_ca_pem empty: plaintext channels.
  explicit PeerClient(std::string tls_ca_pem = "") : tls_ca_pem_(std::move(tls_ca_pem)) {}

  // Reads [src_offset, +size) of the buffer behind `grant` on `endpoint` into
  // [dst_offset, +size) of dst. The destination range is checked before anything is
  // requested and every chunk is checked against it; a short or long stream is an error.
  absl::Status Pull(const std::string& endpoint, const std::string& grant, uint64_t src_offset,
                    uint64_t size, SessionBuffer& dst, uint64_t dst_offset)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::shared_ptr<grpc::Channel> ChannelFor(const std::string& endpoint) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string tls_ca_pem_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_CLIENT_H_
