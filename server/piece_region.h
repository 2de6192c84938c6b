// The server side of a FillPieces piece with a region (UploadHeader.region, protocol minor
// 10): the header names a whole piece of the model file by its SHA-256; the server reads that
// piece from its --model-dir copy (ModelIndex::ReadPiece checks the hash) or from its cache
// (when the header's cache_proof, over the whole piece, matches the cached bytes), and writes
// only the region's rows into the buffer. This is how a device's slice of a weight under
// --split-mode tensor (a sub-range of the file, or rows of it) loads without the bytes
// crossing the network. Thread-safe as Session, ModelIndex and BlobCache are.
#ifndef TENSORGRID_SERVER_PIECE_REGION_H_
#define TENSORGRID_SERVER_PIECE_REGION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/session.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class BlobCache;
class Metrics;
class ModelIndex;

// What a region asks of the server, once its shape is checked.
struct RegionExtent {
  uint64_t span = 0;  // bytes of the buffer from the first row's start to the last row's end.
  uint64_t read = 0;  // bytes the server reads (the whole piece).
};
// Checks the region's shape: a piece of 1 to rpc::kPieceBytes bytes, rows inside it, strides
// of at least a row (and at most the piece) when there are several rows, and `size` their
// bytes. INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<RegionExtent> CheckPieceRegion(const tensorgrid::v1::UploadHeader& header);

// Writes the region's rows when the server has the piece: true (and *source says where they
// came from), or false when it has not (the client sends them). Errors: the buffer or model
// file handle unknown (NOT_FOUND), a bad region or range (INVALID_ARGUMENT). `cache`,
// `metrics` and `models` may be null.
absl::StatusOr<bool> FillPieceRegion(Session& session, const tensorgrid::v1::UploadHeader& header,
                                     BlobCache* cache, Metrics* metrics, ModelIndex* models,
                                     tensorgrid::v1::UploadSource* source);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PIECE_REGION_H_
