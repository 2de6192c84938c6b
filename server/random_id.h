// Unpredictable ids for rpc-server: session ids, peer-read grants, handle keys. Drawn from
// OpenSSL's CSPRNG (a guessed id would be a capability). Thread-safe.
#ifndef TENSORGRID_SERVER_RANDOM_ID_H_
#define TENSORGRID_SERVER_RANDOM_ID_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tg::server {

// 2 * bytes lowercase hex digits of random bytes (16 bytes = 128 bits).
std::string RandomHex(size_t bytes = 16);
uint64_t RandomU64();

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_RANDOM_ID_H_
