// PeerGrants: the grants one server gave for other servers to read its buffers (PeerCopy),
// one per buffer, so that copying from the same buffer again costs no GrantPeerRead round
// trip. A grant holds until its buffer is freed. Thread-safe.
#ifndef TENSORGRID_CLIENT_PEER_GRANTS_H_
#define TENSORGRID_CLIENT_PEER_GRANTS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace tg::rpc {

class PeerGrants {
 public:
  // The grant remembered for `buffer`, if any.
  std::optional<std::string> Find(uint64_t buffer) const ABSL_LOCKS_EXCLUDED(mu_);
  void Remember(uint64_t buffer, std::string grant) ABSL_LOCKS_EXCLUDED(mu_);
  // The buffer is freed (the server revokes its grant).
  void Forget(uint64_t buffer) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::string> grants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_PEER_GRANTS_H_
