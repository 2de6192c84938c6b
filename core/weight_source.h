// What Buffer::LoadTensors (core/backend.h) loads: a model file's weights as the loader has
// them mapped (WeightSource), which of its bytes go into which tensor (TensorLoad), and how
// they got there (LoadStats). Free of any file format: the model loader fills them from its
// parser, so that a buffer on another host can find the same bytes in its own copy of the
// file or its cache instead of receiving them. Value types; thread-compatible (on_placed is
// called from any thread).
#ifndef TENSORGRID_CORE_WEIGHT_SOURCE_H_
#define TENSORGRID_CORE_WEIGHT_SOURCE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/strided_range.h"
#include "core/tensor.h"

namespace tg {

class Buffer;

// A byte range of the file.
struct FileExtent {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A mapped model file. Its identity is its size and the bytes before its tensor data (header,
// metadata, tensor table): a host holding a file with the same identity holds these weights.
struct WeightSource {
  std::string path;                   // the file; a sidecar of hashes may sit beside it.
  absl::Span<const uint8_t> mapping;  // the whole file, mapped read-only; outlives the load.
  uint64_t header_bytes = 0;          // bytes before the tensor data.
  std::vector<FileExtent> tensors;  // every tensor's extent (hosts hash files in pieces of these).
  // Called, from any thread, with the bytes just placed (progress). May be empty.
  std::function<void(uint64_t bytes)> on_placed;
};

// Bytes of the file into one tensor: rows.n_rows rows of rows.row_size bytes, row i at file
// byte file_offset + i * rows.HostStride() and at byte rows.offset + i * rows.stride of the
// tensor (StridedRange's host side is the file). A whole tensor is one row.
struct TensorLoad {
  Tensor* tensor = nullptr;
  uint64_t file_offset = 0;
  StridedRange rows;
};

// A load of `size` bytes at `file_offset` into byte 0 onwards of t.
TensorLoad WholeTensorLoad(Tensor* t, uint64_t file_offset, size_t size);

// Checks that the load's rows lie inside the mapping (OUT_OF_RANGE naming the tensor, the
// extent and the file size); the tensor side is checked by the buffer.
absl::Status CheckTensorLoad(const WeightSource& source, const TensorLoad& load);

// How one buffer's weights got there (Buffer::LoadTensors).
struct LoadStats {
  const Buffer* buffer = nullptr;  // that holds them (a meta buffer names its devices' buffers).
  uint64_t bytes = 0;              // placed, whichever way.
  uint64_t sent = 0;               // carried over a network.
  uint64_t cached = 0;             // from the device host's cache of earlier loads.
  uint64_t from_file = 0;          // read by the device host from its own copy of the file.
  uint64_t mapped = 0;             // left where they lie in the mapped file (no copy at all).
  uint64_t hashed = 0;             // hashed here to name them to the host (no sidecar had it).
  double seconds = 0;              // from the start of the load until its last byte was placed.
  std::string host_file;           // the device host's copy of the file, when it had one.
};

}  // namespace tg

#endif  // TENSORGRID_CORE_WEIGHT_SOURCE_H_
