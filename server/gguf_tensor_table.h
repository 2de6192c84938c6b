// The part of a GGUF file rpc-server's model-dir index needs: where the tensor data starts
// (everything before it is the file's identity, proto/model_identity.h) and each tensor's
// byte extent. Read with pread from a file of the operator's --model-dir, never mapped (a
// file that shrinks under a mapping would kill the server with SIGBUS), and checked like
// models/gguf_file does: counts, string and array lengths within the file and within limits,
// nesting depth, alignment, extents inside the file. rpc-server links no model code, hence
// this reader of its own. Tensors of a type tensorgrid does not know are left out (counted).
// Thread-safe (stateless functions).
#ifndef TENSORGRID_SERVER_GGUF_TENSOR_TABLE_H_
#define TENSORGRID_SERVER_GGUF_TENSOR_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/model_identity.h"

namespace tg::server {

struct GgufTensorTable {
  uint64_t data_start = 0;              // file offset of the tensor data section.
  std::vector<rpc::FileRange> tensors;  // file offsets and byte sizes, in file order.
  uint64_t unknown_type_tensors = 0;    // left out: type id unknown to tensorgrid.
};

// Reads the header, metadata and tensor table of the GGUF file open as `fd` (`size` bytes).
// INVALID_ARGUMENT naming the problem for a file that is not GGUF v2/v3 or is corrupt.
absl::StatusOr<GgufTensorTable> ReadGgufTensorTable(int fd, uint64_t size);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_GGUF_TENSOR_TABLE_H_
