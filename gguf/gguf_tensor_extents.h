// GgufTensorExtents: where a GGUF file's tensor bytes lie, as file offsets: the start of the
// tensor data section (the bytes before it are the file's identity, proto/model_identity.h)
// and each tensor's [offset, offset + size). What rpc-server's --model-dir index and the
// client's weight upload cut into hashed pieces, without knowing tensor names, types or
// shapes. Plain values and stateless functions; thread-safe.
#ifndef TENSORGRID_GGUF_GGUF_TENSOR_EXTENTS_H_
#define TENSORGRID_GGUF_GGUF_TENSOR_EXTENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gguf/gguf_file.h"

namespace tg {

struct GgufExtent {
  uint64_t offset = 0;  // from the start of the file.
  uint64_t size = 0;
  bool operator==(const GgufExtent& o) const { return offset == o.offset && size == o.size; }
};

struct GgufTensorExtents {
  uint64_t data_start = 0;            // file offset of the tensor data section.
  std::vector<GgufExtent> tensors;    // in the file's tensor-table order.
  uint64_t unknown_type_tensors = 0;  // left out: a type id tensorgrid does not know.
};

// The extents of a parsed file.
GgufTensorExtents TensorExtentsOf(const GgufFile& file);

// Parses the GGUF file open as `fd` (`size` bytes; `name` prefixes errors) with pread, never
// mapping it and keeping none of its metadata, and returns its extents: rpc-server's
// --model-dir, where the operator's files must not be able to crash the server. Tensors of an
// unknown type are left out and counted. Errors as GgufFile::Open's, and OUT_OF_RANGE for a
// file shorter than `size` (it shrank).
absl::StatusOr<GgufTensorExtents> ReadGgufTensorExtents(int fd, uint64_t size,
                                                        absl::string_view name,
                                                        const GgufLimits& limits = {});

}  // namespace tg

#endif  // TENSORGRID_GGUF_GGUF_TENSOR_EXTENTS_H_
