// Reading a byte range of a file fully, or while hashing it: pread in slices of
// kHashedReadSliceBytes, each hashed right after it lands, while it is still in the core's cache
// (one pass over memory instead of a read and then a hash). What the weight cache and the
// --model-dir index use to read bytes they must verify before they count. Thread-safe (no state).
#ifndef TENSORGRID_SERVER_HASHED_READ_H_
#define TENSORGRID_SERVER_HASHED_READ_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/content_hash.h"

namespace tg::server {

// pread of exactly n bytes of `fd` at `offset` into dst; false when the file ends first (it
// shrank); UNAVAILABLE naming the errno for a failed read.
absl::StatusOr<bool> ReadFully(int fd, uint8_t* dst, size_t n, uint64_t offset);

// Small enough to stay in a core's L2 cache between the read and the hash.
inline constexpr size_t kHashedReadSliceBytes = size_t{512} << 10;

// The SHA-256 of [offset, offset + size) of `fd`. The bytes go to `dst` when it is given,
// else through `scratch` (resized to one slice; both may be null when size is 0). nullopt when the
// file ends first (it shrank); an error (UNAVAILABLE naming the errno) only for a failed read.
absl::StatusOr<std::optional<rpc::Sha256Digest>> HashedRead(int fd, uint64_t offset, uint64_t size,
                                                            uint8_t* dst, std::string* scratch);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_HASHED_READ_H_
