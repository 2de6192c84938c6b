// UploadModelWeights: loads a model file's weights into the remote buffers of any number of
// rpc-servers at once, as fast as the disk and the network allow:
//   - every server's upload pool works at the same time (parallel streams each);
//   - the bytes go from the mapped file to gRPC without a copy;
//   - piece hashes (proto/model_identity.h) come from the file's .tghash sidecar when it is
//     valid, else are computed on all cores while earlier pieces are already being sent, and
//     not at all when no server can use them (no cache, no copy of the file, or an empty
//     cache: that server hashes what it stores itself);
//   - a server that has the same file under its --model-dir reads each piece from its own
//     disk (OpenModelFile) and one with a weight cache answers from it: no bytes cross the
//     network for those.
// It returns, per buffer, what moved how and how long it took. Thread-safe (no shared state).
#ifndef TENSORGRID_CLIENT_MODEL_UPLOAD_H_
#define TENSORGRID_CLIENT_MODEL_UPLOAD_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/remote_buffer.h"
#include "core/weight_source.h"
#include "proto/model_identity.h"

namespace tg::rpc {

// A model file as the client has it mapped.
struct ModelFileView {
  std::string path;                 // its sidecar is path + ".tghash".
  absl::Span<const uint8_t> bytes;  // the whole file.
  uint64_t data_start = 0;          // offset of the tensor data: bytes before it are the header.
  std::vector<FileRange> tensors;   // every tensor's extent (pieces are cut from these).
};

// The file of a weight source (core/weight_source.h) as this loader sees it.
ModelFileView ModelFileViewOf(const WeightSource& source);

// One tensor's bytes (a range of `tensors`) into a remote buffer at `buffer_offset`.
struct WeightCopy {
  RemoteBuffer* buffer = nullptr;
  uint64_t buffer_offset = 0;
  FileRange range;
};

// How one remote buffer (one device's weights) was loaded.
struct BufferLoad {
  RemoteBuffer* buffer = nullptr;
  std::string endpoint;
  uint64_t bytes = 0;      // weight bytes it received one way or another.
  uint64_t sent = 0;       // over the network.
  uint64_t cached = 0;     // from the server's weight cache (--cache).
  uint64_t from_file = 0;  // read by the server from its own copy of the file (--model-dir).
  uint64_t hashed = 0;     // hashed by this client to ask for them (not from a sidecar).
  double seconds = 0;      // from the start of the load until its last piece was in place.
  std::string model_file;  // the server's copy of the file (relative to its --model-dir).
};

struct ModelUploadOptions {
  bool progress = false;  // one progress line on stderr (MB/s per server and in all).
  int hash_threads = 0;   // 0: one per core.
  // Warnings for the user (a sidecar that does not fit the file). Default: stderr.
  std::function<void(const std::string&)> warn;
  // Called, from any thread, with the bytes of each piece once it is in place. May be empty.
  std::function<void(uint64_t bytes)> on_placed;
};

absl::StatusOr<std::vector<BufferLoad>> UploadModelWeights(const ModelFileView& file,
                                                           absl::Span<const WeightCopy> copies,
                                                           const ModelUploadOptions& options);

// The piece hashes of `file` from its sidecar: nullopt (after a warning naming the problem,
// unless the sidecar just does not exist) when there is none that fits the file.
std::optional<std::vector<PieceHash>> ReadSidecarFor(
    const ModelFileView& file, absl::Span<const FileRange> pieces,
    const std::function<void(const std::string&)>& warn);

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_MODEL_UPLOAD_H_
