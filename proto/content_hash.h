// SHA-256 of tensor bytes, shared by client and server: the name of a blob in rpc-server's
// content-addressed weight cache and the check that uploaded bytes arrived intact. Thread-safe.
#ifndef TENSORGRID_PROTO_CONTENT_HASH_H_
#define TENSORGRID_PROTO_CONTENT_HASH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::rpc {

inline constexpr size_t kSha256Bytes = 32;
using Sha256Digest = std::array<uint8_t, kSha256Bytes>;

// SHA-256 of `size` bytes at `data` (data may be null when size is 0). One OpenSSL call, so
// large buffers use the CPU's SHA extensions. OpenSSL fails only when it cannot allocate; the
// result is then all zeros, which no verification will accept.
Sha256Digest Sha256(const void* data, size_t size);

// 64 lowercase hex digits.
std::string DigestHex(const Sha256Digest& digest);

// The digest carried raw in a protobuf `bytes` field; INVALID_ARGUMENT unless exactly 32 bytes.
absl::StatusOr<Sha256Digest> DigestFromBytes(absl::string_view bytes);

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_CONTENT_HASH_H_
