#include "proto/content_hash.h"

#include <openssl/evp.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tg::rpc {

Sha256Digest Sha256(const void* data, size_t size) {
  Sha256Digest digest{};
  unsigned int len = 0;
  static const unsigned char kEmpty = 0;
  const void* input = size == 0 ? &kEmpty : data;
  if (EVP_Digest(input, size, digest.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != kSha256Bytes) {
    digest.fill(0);
  }
  return digest;
}

std::string DigestHex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * kSha256Bytes, '0');
  for (size_t i = 0; i < kSha256Bytes; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return hex;
}

absl::StatusOr<Sha256Digest> DigestFromBytes(absl::string_view bytes) {
  if (bytes.size() != kSha256Bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("SHA-256 digest must be ", kSha256Bytes, " bytes, got ", bytes.size()));
  }
  Sha256Digest digest;
  std::memcpy(digest.data(), bytes.data(), kSha256Bytes);
  return digest;
}

}  // namespace tg::rpc
