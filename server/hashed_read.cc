#include "server/hashed_read.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tg::server {

absl::StatusOr<bool> ReadFully(int fd, uint8_t* dst, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t got = pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::UnavailableError(absl::StrCat("read failed: ", std::strerror(errno)));
    if (got == 0) return false;
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return true;
}

absl::StatusOr<std::optional<rpc::Sha256Digest>> HashedRead(int fd, uint64_t offset, uint64_t size,
                                                            uint8_t* dst, std::string* scratch) {
  rpc::Sha256Stream hasher;
  if (dst == nullptr && size > 0) scratch->resize(kHashedReadSliceBytes);
  for (uint64_t done = 0; done < size;) {
    const size_t n = std::min<uint64_t>(kHashedReadSliceBytes, size - done);
    uint8_t* out = dst != nullptr ? dst + done : reinterpret_cast<uint8_t*>(scratch->data());
    TG_ASSIGN_OR_RETURN(bool full, ReadFully(fd, out, n, offset + done));
    if (!full) return std::optional<rpc::Sha256Digest>();
    hasher.Update(out, n);
    done += n;
  }
  return hasher.Final();
}

}  // namespace tg::server
