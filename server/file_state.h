// FileState: what any change to a file changes (size, mtime, ctime, inode, device), taken from
// an open descriptor. The weight cache and the --model-dir index serve bytes they hashed
// earlier without hashing them again only while the file's state is the one it had when they
// hashed it: ctime moves on every write, truncate, rename and utime and cannot be set back by
// an unprivileged process, so a file changed with its mtime put back still differs. Value type.
#ifndef TENSORGRID_SERVER_FILE_STATE_H_
#define TENSORGRID_SERVER_FILE_STATE_H_

#include <cstdint>
#include <optional>

namespace tg::server {

struct FileState {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  bool operator==(const FileState&) const = default;
};

// The state of the open file `fd`; nullopt when fstat fails.
std::optional<FileState> FileStateOf(int fd);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_FILE_STATE_H_
