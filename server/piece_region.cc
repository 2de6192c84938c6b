#include "server/piece_region.h"

#include <memory>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "core/strided_range.h"
#include "proto/cache_proof.h"
#include "proto/content_hash.h"
#include "proto/model_identity.h"
#include "server/blob_cache.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/model_index.h"

namespace tg::server {

namespace pb = ::tensorgrid::v1;

absl::StatusOr<RegionExtent> CheckPieceRegion(const pb::UploadHeader& header) {
  const pb::PieceRegion& r = header.region();
  const uint64_t piece = r.piece_size();
  if (piece == 0 || piece > rpc::kPieceBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fill: region of a piece of %d bytes; a piece has 1 to %d", piece, rpc::kPieceBytes));
  }
  // Bounded by the piece, so that the products below cannot overflow.
  if (r.rows() == 0 || r.row_size() == 0 || r.rows() > piece || r.row_size() > piece ||
      (r.rows() > 1 && (r.stride() < r.row_size() || r.stride() > piece ||
                        r.buffer_stride() < r.row_size() || r.buffer_stride() > piece))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fill: region of %d rows of %d bytes, %d apart in the piece and %d in the buffer: rows "
        "must be 1 to %d bytes and, when several, at least a row and at most the piece apart",
        r.rows(), r.row_size(), r.stride(), r.buffer_stride(), piece));
  }
  const uint64_t last = (r.rows() - 1) * (r.rows() > 1 ? r.stride() : 0);
  if (r.offset() > piece || last + r.row_size() > piece - r.offset()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fill: region rows from byte %d to %d lie past the piece of %d bytes",
                        r.offset(), r.offset() + last + r.row_size(), piece));
  }
  if (header.size() != r.rows() * r.row_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fill: region of %d rows of %d bytes, but size %d", r.rows(), r.row_size(), header.size()));
  }
  const uint64_t span = (r.rows() > 1 ? (r.rows() - 1) * r.buffer_stride() : 0) + r.row_size();
  return RegionExtent{span, piece};
}

absl::StatusOr<bool> FillPieceRegion(Session& session, const pb::UploadHeader& header,
                                     BlobCache* cache, Metrics* metrics, ModelIndex* models,
                                     pb::UploadSource* source) {
  TG_ASSIGN_OR_RETURN(const RegionExtent extent, CheckPieceRegion(header));
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buffer, session.FindBuffer(header.buffer()));
  TG_RETURN_IF_ERROR(buffer->CheckRange(header.offset(), extent.span));
  TG_ASSIGN_OR_RETURN(const rpc::Sha256Digest digest, rpc::DigestFromBytes(header.sha256()));
  uint64_t file = 0;
  if (header.model_file() != 0) {
    TG_ASSIGN_OR_RETURN(file, session.ModelFile(header.model_file()));
  }
  std::unique_ptr<uint8_t[]> piece = std::make_unique_for_overwrite<uint8_t[]>(extent.read);
  bool got = false;
  if (models != nullptr) {
    absl::StatusOr<bool> hit =
        models->ReadPiece(file, header.file_offset(), extent.read, digest, piece.get());
    if (!hit.ok()) {
      kServerLog.Warn("model-dir read failed, the client sends the rows instead",
                      {{"digest", rpc::DigestHex(digest)}, {"error", hit.status().message()}});
    }
    got = hit.ok() && *hit;
    if (got) *source = pb::UPLOAD_SOURCE_MODEL_FILE;
  }
  if (!got && cache != nullptr && header.cache_proof().size() == rpc::kSha256Bytes &&
      cache->ContainsWithSize(digest, extent.read)) {
    // Only a client holding the whole piece could have hashed it with this session's id.
    absl::StatusOr<bool> hit = cache->Read(digest, piece.get(), extent.read);
    got = hit.ok() && *hit &&
          rpc::CacheProof(session.id(), piece.get(), extent.read) ==
              rpc::DigestFromBytes(header.cache_proof()).value();
    if (got) *source = pb::UPLOAD_SOURCE_CACHE;
  }
  if (!got) return false;
  const pb::PieceRegion& r = header.region();
  const StridedRange rows{.offset = header.offset(),
                          .row_size = r.row_size(),
                          .n_rows = r.rows(),
                          .stride = r.rows() > 1 ? r.buffer_stride() : r.row_size(),
                          .host_stride = r.rows() > 1 ? r.stride() : 0};
  TG_RETURN_IF_ERROR(buffer->WriteRows(rows, piece.get() + r.offset()));
  if (*source == pb::UPLOAD_SOURCE_MODEL_FILE) {
    session.AddModelFileBytes(header.size());
    if (metrics != nullptr) metrics->ModelFileBytes(header.size());
  } else {
    session.AddCacheHitBytes(header.size());
    if (metrics != nullptr) metrics->CacheHitBytes(header.size());
  }
  return true;
}

}  // namespace tg::server
