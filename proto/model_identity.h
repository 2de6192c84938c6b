// What client and server agree a model file is, so that a server can trust bytes it did not
// receive: a file is named by its size and the SHA-256 of everything before its tensor data
// (header, metadata, tensor table), and its weights are hashed in pieces, each at most
// kPieceBytes of one tensor. Both sides cut the same pieces from the same tensor extents, so
// a piece hashed by the client (or its .tghash sidecar) and one indexed by the server match
// exactly when their bytes do. Plain values and pure functions; thread-safe.
#ifndef TENSORGRID_PROTO_MODEL_IDENTITY_H_
#define TENSORGRID_PROTO_MODEL_IDENTITY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "proto/content_hash.h"

namespace tg::rpc {

// Large tensors are hashed and sent in pieces of at most this size: small enough that one
// tensor's hashing spreads over many cores and that a changed byte costs one piece, not a
// whole embedding table, on the wire; large enough that per-piece round trips are noise.
inline constexpr uint64_t kPieceBytes = uint64_t{16} << 20;

struct ModelIdentity {
  uint64_t size = 0;      // bytes of the whole file.
  Sha256Digest header{};  // SHA-256 of bytes [0, data section start).
  bool operator==(const ModelIdentity& o) const { return size == o.size && header == o.header; }
  bool operator!=(const ModelIdentity& o) const { return !(*this == o); }
};

// A byte range of a file.
struct FileRange {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool operator==(const FileRange& o) const { return offset == o.offset && size == o.size; }
};

struct PieceHash {
  FileRange range;
  Sha256Digest digest{};
};

// The identity of a file of `file_size` bytes whose bytes before the tensor data are `header`.
ModelIdentity IdentityOf(absl::Span<const uint8_t> header, uint64_t file_size);

// Each tensor extent cut into pieces of at most kPieceBytes from its start, sorted by offset;
// empty extents give none, and an extent listed twice (a tied weight) once.
std::vector<FileRange> SplitIntoPieces(absl::Span<const FileRange> tensors);

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_MODEL_IDENTITY_H_
