// ModelHashes: the SHA-256 of every piece of one model file (proto/model_identity.h) with the
// file's identity and modification time, and its on-disk form: the `.tghash` sidecar that
// `tg-gguf hash MODEL` writes beside MODEL (so that a client need not hash at load time), and
// the per-file entries of rpc-server's model-dir index (so that a restart does not rehash).
// Values and functions; thread-safe.
//
// Format, little-endian:
//   "TGHASH01", u64 file size, 32-byte header SHA-256, i64 mtime (ns), u64 piece size,
//   u64 piece count, per piece {u64 offset, u64 size, 32-byte SHA-256},
//   then the SHA-256 of all bytes before it, so that truncation or corruption is detected.
#ifndef TENSORGRID_PROTO_MODEL_HASHES_H_
#define TENSORGRID_PROTO_MODEL_HASHES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/model_identity.h"

namespace tg::rpc {

struct ModelHashes {
  ModelIdentity identity;
  int64_t mtime_ns = 0;           // of the file when it was hashed.
  std::vector<PieceHash> pieces;  // sorted by offset, as SplitIntoPieces cuts them.
};

// The sidecar of `model_path`: the same path with ".tghash" appended.
std::string SidecarPath(absl::string_view model_path);

std::string SerializeModelHashes(const ModelHashes& hashes);
// DATA_LOSS naming what is wrong for a truncated, corrupt or foreign file; pieces are
// bounded by the size their count implies, so a hostile count cannot allocate much.
absl::StatusOr<ModelHashes> ParseModelHashes(absl::string_view bytes);

// Reads and parses `path`; NOT_FOUND when it does not exist.
absl::StatusOr<ModelHashes> ReadModelHashes(const std::string& path);
// Writes `path` atomically (a temp file beside it, renamed into place).
absl::Status WriteModelHashes(const std::string& path, const ModelHashes& hashes);

// Checks that `hashes` describe the file with this identity, mtime and pieces:
// FAILED_PRECONDITION naming the difference (another file, a file modified since, pieces cut
// differently), so that the caller can warn and hash instead.
absl::Status CheckModelHashes(const ModelHashes& hashes, const ModelIdentity& identity,
                              int64_t mtime_ns, absl::Span<const FileRange> pieces);

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_MODEL_HASHES_H_
