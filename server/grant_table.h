// GrantTable: the server-wide table of peer-read grants (GrantPeerRead -> PeerCopy). A grant
// is a random 128-bit capability naming one session buffer; it dies with the buffer's
// handle. Thread-safe.
#ifndef TENSORGRID_SERVER_GRANT_TABLE_H_
#define TENSORGRID_SERVER_GRANT_TABLE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/session_buffer.h"

namespace tg::server {

class GrantTable {
 public:
  // A new grant for `buffer` (32 hex digits).
  std::string Grant(const std::shared_ptr<SessionBuffer>& buffer) ABSL_LOCKS_EXCLUDED(mu_);
  void Revoke(const std::string& grant) ABSL_LOCKS_EXCLUDED(mu_);
  // The buffer, kept alive by the caller while it reads; nullptr for an unknown grant.
  std::shared_ptr<SessionBuffer> Find(const std::string& grant) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<SessionBuffer>> grants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_GRANT_TABLE_H_
