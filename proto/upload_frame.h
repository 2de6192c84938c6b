// The Upload stream's messages as raw gRPC byte buffers, so that weight bytes are not copied
// into and out of protobuf strings: the client frames a chunk as a few header bytes followed
// by a slice that points at its own memory (the mapped model file), and the server finds the
// chunk's bytes in the slices gRPC received and writes them straight into the session's
// buffer. The encoding is the protobuf one of `UploadMessage { bytes chunk = 2; }`, so either
// side may equally use the generated classes. Thread-safe functions.
#ifndef TENSORGRID_PROTO_UPLOAD_FRAME_H_
#define TENSORGRID_PROTO_UPLOAD_FRAME_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"

namespace tg::rpc {

// The full name of the Upload method, for calls made on raw byte buffers.
inline constexpr char kUploadMethod[] = "/tensorgrid.v1.TensorGrid/Upload";
// Its position in the service definition of tensorgrid.proto (Hello, Session, Upload, ...),
// which is how a gRPC service names the method whose handler it replaces.
inline constexpr int kUploadMethodIndex = 2;

// An UploadMessage holding `size` bytes at `data` as its chunk. The bytes are not copied:
// they must stay valid until the call that writes the buffer has finished.
grpc::ByteBuffer ChunkFrame(const void* data, size_t size);

// A received message in its slices. When it is exactly one chunk field, `parts` gets the
// chunk's bytes (views into `slices`, which keep them alive) and it returns true; otherwise
// (a header, an empty message, any other encoding) false, and the caller parses it with
// protobuf.
bool FindChunk(const grpc::ByteBuffer& message, std::vector<grpc::Slice>* slices,
               std::vector<absl::string_view>* parts);

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_UPLOAD_FRAME_H_
