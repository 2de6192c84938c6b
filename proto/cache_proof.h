// Proof of possession for rpc-server's weight cache: a client that names cached bytes by their
// SHA-256 also sends the SHA-256 of a fixed label, its session's id and the bytes, which only
// someone holding the bytes can compute. The server compares it with the same hash of the blob
// before it answers "have it", so a session that knows a hash (a public model's sidecar, a
// leaked log line) cannot read another tenant's cached bytes. The session id (random, secret
// to the session's client) is the salt: a proof is good for one session of one server, so it
// cannot be replayed elsewhere. Pure functions; thread-safe.
#ifndef TENSORGRID_PROTO_CACHE_PROOF_H_
#define TENSORGRID_PROTO_CACHE_PROOF_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"
#include "proto/content_hash.h"

namespace tg::rpc {

// Separates these hashes from every other SHA-256 of the protocol (blob names, model files).
inline constexpr absl::string_view kCacheProofLabel = "tensorgrid cache proof v1";

// SHA-256(label || 0 || session_id || 0 || bytes); nullopt when OpenSSL failed (out of
// memory): the client then sends no proof, the server counts a miss.
inline std::optional<Sha256Digest> CacheProof(absl::string_view session_id, const void* data,
                                              size_t size) {
  Sha256Stream hasher;
  const char zero = 0;
  hasher.Update(kCacheProofLabel.data(), kCacheProofLabel.size());
  hasher.Update(&zero, 1);
  hasher.Update(session_id.data(), session_id.size());
  hasher.Update(&zero, 1);
  hasher.Update(data, size);
  return hasher.Final();
}

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_CACHE_PROOF_H_
