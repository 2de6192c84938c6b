// SHA-256 of tensor bytes, shared by client and server: the name of a blob in rpc-server's
// content-addressed weight cache and the check that uploaded bytes arrived intact. Thread-safe.
#ifndef TENSORGRID_PROTO_CONTENT_HASH_H_
#define TENSORGRID_PROTO_CONTENT_HASH_H_

#include <array>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header.

namespace tg::rpc {

inline constexpr size_t kSha256Bytes = 32;
using Sha256Digest = std::array<uint8_t, kSha256Bytes>;

// SHA-256 of `size` bytes at `data` (data may be null when size is 0). One OpenSSL call, so
// large buffers use the CPU's SHA extensions. OpenSSL fails only when it cannot allocate; the
// result is then all zeros, which no verification will accept.
Sha256Digest Sha256(const void* data, size_t size);

// SHA-256 of bytes that arrive in pieces (rpc-server verifying an upload chunk by chunk).
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void Update(const void* data, size_t size);
  // The digest of everything given to Update; nullopt when OpenSSL failed (out of memory).
  std::optional<Sha256Digest> Final();

 private:
  ::evp_md_ctx_st* ctx_;  // OpenSSL's EVP_MD_CTX.
  bool ok_ = false;
};

// 64 lowercase hex digits.
std::string DigestHex(const Sha256Digest& digest);

// The digest carried raw in a protobuf `bytes` field; INVALID_ARGUMENT unless exactly 32 bytes.
absl::StatusOr<Sha256Digest> DigestFromBytes(absl::string_view bytes);

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_CONTENT_HASH_H_
