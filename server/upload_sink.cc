#include "server/upload_sink.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "proto/cache_proof.h"
#include "proto/protocol.h"
#include "server/blob_cache.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/model_index.h"

namespace tg::server {

namespace pb = ::tensorgrid::v1;

absl::StatusOr<std::unique_ptr<UploadSink>> UploadSink::Start(std::shared_ptr<Session> session,
                                                              const pb::UploadHeader& header,
                                                              BlobCache* cache, Metrics* metrics,
                                                              ModelIndex* models) {
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buffer, session->FindBuffer(header.buffer()));
  TG_RETURN_IF_ERROR(buffer->CheckRange(header.offset(), header.size()));
  std::optional<rpc::Sha256Digest> digest;
  if (!header.sha256().empty()) {
    TG_ASSIGN_OR_RETURN(digest, rpc::DigestFromBytes(header.sha256()));
  }
  // make_unique cannot reach the private constructor.
  std::unique_ptr<UploadSink> sink(new UploadSink(session, buffer, header.buffer(), header.offset(),
                                                  header.size(), digest, header.store(), cache,
                                                  metrics));
  uint64_t file = 0;
  if (header.model_file() != 0) {
    TG_ASSIGN_OR_RETURN(file, session->ModelFile(header.model_file()));
  }
  if (digest.has_value() && models != nullptr) {
    TG_ASSIGN_OR_RETURN(sink->have_it_,
                        sink->ReadFromModelFile(*session, *models, file, header.file_offset()));
  }
  if (digest.has_value() && header.cache_proof().size() == rpc::kSha256Bytes) {
    sink->proof_ = rpc::DigestFromBytes(header.cache_proof()).value();
  }
  if (!sink->have_it_ && sink->proof_.has_value() && cache != nullptr &&
      cache->ContainsWithSize(*digest, header.size())) {
    TG_ASSIGN_OR_RETURN(sink->have_it_, sink->ReadFromCache(*session));
  }
  return sink;
}

UploadSink::UploadSink(const std::shared_ptr<Session>& session,
                       const std::shared_ptr<SessionBuffer>& buffer, uint64_t handle,
                       uint64_t offset, uint64_t size, std::optional<rpc::Sha256Digest> digest,
                       bool store, BlobCache* cache, Metrics* metrics)
    : session_(session),
      buffer_(buffer),
      handle_(handle),
      offset_(offset),
      size_(size),
      digest_(digest),
      store_(cache != nullptr && (digest.has_value() || store)),
      hash_(digest.has_value() && !store_),
      cache_(cache),
      metrics_(metrics) {}

absl::StatusOr<std::shared_ptr<SessionBuffer>> UploadSink::Pin() const {
  std::shared_ptr<SessionBuffer> buffer = buffer_.lock();
  if (buffer == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "upload: buffer %#x was freed (FreeBuffer, or its session ended) during the upload",
        handle_));
  }
  return buffer;
}

absl::StatusOr<bool> UploadSink::ReadInto(
    SessionBuffer& buffer, const std::function<absl::StatusOr<bool>(uint8_t*)>& read) {
  if (uint8_t* host = buffer.HostPointer(offset_); host != nullptr) {
    // A miss or a failed read gives the range back to be zeroed: what the read left there
    // (another file's bytes, a corrupt blob) never reaches a reader.
    SessionBuffer::Fill fill = buffer.BeginFill(offset_, size_);
    TG_ASSIGN_OR_RETURN(bool got, read(host));
    if (got) fill.Done();
    return got;
  }
  std::string stage(size_, '\0');  // memory the host cannot address.
  TG_ASSIGN_OR_RETURN(bool got, read(reinterpret_cast<uint8_t*>(stage.data())));
  if (got) TG_RETURN_IF_ERROR(buffer.Write(offset_, stage.data(), size_));
  return got;
}

absl::StatusOr<bool> UploadSink::ReadFromModelFile(Session& session, ModelIndex& models,
                                                   uint64_t file, uint64_t file_offset) {
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buffer, Pin());
  absl::StatusOr<bool> hit = ReadInto(*buffer, [&](uint8_t* dst) {
    return models.ReadPiece(file, file_offset, size_, *digest_, dst);
  });
  if (!hit.ok()) {
    // The client still has the bytes: take them from it instead.
    kServerLog.Warn("model-dir read failed, receiving the bytes instead",
                    {{"digest", rpc::DigestHex(*digest_)}, {"error", hit.status().message()}});
    return false;
  }
  if (!*hit) return false;
  source_ = pb::UPLOAD_SOURCE_MODEL_FILE;
  session.AddModelFileBytes(size_);
  if (metrics_ != nullptr) metrics_->ModelFileBytes(size_);
  return true;
}

absl::StatusOr<bool> UploadSink::ReadFromCache(Session& session) {
  // Into private memory first, and into the buffer only once the proof holds: a refused fill
  // does not zero a range the session had written before, so the bytes must never reach it.
  std::unique_ptr<uint8_t[]> stage = std::make_unique_for_overwrite<uint8_t[]>(size_);
  absl::StatusOr<bool> hit = cache_->Read(*digest_, stage.get(), size_);
  if (hit.ok() && *hit && rpc::CacheProof(session.id(), stage.get(), size_) != proof_) {
    // Only a client holding these bytes could have hashed them with this session's id.
    kServerLog.Debug("cache proof does not match, receiving the bytes instead",
                     {{"digest", rpc::DigestHex(*digest_)}, {"session", session.log_id()}});
    return false;
  }
  if (hit.ok() && *hit) {
    TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buffer, Pin());
    if (absl::Status written = buffer->Write(offset_, stage.get(), size_); !written.ok()) {
      hit = written;
    }
  }
  if (!hit.ok()) {
    // The client still has the bytes: take them from it instead.
    kServerLog.Warn("cache read failed, receiving the bytes instead",
                    {{"digest", rpc::DigestHex(*digest_)}, {"error", hit.status().message()}});
    return false;
  }
  if (!*hit) return false;  // evicted or corrupt since Contains.
  source_ = pb::UPLOAD_SOURCE_CACHE;
  session.AddCacheHitBytes(size_);
  if (metrics_ != nullptr) metrics_->CacheHitBytes(size_);
  return true;
}

absl::Status UploadSink::Receive(const pb::UploadMessage& message) {
  if (!have_it_ && message.part_case() != pb::UploadMessage::kChunk) {
    return absl::InvalidArgumentError("upload: expected a chunk");
  }
  const absl::string_view chunk = message.chunk();
  return ReceiveChunk({&chunk, 1});
}

absl::Status UploadSink::ReceiveChunk(absl::Span<const absl::string_view> parts) {
  if (have_it_) {
    return absl::InvalidArgumentError("upload: the server had the bytes already; send no chunks");
  }
  uint64_t size = 0;
  for (absl::string_view p : parts) size += p.size();
  if (size > rpc::kChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("upload: chunk of %d bytes exceeds %d; split it", size, rpc::kChunkBytes));
  }
  if (size > size_ - received_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("upload: %d more bytes after %d of the %d bytes the header announced", size,
                        received_, size_));
  }
  // Pinned for this chunk only: a Free meanwhile frees the memory when the chunk is in.
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buffer, Pin());
  for (absl::string_view p : parts) {
    TG_RETURN_IF_ERROR(buffer->Write(offset_ + received_, p.data(), p.size()));
    if (hash_) hasher_.Update(p.data(), p.size());
    received_ += p.size();
  }
  if (metrics_ != nullptr) metrics_->UploadBytes(size);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> UploadSink::Finish() {
  if (have_it_) return size_;
  if (std::shared_ptr<Session> session = session_.lock()) session->AddUploadedBytes(received_);
  if (received_ != size_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "upload: received %d of the %d bytes the header announced", received_, size_));
  }
  if (store_) {
    TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buffer, Pin());
    return Store(*buffer);
  }
  if (!hash_) return received_;
  const std::optional<rpc::Sha256Digest> got = hasher_.Final();
  if (!got.has_value() || *got != *digest_) return Mismatch(got);
  return received_;
}

absl::Status UploadSink::Mismatch(const std::optional<rpc::Sha256Digest>& got) const {
  return absl::DataLossError(absl::StrCat(
      "upload: the bytes hash to sha256 ", got.has_value() ? rpc::DigestHex(*got) : "(none)",
      ", not to the sha256 ", rpc::DigestHex(*digest_), " given in the header"));
}

absl::StatusOr<uint64_t> UploadSink::Store(SessionBuffer& buffer) {
  // The cache hashes what it writes, from the buffer (or a copy of device memory): another
  // stream writing the range meanwhile cannot put bytes into a blob under another name.
  absl::StatusOr<BlobCache::Stored> stored;
  if (const uint8_t* host = buffer.HostPointer(offset_); host != nullptr) {
    stored = cache_->StoreHashing(host, size_, digest_);
  } else {
    std::string stage(size_, '\0');
    TG_RETURN_IF_ERROR(buffer.Read(offset_, stage.data(), size_));
    stored = cache_->StoreHashing(stage.data(), size_, digest_);
  }
  if (!stored.ok()) return stored.status();
  if (digest_.has_value() && stored->digest != *digest_) return Mismatch(stored->digest);
  if (!stored->store_error.ok()) {
    kServerLog.Warn("cache store failed", {{"digest", rpc::DigestHex(stored->digest)},
                                           {"bytes", size_},
                                           {"error", stored->store_error.message()}});
  }
  if (metrics_ != nullptr) metrics_->SetCacheBytes(cache_->total_bytes());
  return received_;
}

}  // namespace tg::server
