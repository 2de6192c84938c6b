// Hashing many pieces of a model at once, on every core: SHA-256 itself is sequential, so the
// parallelism is across pieces (proto/model_identity.h cuts tensors into pieces for this).
// Used by `tg-gguf hash`, rpc-server's model-dir indexing and the client's load without a
// sidecar. Thread-safe; each call uses threads of its own.
#ifndef TENSORGRID_PROTO_PARALLEL_HASH_H_
#define TENSORGRID_PROTO_PARALLEL_HASH_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/model_identity.h"

namespace tg::rpc {

// Threads to use for `threads` <= 0: one per core.
int HashThreads(int threads);

// Runs fn(i) for every i in [0, n) on up to HashThreads(threads) threads, each taking the next
// unclaimed index. Stops handing out work after the first error, which it returns.
absl::Status ParallelForEach(size_t n, int threads, const std::function<absl::Status(size_t)>& fn);

// The SHA-256 of each piece of `bytes` (pieces must lie inside it), hashed in parallel.
std::vector<Sha256Digest> HashPieces(absl::Span<const uint8_t> bytes,
                                     absl::Span<const FileRange> pieces, int threads);

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_PARALLEL_HASH_H_
