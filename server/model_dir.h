// The files rpc-server may serve weights from: GGUF files under its --model-dir directories,
// found by walking them at start. Only a file whose real path (symlinks resolved) lies inside
// a --model-dir counts: a symlink pointing out of the directory is skipped with a log line, so
// the server never reads outside what the operator named. A client never names a path that
// the server opens: CheckClientName only turns a client's name into a relative name to
// compare with the index, refusing names that leave the directory. Thread-safe functions.
#ifndef TENSORGRID_SERVER_MODEL_DIR_H_
#define TENSORGRID_SERVER_MODEL_DIR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tg::server {

// A --model-dir as given and as resolved.
struct ModelDir {
  std::string given;  // as on the command line (log lines, client names).
  std::string real;   // realpath, no trailing slash.
};

// Resolves and checks a --model-dir: INVALID_ARGUMENT naming it and the reason when it does
// not exist, is not a directory or cannot be listed.
absl::StatusOr<ModelDir> OpenModelDir(const std::string& path);

// A model file found under a --model-dir.
struct ModelDirFile {
  std::string path;  // real path.
  std::string name;  // relative to its --model-dir's real path.
};

// Every regular file named *.gguf under the directories (recursively; directory symlinks are
// not followed), each real path once. Files whose real path leaves their directory and
// subdirectories that cannot be read are logged and skipped.
std::vector<ModelDirFile> ScanModelDirs(absl::Span<const ModelDir> dirs);

// True when `real_path` lies strictly inside directory `dir_real`.
bool IsInside(absl::string_view real_path, absl::string_view dir_real);

// The client's `name` as a relative name inside a --model-dir: a relative name without ".."
// components, or an absolute one under a --model-dir (as given or resolved). PERMISSION_DENIED
// for anything else. Touches no file.
absl::StatusOr<std::string> CheckClientName(absl::string_view name,
                                            absl::Span<const ModelDir> dirs);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_MODEL_DIR_H_
