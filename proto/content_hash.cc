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

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
  ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
}

Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(ctx_); }

void Sha256Stream::Update(const void* data, size_t size) {
  ok_ = ok_ && EVP_DigestUpdate(ctx_, data, size) == 1;
}

std::optional<Sha256Digest> Sha256Stream::Final() {
  Sha256Digest d{};
  unsigned int len = 0;
  if (!ok_ || EVP_DigestFinal_ex(ctx_, d.data(), &len) != 1 || len != d.size()) {
    return std::nullopt;
  }
  return d;
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
