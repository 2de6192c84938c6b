// FillRowsFromPieces: weights of a remote buffer that are not whole pieces of the model file
// (a device's slice of a weight under --split-mode tensor: a sub-range of the file, or rows of
// it) loaded without sending them: each copy is cut into rows of the pieces it lies in
// (proto/model_identity.h) and offered to the server with the pieces' hashes (FillPieces with
// UploadHeader.region, protocol minor 10), which reads the pieces from its --model-dir copy
// of the file or its cache. Hashes come from the .tghash sidecar, else are computed here.
// Thread-safe (no shared state).
#ifndef TENSORGRID_CLIENT_PIECE_ROWS_H_
#define TENSORGRID_CLIENT_PIECE_ROWS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/model_upload.h"
#include "client/remote_buffer.h"

namespace tg::rpc {

// `rows` rows of `row_size` bytes of the file into one remote buffer: row i from file byte
// file_offset + i * file_stride to buffer byte buffer_offset + i * buffer_stride.
struct RowsCopy {
  uint64_t buffer_offset = 0;
  uint64_t file_offset = 0;
  uint64_t row_size = 0;
  uint64_t rows = 0;
  uint64_t file_stride = 0;
  uint64_t buffer_stride = 0;
};

// Offers the copies into `buffer` to its server when it may hold the pieces (a copy of the
// file under its --model-dir, or a cache) and speaks protocol minor 10; returns per copy
// whether all of it is in place (the caller sends the others). Adds the bytes that came from
// the server's file or cache, and its file's name, to *load.
absl::StatusOr<std::vector<bool>> FillRowsFromPieces(const ModelFileView& file,
                                                     RemoteBuffer* buffer,
                                                     absl::Span<const RowsCopy> copies,
                                                     const ModelUploadOptions& options,
                                                     BufferLoad* load);

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_PIECE_ROWS_H_
