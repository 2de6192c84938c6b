// UploadSink: the server side of one Upload stream, without gRPC, so that the service and the
// fuzzer drive the same code. Start() checks the header against the session's buffer and,
// when the header's SHA-256 names a piece of a --model-dir file (ModelIndex) or a blob of the
// weight cache, reads it into the buffer at once ("have it": the client sends nothing more).
// Otherwise Receive() takes the chunks into the buffer in order and Finish() checks that exactly
// the announced bytes came, that they hash to the header's SHA-256 when it gave one, and stores
// hashed uploads in the cache, and those whose header asked for it (store) under the hash of
// what came. A cache hit needs the header's cache_proof (proto/cache_proof.h) to match the
// cached bytes: knowing a hash alone never fills a buffer from the cache. Not thread-safe: one sink
// serves one stream. The session and cache may be used concurrently by others. The sink holds its
// session and buffer weakly, pinning the buffer only while it writes: a FreeBuffer or the session's
// end mid-upload frees the memory at once, and the next chunk fails FAILED_PRECONDITION ("was
// freed").
#ifndef TENSORGRID_SERVER_UPLOAD_SINK_H_
#define TENSORGRID_SERVER_UPLOAD_SINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/content_hash.h"
#include "server/session.h"
#include "server/session_buffer.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class BlobCache;
class Metrics;
class ModelIndex;

class UploadSink {
 public:
  // Checks `header` against `session`: the buffer exists (NOT_FOUND), [offset, +size) lies
  // in it, sha256 is empty or 32 bytes (INVALID_ARGUMENT) and model_file is 0 or a handle the
  // session opened (NOT_FOUND). `cache`, `metrics` and `models` may be null and must outlive
  // the sink.
  static absl::StatusOr<std::unique_ptr<UploadSink>> Start(
      std::shared_ptr<Session> session, const tensorgrid::v1::UploadHeader& header,
      BlobCache* cache, Metrics* metrics, ModelIndex* models = nullptr);

  // Bytes count as written as each chunk lands (SessionBuffer::Fill), so the part of the range
  // an unfinished upload did not fill is still zeroed before anyone reads it.
  ~UploadSink() = default;
  UploadSink(const UploadSink&) = delete;
  UploadSink& operator=(const UploadSink&) = delete;

  // True when the bytes came from the cache: the upload is complete, nothing more to receive.
  bool have_it() const { return have_it_; }
  // With have_it(): where the bytes came from.
  tensorgrid::v1::UploadSource source() const { return source_; }
  uint64_t size() const { return size_; }

  // The next message of the stream, written into the buffer. INVALID_ARGUMENT unless it is a
  // chunk of at most rpc::kChunkBytes within the announced size, or after have_it().
  absl::Status Receive(const tensorgrid::v1::UploadMessage& message);
  // The same for a chunk whose bytes are still in the pieces gRPC received them in (the
  // service parses chunk messages itself to save a copy): they go straight into the buffer.
  absl::Status ReceiveChunk(absl::Span<const absl::string_view> parts);
  // The client finished sending. INVALID_ARGUMENT when fewer bytes came than announced,
  // DATA_LOSS naming both digests when they do not hash to the header's; otherwise stores
  // them in the cache when hashed (under the header's digest, or with `store` under their
  // own; a failed store is logged, not an error) and returns the byte count.
  absl::StatusOr<uint64_t> Finish();

 private:
  UploadSink(const std::shared_ptr<Session>& session, const std::shared_ptr<SessionBuffer>& buffer,
             uint64_t handle, uint64_t offset, uint64_t size,
             std::optional<rpc::Sha256Digest> digest, bool store, BlobCache* cache,
             Metrics* metrics);

  // Reads the bytes from a --model-dir file into the buffer; false when no indexed file
  // holds them (any more).
  absl::StatusOr<bool> ReadFromModelFile(Session& session, ModelIndex& models, uint64_t file,
                                         uint64_t file_offset);
  // Copies the cached blob into the buffer; false on a miss (or an unreadable blob, or a
  // cache_proof that does not match it: the range is then zeroed again).
  absl::StatusOr<bool> ReadFromCache(Session& session);
  // Fills the buffer range through `read` (into host memory, or a staging copy).
  absl::StatusOr<bool> ReadInto(SessionBuffer& buffer,
                                const std::function<absl::StatusOr<bool>(uint8_t*)>& read);
  // Finish with a cache: stores the received range under its hash (DATA_LOSS when that is
  // not the header's); a failed store is only logged.
  absl::StatusOr<uint64_t> Store(SessionBuffer& buffer);
  // DATA_LOSS: the bytes hash to `got`, not to digest_.
  absl::Status Mismatch(const std::optional<rpc::Sha256Digest>& got) const;

  // The buffer while it is still the session's; FAILED_PRECONDITION once it was freed.
  absl::StatusOr<std::shared_ptr<SessionBuffer>> Pin() const;

  const std::weak_ptr<Session> session_;
  const std::weak_ptr<SessionBuffer> buffer_;
  const uint64_t handle_;
  const uint64_t offset_;
  const uint64_t size_;
  const std::optional<rpc::Sha256Digest> digest_;
  // The header's cache_proof: the client holds the bytes (checked against the cached ones).
  std::optional<rpc::Sha256Digest> proof_;
  // Finish stores the range in the cache (hashing it as it writes): with a cache, when the
  // header gave a digest or asked for `store`.
  const bool store_;
  // Without a cache: hash the chunks as they come, to check them against digest_.
  const bool hash_;
  BlobCache* const cache_;
  Metrics* const metrics_;
  rpc::Sha256Stream hasher_;
  uint64_t received_ = 0;
  bool have_it_ = false;
  tensorgrid::v1::UploadSource source_ = tensorgrid::v1::UPLOAD_SOURCE_NETWORK;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_UPLOAD_SINK_H_
