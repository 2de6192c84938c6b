#include "server/random_id.h"

#include <openssl/rand.h>

#include <random>
#include <vector>

namespace tg::server {
namespace {

void Fill(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) == 1) return;
  // OpenSSL's generator failed (no entropy source?): fall back to the OS device directly.
  std::random_device rd;
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(rd());
}

}  // namespace

std::string RandomHex(size_t bytes) {
  std::vector<uint8_t> raw(bytes);
  Fill(raw.data(), raw.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (uint8_t b : raw) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

uint64_t RandomU64() {
  uint8_t raw[8];
  Fill(raw, sizeof(raw));
  uint64_t v = 0;
  for (uint8_t b : raw) v = (v << 8) | b;
  return v;
}

}  // namespace tg::server
