// ReadFlagFile: the whole contents of a file a command-line flag names (certificates, keys,
// tokens), for rpc-server and its health probe. Thread-safe.
#ifndef TENSORGRID_SERVER_FLAG_FILE_H_
#define TENSORGRID_SERVER_FLAG_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace tg::server {

// INVALID_ARGUMENT naming `flag` and `path` when the file cannot be read.
absl::StatusOr<std::string> ReadFlagFile(const std::string& path, const char* flag);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_FLAG_FILE_H_
