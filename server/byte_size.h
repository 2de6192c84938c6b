// Parses human byte sizes for rpc-server flags: "1048576", "512M", "4G", "1.5GiB".
#ifndef TENSORGRID_SERVER_BYTE_SIZE_H_
#define TENSORGRID_SERVER_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::server {

// A number (fractions allowed with a suffix) with an optional K/M/G/T suffix (powers of
// 1024), optionally followed by "B" or "iB". INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_BYTE_SIZE_H_
