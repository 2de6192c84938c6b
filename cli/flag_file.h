// ReadFlagFile: the whole contents of a file a command-line flag names (certificates, keys,
// tokens, templates), for rpc-server and the tools. Thread-safe.
#ifndef TENSORGRID_CLI_FLAG_FILE_H_
#define TENSORGRID_CLI_FLAG_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace tg {

// INVALID_ARGUMENT naming `flag` and `path` when the file cannot be read.
absl::StatusOr<std::string> ReadFlagFile(const std::string& path, const char* flag);

}  // namespace tg

#endif  // TENSORGRID_CLI_FLAG_FILE_H_
