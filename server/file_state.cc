#include "server/file_state.h"

#include <sys/stat.h>

namespace tg::server {
namespace {

int64_t Nanoseconds(const struct timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

}  // namespace

std::optional<FileState> FileStateOf(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return std::nullopt;
  return FileState{static_cast<uint64_t>(st.st_size), Nanoseconds(st.st_mtim),
                   Nanoseconds(st.st_ctim), static_cast<uint64_t>(st.st_ino),
                   static_cast<uint64_t>(st.st_dev)};
}

}  // namespace tg::server
