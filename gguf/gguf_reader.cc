// GgufPreadReader: the window of file bytes, refilled with pread when the parser moves past it.
#include "gguf/gguf_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tg {

absl::StatusOr<const uint8_t*> GgufPreadReader::Bytes(uint64_t offset, size_t n) {
  if (offset < window_start_ || n > window_.size() || offset - window_start_ > window_.size() - n) {
    if (absl::Status s = Fill(offset, n); !s.ok()) return s;
  }
  return window_.data() + (offset - window_start_);
}

absl::Status GgufPreadReader::Fill(uint64_t offset, size_t n) {
  // At least the n bytes asked for (a long string), at most what is left of the file.
  window_.resize(std::max<uint64_t>(n, std::min<uint64_t>(window_bytes_, size_ - offset)));
  window_start_ = offset;
  size_t got = 0;
  while (got < window_.size()) {
    const ssize_t r =
        ::pread(fd_, window_.data() + got, window_.size() - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r < 0 ? std::strerror(errno) : "the file ended";
      const std::string msg = absl::StrCat(name_, ": cannot read bytes [", offset + got, ", ",
                                           offset + window_.size(), "): ", why);
      window_.clear();
      if (r < 0) return absl::UnavailableError(msg);
      return absl::OutOfRangeError(
          absl::StrCat(msg, " (it shrank below the ", size_, " bytes it had)"));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace tg
